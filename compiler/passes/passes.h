// The planner's rewrite pipeline, in order. Each pass is one file in compiler/passes/
// whose header comment states the algebra it relies on.
#pragma once

#include "compiler/ir/graph.h"

#include <functional>
#include <string_view>
#include <vector>

namespace kfuse::passes {

struct Pass {
  std::string_view name;
  ir::Graph (*run)(const ir::Graph &g, ir::Mode mode);
};

ir::Graph canonicalize_linear(const ir::Graph &g, ir::Mode mode);
ir::Graph transposed_operands(const ir::Graph &g, ir::Mode mode);
ir::Graph columns_from_reductions(const ir::Graph &g, ir::Mode mode);
// Whether columns_from_reductions rewrites `v`: a sum or mean over the rows of a matrix.
bool becomes_column_statistic(const ir::Graph &g, const ir::Value &v);
ir::Graph lower_batchnorm(const ir::Graph &g, ir::Mode mode);
ir::Graph fold_affine(const ir::Graph &g, ir::Mode mode);
ir::Graph absorb_affine_into_stats(const ir::Graph &g, ir::Mode mode);
ir::Graph simplify_identities(const ir::Graph &g, ir::Mode mode);
ir::Graph eliminate_dead(const ir::Graph &g, ir::Mode mode);
// Not in the pipeline: it changes what is computed (precision bf16 rounds GEMM operands), so
// lower() applies it to the parsed graph, which then defines the pipeline.
ir::Graph autocast_bf16(const ir::Graph &g, ir::Mode mode);
// Not in the pipeline, for the same reason: precision tf32 rounds the weights a GEMM on the
// Hopper mainloop reads; lower() applies it after k_major_operands.
ir::Graph round_tf32(const ir::Graph &g, ir::Mode mode);
// Not in the pipeline: every GEMM as a linear of K-major operands, which the Hopper mainloop
// reads; lower() applies it for targets whose GEMMs run on it (hopper_gemms).
ir::Graph k_major_operands(const ir::Graph &g, ir::Mode mode);

// The pipeline: canonicalize, read transposed GEMM operands in place, turn sums and means over the
// rows into column statistics, lower batchnorm for the mode, fold affine chains, move affine maps
// across column statistics, fold again what that exposed, then clean up.
const std::vector<Pass> &pipeline();

// The passes an unfused plan needs: only the lowerings, no fusion.
const std::vector<Pass> &unfused_pipeline();

// Runs `passes`; `after_each` (if set) sees the graph after every pass.
ir::Graph run_pipeline(const ir::Graph &g, ir::Mode mode, const std::vector<Pass> &passes,
                       const std::function<void(const Pass &, const ir::Graph &)> &after_each = {});

} // namespace kfuse::passes
