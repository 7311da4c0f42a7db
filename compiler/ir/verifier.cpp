#include "compiler/ir/verifier.h"

#include "compiler/ir/infer.h"
#include "compiler/ir/printer.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

namespace kfuse::ir {
namespace {

class Verifier {
public:
  explicit Verifier(const Graph &g) : g_(g) {}

  void run() {
    if (!is_kf_name(g_.name))
      throw VerifyError(-1, fmt::format("pipeline name '{}' is not a .kf name", g_.name));
    for (const std::string &d : g_.dims) {
      if (!is_kf_name(d))
        throw VerifyError(-1, fmt::format("dim '{}' is not a .kf name", d));
      if (!names_.insert(d).second)
        throw VerifyError(-1, fmt::format("dim '{}' is declared twice", d));
    }
    for (size_t i = 0; i < g_.values.size(); ++i) {
      auto id = static_cast<ValueId>(i);
      if (g_[id].is_op())
        op(id);
      else
        declaration(id);
    }
    if (g_.outputs.empty())
      throw VerifyError(-1, fmt::format("pipeline '{}' has no outputs", g_.name));
    for (ValueId o : g_.outputs) {
      if (o < 0 || static_cast<size_t>(o) >= g_.values.size())
        throw VerifyError(-1, fmt::format("output %{} does not exist", o));
      if (g_[o].is_effect())
        throw VerifyError(
            o, fmt::format("output {} is an effect, which has no value", describe(g_, o)));
      if (!is_float(g_[o].type.dtype))
        throw VerifyError(o, fmt::format("output {} is {}: an i64 tensor is only an input read as "
                                         "class indices",
                                         describe(g_, o), g_[o].type.str()));
    }
  }

private:
  [[noreturn]] void fail(ValueId id, const std::string &problem) const {
    throw VerifyError(id, fmt::format("{}: {}", describe(g_, id), problem));
  }

  void declaration(ValueId id) {
    const Value &v = g_[id];
    if (!is_kf_name(v.name))
      fail(id, "the name is not a .kf name");
    if (!names_.insert(v.name).second)
      fail(id, "the name is already declared");
    if (!v.args.empty() || !v.attrs.empty())
      fail(id, "a declaration has no arguments or attributes");
    if (v.type.rank() < 1 || v.type.rank() > 4)
      fail(id, fmt::format("type {} has rank {}; tensors have rank 1 to 4", v.type.str(),
                           v.type.rank()));
    if (v.kind != ValueKind::Input && !is_float(v.type.dtype))
      fail(id, fmt::format("type {}: an i64 tensor is only an input read as class indices",
                           v.type.str()));
    extents(id);
  }

  // A declaration's extents are dims and constants; an op's may be products (a reshape's B*T).
  void extents(ValueId id) const {
    bool op = g_[id].is_op();
    for (const Dim &d : g_[id].type.shape)
      if (!valid_extent(d, op))
        fail(id, fmt::format("type {} has an extent that is not a declared dim or an integer in "
                             "[1, {}]{}",
                             g_[id].type.str(), kMaxExtent, op ? " or a product of them" : ""));
    if (auto problem = size_problem(g_[id].type))
      fail(id, *problem);
  }

  // A declared dim, a constant in [1, kMaxExtent], or (where `products`) a product of declared
  // dims and such a constant.
  bool valid_extent(const Dim &d, bool products) const {
    if (!d.sym.empty())
      return declared_dim(d.sym);
    if (!products && !d.factors.empty())
      return false;
    for (const std::string &f : d.factors)
      if (!declared_dim(f))
        return false;
    return d.value >= 1 && d.value <= kMaxExtent;
  }

  bool declared_dim(const std::string &name) const {
    for (const std::string &d : g_.dims)
      if (d == name)
        return true;
    return false;
  }

  void attributes(ValueId id) const {
    const Value &v = g_[id];
    const OpInfo &info = op_info(v.op);
    for (const auto &[key, value] : v.attrs) {
      bool known = false;
      for (const AttrSpec &spec : info.attrs)
        known |= spec.name == key;
      if (!known)
        fail(id, fmt::format("{} has no attribute '{}'", info.name, key));
    }
    for (const AttrSpec &spec : info.attrs) {
      auto it = v.attrs.find(std::string(spec.name));
      if (it == v.attrs.end())
        fail(id, fmt::format("the attribute '{}' is missing", spec.name));
      if (auto problem = check_attr(spec, it->second))
        fail(id, fmt::format("attribute '{}' {}", spec.name, *problem));
      for (const Dim &d : it->second.shape)
        if (d != Dim::constant(-1) && !valid_extent(d, true))
          fail(id, fmt::format("attribute '{}' has the extent {}, which is not a declared dim, "
                               "an integer in [1, {}] or a product of them",
                               spec.name, d.str(), kMaxExtent));
    }
    if (info.rule)
      if (auto problem = info.rule(v.attrs))
        fail(id, *problem);
  }

  void op(ValueId id) {
    const Value &v = g_[id];
    std::vector<TensorType> arg_types;
    for (ValueId a : v.args) {
      if (a < 0 || a >= id)
        fail(id, fmt::format("argument %{} does not precede it", a));
      arg_types.push_back(g_[a].type);
    }
    attributes(id);
    try {
      TensorType inferred = infer_type(v.op, arg_types, v.attrs);
      if (inferred != v.type)
        fail(id, fmt::format("its type is recorded as {} but its arguments give {}", v.type.str(),
                             inferred.str()));
    } catch (const TypeError &e) {
      fail(id, e.what());
    }
    extents(id);
    std::vector<int> updated = updated_args(v);
    for (size_t k = 0; k < updated.size(); ++k) {
      ValueId s = v.args[static_cast<size_t>(updated[k])];
      std::string_view role = k == 0 ? "running_mean" : "running_var";
      if (g_[s].kind != ValueKind::State)
        fail(id, fmt::format("its {} is {}, not a state", role, describe(g_, s)));
      if (!updated_.insert(s).second)
        fail(id, fmt::format("it updates state '{}', which is already updated", g_[s].name));
    }
  }

  const Graph &g_;
  std::set<std::string> names_; // dims and declarations
  std::set<ValueId> updated_;   // states
};

} // namespace

std::vector<int> updated_args(const Value &v) {
  if (!v.is_op())
    return {};
  int n = static_cast<int>(v.args.size());
  if (v.op == OpKind::BatchNorm && n >= 2)
    return {n - 2, n - 1};
  if (v.op == OpKind::BnUpdate && n >= 2)
    return {0, 1};
  return {};
}

void verify(const Graph &g) { Verifier(g).run(); }

} // namespace kfuse::ir
