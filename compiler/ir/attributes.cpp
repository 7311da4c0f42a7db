// Attribute values against their specs (compiler/ir/ops.h): what a value must be, whether it is,
// defaults, the numbers the fp64 semantics take, and the op table's constraints between
// attributes (compiler/ir/op_attrs.h).
#include "compiler/ir/ops.h"

#include "compiler/ir/op_attrs.h"
#include "compiler/ir/printer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kfuse::ir {
namespace {

std::string bound_text(double v) { return format_number(v); }

// The interval a number attribute's value must lie in: its spec's range, and for an integer
// (every Int; a Number or OptNumber whose range says so) what an `int` of the generated code
// holds, so that no value is cut when it is emitted.
Range value_range(const AttrSpec &spec) {
  Range r = spec.range;
  r.integer = r.integer || spec.kind == AttrKind::Int;
  if (r.integer) {
    r.lo = std::max(r.lo, -kMaxKernelInt);
    r.hi = std::min(r.hi, kMaxKernelInt);
  }
  return r;
}

// "a number > 0", "an integer in [1, 2147483647]", "a number".
std::string range_expectation(const Range &r) {
  std::string_view what = r.integer ? "an integer" : "a number";
  bool lo = std::isfinite(r.lo), hi = std::isfinite(r.hi);
  if (lo && hi)
    return fmt::format("{} in {}{}, {}{}", what, r.lo_open ? "(" : "[", bound_text(r.lo),
                       bound_text(r.hi), r.hi_open ? ")" : "]");
  if (lo)
    return fmt::format("{} {} {}", what, r.lo_open ? ">" : "≥", bound_text(r.lo));
  if (hi)
    return fmt::format("{} {} {}", what, r.hi_open ? "<" : "≤", bound_text(r.hi));
  return std::string(what);
}

bool in_range(const Range &r, double x) {
  if (!std::isfinite(x) || x < r.lo || x > r.hi || (r.lo_open && x == r.lo) ||
      (r.hi_open && x == r.hi))
    return false;
  return !r.integer || std::floor(x) == x;
}

} // namespace

std::vector<std::string_view> choice_words(const AttrSpec &spec) {
  std::vector<std::string_view> words;
  std::string_view rest = spec.choices;
  while (!rest.empty()) {
    size_t bar = rest.find('|');
    words.push_back(rest.substr(0, bar));
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
  }
  return words;
}

std::string attr_expectation(const AttrSpec &spec) {
  switch (spec.kind) {
  case AttrKind::Number:
  case AttrKind::Int:
    return range_expectation(value_range(spec));
  case AttrKind::OptNumber: // none is written by leaving the attribute out
    return range_expectation(value_range(spec));
  case AttrKind::Bool:
    return "true or false";
  case AttrKind::Extent:
    return "a positive integer, a dim name or a product of them";
  case AttrKind::DType:
    return "an element type (f32, f16 or bf16)";
  case AttrKind::Shape:
    return "a shape ([B*T, 768])";
  case AttrKind::Choice: {
    std::vector<std::string> quoted;
    for (std::string_view w : choice_words(spec))
      quoted.push_back(fmt::format("\"{}\"", w));
    std::string s;
    for (size_t i = 0; i < quoted.size(); ++i)
      s += (i == 0 ? "" : i + 1 == quoted.size() ? " or " : ", ") + quoted[i];
    return s;
  }
  }
  return "?";
}

std::optional<std::string> check_attr(const AttrSpec &spec, const AttrValue &a) {
  auto got = [&] {
    if (a.shape.size() == 1)
      return a.shape.front().str();
    return a.dim.empty() ? format_number(a.number) : fmt::format("'{}'", a.dim);
  };
  auto wrong = [&] { return fmt::format("must be {}, got {}", attr_expectation(spec), got()); };
  switch (spec.kind) {
  case AttrKind::Number:
  case AttrKind::Int:
    if (!a.dim.empty() || !in_range(value_range(spec), a.number))
      return wrong();
    return std::nullopt;
  case AttrKind::OptNumber: // none is the spec's infinite default
    if (!a.dim.empty() || !(a.number == spec.number || in_range(value_range(spec), a.number)))
      return wrong();
    return std::nullopt;
  case AttrKind::Bool:
    if (!a.dim.empty() || (a.number != 0 && a.number != 1))
      return wrong();
    return std::nullopt;
  case AttrKind::Extent: { // its dim names are checked against the graph's dims by the verifier
    if (!a.dim.empty() || a.number != 0 || a.shape.size() != 1)
      return wrong();
    const Dim &d = a.shape.front();
    if (d.sym.empty() && (d.value < 1 || d.value > kMaxExtent))
      return fmt::format("must be in [1, {}], got {}", kMaxExtent, d.str());
    return std::nullopt;
  }
  case AttrKind::DType:
    if (a.number != 0 || !parse_dtype(a.dim) || !is_float(*parse_dtype(a.dim)))
      return wrong();
    return std::nullopt;
  case AttrKind::Shape: // its extents are the view's to check (compiler/ir/views.h)
    if (a.shape.empty() || a.shape.size() > 4)
      return fmt::format("must have 1 to 4 extents, got {}", a.shape.size());
    return std::nullopt;
  case AttrKind::Choice:
    for (std::string_view w : choice_words(spec))
      if (a.number == 0 && a.dim == w)
        return std::nullopt;
    return fmt::format("must be {}, got \"{}\"", attr_expectation(spec), a.dim);
  }
  return wrong();
}

AttrValue default_attr(const AttrSpec &spec) {
  if (spec.kind == AttrKind::Choice)
    return {0, std::string(choice_words(spec).at(0))};
  return {spec.number, {}};
}

std::vector<double> attr_numbers(const OpInfo &op, const AttrMap &attrs) {
  std::vector<double> out;
  for (const AttrSpec &spec : op.attrs) {
    const AttrValue &a = attrs.at(std::string(spec.name));
    if (spec.kind == AttrKind::DType) { // the type's DType value
      out.push_back(static_cast<double>(*parse_dtype(a.dim)));
      continue;
    }
    if (spec.kind != AttrKind::Choice) {
      out.push_back(a.number);
      continue;
    }
    std::vector<std::string_view> words = choice_words(spec);
    size_t i = 0;
    while (i < words.size() && words[i] != a.dim)
      ++i;
    out.push_back(static_cast<double>(i));
  }
  return out;
}

namespace op_attrs {

std::optional<std::string> min_below_max(const AttrMap &a) {
  double lo = a.at("min_val").number, hi = a.at("max_val").number;
  if (lo < hi)
    return std::nullopt;
  return fmt::format("hardtanh needs min_val < max_val (as torch.nn.Hardtanh), got min_val={} "
                     "and max_val={}",
                     format_number(lo), format_number(hi));
}

std::optional<std::string> some_bound(const AttrMap &a) {
  if (std::isfinite(a.at("min").number) || std::isfinite(a.at("max").number))
    return std::nullopt;
  return std::string("clamp needs at least one of the attributes 'min' and 'max'");
}

} // namespace op_attrs

} // namespace kfuse::ir
