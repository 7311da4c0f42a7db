#include "compiler/plan/plan.h"

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

int Plan::producer(ir::ValueId v) const {
  for (size_t k = 0; k < kernels.size(); ++k)
    if (std::count(kernels[k].stores.begin(), kernels[k].stores.end(), v))
      return static_cast<int>(k);
  return -1;
}

int Plan::partials_producer(ir::ValueId v) const {
  for (size_t k = 0; k < kernels.size(); ++k)
    if (kernels[k].stats_of == v && kernels[k].kind != KernelKind::Column)
      return static_cast<int>(k);
  return -1;
}

} // namespace kfuse::plan
