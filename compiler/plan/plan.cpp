#include "compiler/plan/plan.h"

#include "compiler/ir/verifier.h"

#include <algorithm>

namespace kfuse::plan {

std::string_view kernel_kind_name(KernelKind k) {
  switch (k) {
  case KernelKind::Gemm:
    return "gemm";
  case KernelKind::ColPartials:
    return "col_partials";
  case KernelKind::Column:
    return "column";
  case KernelKind::Row:
    return "row";
  case KernelKind::Elementwise:
    return "elementwise";
  }
  return "?";
}

bool is_column_value(const ir::TensorType &t) {
  return t.rank() < 2 || t.matrix_view().shape[0] == ir::Dim::constant(1);
}

ir::TensorType buffer_type(const Plan &p, ir::ValueId v) {
  for (const Intermediate &i : p.intermediates)
    if (i.value == v)
      return i.type;
  return p.graph[v].type;
}

bool writes(const ir::Graph &g, const Kernel &k, ir::ValueId v) {
  if (std::count(k.stores.begin(), k.stores.end(), v))
    return true;
  for (ir::ValueId id : k.computes)
    for (int a : ir::updated_args(g[id]))
      if (g[id].args[static_cast<size_t>(a)] == v)
        return true;
  return false;
}

} // namespace kfuse::plan
