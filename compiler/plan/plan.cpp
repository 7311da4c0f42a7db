#include "compiler/plan/plan.h"

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

ir::TensorType buffer_type(const Plan &p, ir::ValueId v) {
  for (const Intermediate &i : p.intermediates)
    if (i.value == v)
      return i.type;
  return p.graph[v].type;
}

} // namespace kfuse::plan
