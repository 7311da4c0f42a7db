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
  case KernelKind::Summary:
    return "summary";
  case KernelKind::Row:
    return "row";
  case KernelKind::Elementwise:
    return "elementwise";
  case KernelKind::Transpose:
    return "transpose";
  }
  return "?";
}

bool is_column_value(const ir::TensorType &t) {
  return t.rank() < 2 || t.matrix_view().shape[0] == ir::Dim::constant(1);
}

ir::TensorType buffer_type(const Plan &p, ir::ValueId v) {
  auto it = std::lower_bound(p.intermediates.begin(), p.intermediates.end(), v,
                             [](const Intermediate &i, ir::ValueId id) { return i.value < id; });
  return it != p.intermediates.end() && it->value == v ? it->type : p.graph[v].type;
}

bool computes(const Kernel &k, ir::ValueId v) {
  return std::binary_search(k.computes.begin(), k.computes.end(), v);
}

std::set<ir::ValueId> written(const ir::Graph &g, const Kernel &k) {
  std::set<ir::ValueId> out(k.stores.begin(), k.stores.end());
  for (ir::ValueId id : k.computes)
    if (g[id].is_effect())
      for (int a : ir::updated_args(g[id]))
        out.insert(g[id].args[static_cast<size_t>(a)]);
  return out;
}

bool writes(const ir::Graph &g, const Kernel &k, ir::ValueId v) { return written(g, k).count(v); }

} // namespace kfuse::plan
