#include "compiler/ir/graph.h"

#include "compiler/ir/infer.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/views.h"

#include <algorithm>

#include <fmt/format.h>

namespace kfuse::ir {

std::string_view mode_name(Mode m) { return m == Mode::Train ? "train" : "eval"; }

std::string_view value_kind_name(ValueKind k) {
  switch (k) {
  case ValueKind::Input:
    return "input";
  case ValueKind::Param:
    return "param";
  case ValueKind::State:
    return "state";
  case ValueKind::Op:
    return "op";
  }
  return "?";
}

bool is_batch_statistic(const Value &v) {
  return v.is_op() && op_info(v.op).cls == OpClass::ColReduce && v.attr("local") == 0;
}

std::string describe(const Graph &g, ValueId id) {
  const Value &v = g[id];
  if (!v.is_op())
    return fmt::format("{} '{}' (%{})", value_kind_name(v.kind), v.name, id);
  if (v.name.empty())
    return fmt::format("%{} ({})", id, op_info(v.op).name);
  return fmt::format("'{}' (%{}, {})", v.name, id, op_info(v.op).name);
}

ValueId Graph::find(const std::string &declared_name) const {
  for (size_t i = 0; i < values.size(); ++i)
    if (!values[i].is_op() && values[i].name == declared_name)
      return static_cast<ValueId>(i);
  return -1;
}

std::vector<ValueId> Graph::declared(ValueKind kind) const {
  std::vector<ValueId> ids;
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].kind == kind)
      ids.push_back(static_cast<ValueId>(i));
  return ids;
}

std::vector<std::vector<ValueId>> Graph::users() const {
  std::vector<std::vector<ValueId>> u(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    for (ValueId a : values[i].args)
      u.at(static_cast<size_t>(a)).push_back(static_cast<ValueId>(i));
  return u;
}

Graph matrix_view(const Graph &g) {
  Graph m = g;
  for (Value &v : m.values) {
    // Inference allows only the last axis of a rank-3/4 argument, which is axis 1 of its view;
    // softmax keeps its argument's rank and a reduction of rank 3/4 keeps its dim, so the op's
    // own rank tells (its argument may be a view of another rank).
    if (v.is_op() && op_info(v.op).cls != OpClass::View && v.attrs.count("dim") &&
        v.type.rank() > 2)
      v.attrs["dim"].number = -1;
    v.type = v.type.matrix_view();
    for (ValueId &a : v.args)
      a = view_source(g, a);
  }
  for (ValueId &o : m.outputs)
    o = view_source(g, o);
  return m;
}

GraphBuilder::GraphBuilder(std::string name, std::vector<std::string> dims) {
  g_.name = std::move(name);
  g_.dims = std::move(dims);
}

ValueId GraphBuilder::declare(ValueKind kind, std::string name, TensorType type, SourceLoc loc) {
  Value v;
  v.name = std::move(name);
  v.kind = kind;
  v.type = std::move(type);
  v.loc = loc;
  g_.values.push_back(std::move(v));
  return static_cast<ValueId>(g_.values.size() - 1);
}

ValueId GraphBuilder::op(OpKind op, std::vector<ValueId> args,
                         std::map<std::string, AttrValue> attrs, std::string name, SourceLoc loc) {
  const OpInfo &info = op_info(op);
  for (const auto &[key, value] : attrs) {
    bool known = false;
    for (const AttrSpec &spec : info.attrs)
      known |= spec.name == key;
    if (!known)
      throw TypeError(-1, fmt::format("{} has no attribute '{}'", info.name, key));
  }
  if (op == OpKind::Dropout) {
    // Each dropout draws its own stream: by default the next one after the graph's dropouts.
    int64_t streams = std::count_if(g_.values.begin(), g_.values.end(), [](const Value &v) {
      return v.is_op() && v.op == OpKind::Dropout;
    });
    attrs.emplace("stream", AttrValue{static_cast<double>(streams), {}});
    for (const Value &v : g_.values)
      if (v.is_op() && v.op == OpKind::Dropout && v.attrs.at("stream") == attrs.at("stream"))
        throw TypeError(-1, fmt::format("dropout stream {} is drawn by another dropout already; "
                                        "two dropouts need distinct streams",
                                        format_number(attrs.at("stream").number)));
  }
  for (const AttrSpec &spec : info.attrs) {
    auto it = attrs.find(std::string(spec.name));
    if (it == attrs.end()) {
      if (spec.required)
        throw TypeError(-1, fmt::format("{} requires the attribute '{}'", info.name, spec.name));
      attrs[std::string(spec.name)] = default_attr(spec);
    } else if (auto problem = check_attr(spec, it->second)) {
      throw TypeError(-1, fmt::format("attribute '{}' of {} {}", spec.name, info.name, *problem));
    }
  }
  if (info.rule)
    if (auto problem = info.rule(attrs))
      throw TypeError(-1, *problem);
  std::vector<TensorType> types;
  for (ValueId a : args)
    types.push_back(g_.values.at(static_cast<size_t>(a)).type);
  Value v;
  v.type = infer_type(op, types, attrs);
  v.name = std::move(name);
  v.kind = ValueKind::Op;
  v.op = op;
  v.args = std::move(args);
  v.attrs = std::move(attrs);
  v.loc = loc;
  g_.values.push_back(std::move(v));
  return static_cast<ValueId>(g_.values.size() - 1);
}

} // namespace kfuse::ir
