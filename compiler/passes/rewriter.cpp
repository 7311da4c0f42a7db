#include "compiler/passes/rewriter.h"

#include <algorithm>
#include <iterator>

namespace kfuse::passes {

using namespace ir;

Rewriter::Rewriter(const Graph &g, std::string pass_name)
    : g_(g), pass_(std::move(pass_name)), b_(g.name, g.dims), uses_(g.values.size(), 0),
      live_(g.values.size(), false) {
  for (ValueId o : g.outputs) {
    live_[static_cast<size_t>(o)] = true;
    ++uses_[static_cast<size_t>(o)];
  }
  for (size_t i = g.values.size(); i-- > 0;) {
    const Value &v = g.values[i];
    live_[i] = live_[i] || v.is_effect();
    if (live_[i])
      for (ValueId a : v.args) {
        live_[static_cast<size_t>(a)] = true;
        ++uses_[static_cast<size_t>(a)];
      }
  }
}

ValueId Rewriter::op(OpKind kind, std::vector<ValueId> args,
                     std::map<std::string, AttrValue> attrs) {
  ValueId id = b_.op(kind, std::move(args), std::move(attrs));
  const Value &old = g_[current_];
  Value &v = b_.at(id);
  v.loc = old.loc;
  v.origins = old.origins;
  v.rewrites = old.rewrites;
  if (std::find(v.rewrites.begin(), v.rewrites.end(), pass_) == v.rewrites.end())
    v.rewrites.push_back(pass_);
  return id;
}

void Rewriter::merge_provenance(ValueId into, ValueId from) {
  Value &v = b_.at(into), &f = b_.at(from);
  // Take over `from`'s list (no copy), with `into`'s own origins first and appended.
  std::vector<std::string> own = std::move(v.origins);
  v.origins = std::move(f.origins);
  f.origins.clear();
  if (!own.empty()) {
    if (!v.origins.empty())
      v.origins.push_back(std::move(v.origins.front()));
    v.origins.resize(std::max<size_t>(v.origins.size(), 1));
    v.origins.front() = std::move(own.front());
    std::move(own.begin() + 1, own.end(), std::back_inserter(v.origins));
  }
  for (const std::string &s : f.rewrites) // a pass name each: a few at most
    if (std::find(v.rewrites.begin(), v.rewrites.end(), s) == v.rewrites.end())
      v.rewrites.push_back(s);
}

ValueId Rewriter::constant(double value, DType dtype) {
  return op(
      OpKind::Constant, {},
      {{"value", AttrValue{value, {}}}, {"dtype", AttrValue{0, std::string(dtype_name(dtype))}}});
}

std::optional<double> Rewriter::constant_value(ValueId id) const {
  const Value &v = b_.graph()[id];
  if (v.is_op() && v.op == OpKind::Constant)
    return v.attr("value");
  return std::nullopt;
}

Graph Rewriter::run(const std::function<ValueId(Rewriter &, ValueId)> &rewrite) {
  map_.assign(g_.values.size(), -1);
  for (size_t i = 0; i < g_.values.size(); ++i) {
    const Value &v = g_.values[i];
    current_ = static_cast<ValueId>(i);
    ValueId id = v.is_op() ? rewrite(*this, current_) : -1;
    if (id == kDrop)
      continue;
    if (id < 0) {
      if (!v.is_op()) {
        id = b_.declare(v.kind, v.name, v.type, v.loc);
      } else {
        std::vector<ValueId> args;
        for (ValueId a : v.args)
          args.push_back(map(a));
        id = b_.op(v.op, args, v.attrs, {}, v.loc);
        Value &nv = b_.at(id);
        nv.origins = v.origins;
        nv.rewrites = v.rewrites;
      }
    }
    if (b_.graph()[id].name.empty())
      b_.at(id).name = v.name;
    map_[i] = id;
  }
  for (ValueId o : g_.outputs)
    b_.add_output(map(o));
  Graph out = b_.finish();
  out.loc = g_.loc;
  return out;
}

} // namespace kfuse::passes
