// Ops of the table (compiler/ir/ops.cpp) by kind, name and class.
#include "compiler/ir/op_class.h"
#include "compiler/ir/ops.h"

namespace kfuse::ir {

std::string_view op_class_name(OpClass c) { return class_traits(c).name; }

const OpInfo &op_info(OpKind k) { return all_ops()[static_cast<size_t>(k)]; }

std::optional<OpKind> op_by_name(std::string_view name) {
  for (const OpInfo &op : all_ops())
    if (op.name == name)
      return op.kind;
  return std::nullopt;
}

std::vector<OpKind> ops_of_class(OpClass cls, int arity, bool internal) {
  std::vector<OpKind> out;
  for (const OpInfo &op : all_ops())
    if (op.cls == cls && (internal || !op.internal) &&
        (arity < 0 || (op.min_args <= arity && arity <= op.max_args)))
      out.push_back(op.kind);
  return out;
}

bool is_pointwise(OpKind k) { return class_traits(op_info(k).cls).pointwise(); }

} // namespace kfuse::ir
