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

} // namespace kfuse::plan
