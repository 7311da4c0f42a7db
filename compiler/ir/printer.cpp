#include "compiler/ir/printer.h"

#include <fmt/format.h>

#include <cmath>

#include <map>
#include <set>

namespace kfuse::ir {
namespace {

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

} // namespace

bool is_kf_keyword(std::string_view word) {
  for (std::string_view k : {"pipeline", "dim", "input", "param", "state", "return"})
    if (word == k)
      return true;
  return false;
}

bool is_kf_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength || !is_ident_start(name[0]))
    return false;
  for (char c : name)
    if (!is_ident_char(c))
      return false;
  return !is_kf_keyword(name);
}

bool printed(const AttrSpec &spec, const AttrValue &a) {
  if (!spec.printed_at_default && a == default_attr(spec))
    return false;
  return spec.kind != AttrKind::OptNumber || std::isfinite(a.number);
}

std::string format_attr(const AttrSpec &spec, const AttrValue &a) {
  switch (spec.kind) {
  case AttrKind::Number:
  case AttrKind::OptNumber:
    return format_number(a.number);
  case AttrKind::Int:
    return fmt::format("{}", static_cast<int64_t>(a.number));
  case AttrKind::Extent:
    return a.shape.front().str();
  case AttrKind::DType:
    return a.dim;
  case AttrKind::Choice:
    return "\"" + a.dim + "\"";
  case AttrKind::Bool:
    return a.number != 0 ? "true" : "false";
  case AttrKind::Shape:
    return TensorType{DType::F32, a.shape}.shape_str();
  }
  return "?";
}

std::string format_number(double v) {
  // fmt's shortest round-trip form, with the exponent written as the lexer reads it most
  // simply: "1e-05" -> "1e-5", "1e+16" -> "1e16".
  std::string s = fmt::format("{}", v);
  size_t e = s.find('e');
  if (e == std::string::npos)
    return s;
  std::string mantissa = s.substr(0, e), exponent = s.substr(e + 1);
  bool negative = !exponent.empty() && exponent[0] == '-';
  if (!exponent.empty() && (exponent[0] == '-' || exponent[0] == '+'))
    exponent.erase(0, 1);
  exponent.erase(0, std::min(exponent.find_first_not_of('0'), exponent.size() - 1));
  return mantissa + "e" + (negative ? "-" : "") + exponent;
}

std::vector<std::string> printed_names(const Graph &g) {
  // Every name written anywhere in the graph: a made-up name avoids all of them, so it
  // cannot capture a name that a later value keeps.
  std::set<std::string> written(g.dims.begin(), g.dims.end());
  for (const Value &v : g.values)
    written.insert(v.name);
  std::set<std::string> given(g.dims.begin(), g.dims.end());
  std::map<std::string, int> next_suffix;
  int next_temp = 1;
  auto fresh = [&](const std::string &candidate) {
    return is_kf_name(candidate) && !written.count(candidate) && !given.count(candidate);
  };

  std::vector<std::string> names(g.values.size());
  for (size_t i = 0; i < g.values.size(); ++i)
    if (!g.values[i].is_op())
      given.insert(names[i] = g.values[i].name);
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value &v = g.values[i];
    if (!v.is_op() || v.is_effect())
      continue;
    std::string name;
    if (is_kf_name(v.name)) {
      if (!given.count(v.name)) {
        name = v.name;
      } else if (v.name.size() + 12 <= kMaxNameLength) { // else too long for a suffix
        int &k = next_suffix[v.name];
        while (name.empty())
          if (std::string c = fmt::format("{}_{}", v.name, ++k); fresh(c))
            name = c;
      }
    }
    while (name.empty())
      if (std::string c = fmt::format("t{}", next_temp++); fresh(c))
        name = c;
    given.insert(names[i] = name);
  }
  return names;
}

std::string print_statement(const Graph &g, const std::vector<std::string> &names, ValueId id) {
  const Value &v = g[id];
  std::vector<std::string> args;
  for (ValueId a : v.args)
    args.push_back(names.at(static_cast<size_t>(a)));
  const OpInfo &info = op_info(v.op);
  for (const AttrSpec &spec : info.attrs) {
    const AttrValue &a = v.attrs.at(std::string(spec.name));
    if (printed(spec, a))
      args.push_back(fmt::format("{}={}", spec.name, format_attr(spec, a)));
  }
  std::string call = fmt::format("{}({})", info.name, fmt::join(args, ", "));
  return v.is_effect() ? call : fmt::format("{} = {}", names.at(static_cast<size_t>(id)), call);
}

std::string print_kf(const Graph &g) {
  std::vector<std::string> names = printed_names(g);
  std::string out = fmt::format("pipeline {} {{\n", g.name);
  if (!g.dims.empty())
    out += fmt::format("  dim {}\n", fmt::join(g.dims, ", "));
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value &v = g.values[i];
    if (!v.is_op())
      out += fmt::format("  {}  {}: {}\n", value_kind_name(v.kind), names[i], v.type.str());
  }
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].is_op())
      out += "  " + print_statement(g, names, static_cast<ValueId>(i)) + "\n";
  std::vector<std::string> outputs;
  for (ValueId o : g.outputs)
    outputs.push_back(names.at(static_cast<size_t>(o)));
  out += fmt::format("  return {}\n}}\n", fmt::join(outputs, ", "));
  return out;
}

} // namespace kfuse::ir
