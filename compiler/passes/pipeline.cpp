#include "compiler/passes/passes.h"

namespace kfuse::passes {

const std::vector<Pass> &pipeline() {
  static const std::vector<Pass> passes = {
      {"canonicalize_linear", canonicalize_linear},
      {"transposed_operands", transposed_operands},
      {"columns_from_reductions", columns_from_reductions},
      {"lower_batchnorm", lower_batchnorm},
      {"fold_affine", fold_affine},
      {"absorb_affine_into_stats", absorb_affine_into_stats},
      {"fold_affine", fold_affine},
      {"simplify_identities", simplify_identities},
      {"eliminate_dead", eliminate_dead},
  };
  return passes;
}

const std::vector<Pass> &unfused_pipeline() {
  static const std::vector<Pass> passes = {
      {"canonicalize_linear", canonicalize_linear},
      {"transposed_operands", transposed_operands},
      {"columns_from_reductions", columns_from_reductions},
      {"lower_batchnorm", lower_batchnorm},
      {"simplify_identities", simplify_identities},
      {"eliminate_dead", eliminate_dead},
  };
  return passes;
}

ir::Graph run_pipeline(const ir::Graph &g, ir::Mode mode, const std::vector<Pass> &passes,
                       const std::function<void(const Pass &, const ir::Graph &)> &after_each) {
  ir::Graph cur = g;
  for (const Pass &p : passes) {
    cur = p.run(cur, mode);
    if (after_each)
      after_each(p, cur);
  }
  return cur;
}

} // namespace kfuse::passes
