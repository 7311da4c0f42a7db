// Proof by interpretation: runs a graph, each stage of the pass pipeline and the final
// plan through the fp64 reference interpreter on the same tensors, and measures how far
// they drift apart (outputs and state updates, norm-wise relative error).
#pragma once

#include "compiler/ir/interpreter.h"
#include "compiler/passes/passes.h"
#include "compiler/plan/plan.h"

#include <functional>
#include <string>

namespace kfuse::plan {

struct RunResult {
  std::vector<ir::HostTensor> outputs;
  ir::TensorMap tensors; // every declared tensor after the run (states updated)
  std::string error;     // the InterpretError message, if the run was rejected
};

RunResult run_graph(const ir::Graph &g, ir::Mode mode, const ir::DimBindings &dims,
                    ir::TensorMap tensors);
RunResult run_plan(const Plan &p, const ir::DimBindings &dims, ir::TensorMap tensors);

// Largest norm-wise relative error over outputs and updated tensors, with norms below 1e-3
// per element counted as 1e-3 (rounding noise on values that are exactly zero is not a
// disagreement); elements equal in both runs (the same infinity, both NaN) agree, and a
// non-finite element on one side only disagrees. Infinity when one run was rejected and the
// other was not, when shapes differ, or when non-finite elements differ.
double disagreement(const RunResult &a, const RunResult &b);

// `tensors` (declarations of `g`) with about one element in eight of each float input replaced
// by a special value: +-0, +-inf, NaN, +-1e-30 or +-1e30, rounded to the input's type (an i64
// input holds class indices, which have none). Params and
// states (the per-feature vectors the passes fold algebraically) keep their values: a fold
// distributes a vector over a sum and multiplies vectors together,
// (y * a1 + b1) * a2 = y * (a1 * a2) + b1 * a2, exact in real arithmetic and for every special
// value of y, but not for a zero or infinite vector (a1 = 0, a2 = 1 / 0: 0 * inf is NaN where
// the file gives inf) or a huge one, and a product of values near the type's range overflows in
// one order only ((y * a1) * a2 against y * (a1 * a2)). A statistic of an input is such a vector
// where the input holds an infinity or 1e30 (col_mean(x) as a scale).
// Deterministic in `seed`.
ir::TensorMap with_special_values(const ir::Graph &g, ir::TensorMap tensors, uint64_t seed);

struct StageError {
  std::string stage;   // a pass name, or "plan"
  double error;        // the worst over the draws
  std::string draw;    // the draw that showed it: "random", "special values", ...
  double random_error; // on the random draw alone
};

// Runs `passes` in order, then partitions; returns each stage's disagreement with the input
// graph, in order, the worse of two draws: random tensors (seeded; `tweak` may edit them
// first), and the same with special values (with_special_values), where a rewrite that changes
// the sign of a zero, an infinity or a NaN (1 / (x * 0) from -inf to +inf) disagrees. Where the
// input graph itself fails at `dims` (a view whose rows the dims make differ), every stage that
// fails alike agrees; `file_error`, where given, receives that failure (empty where it runs).
std::vector<StageError> check_planner(const ir::Graph &g, ir::Mode mode,
                                      const ir::DimBindings &dims, uint64_t seed,
                                      const std::vector<passes::Pass> &passes,
                                      const std::function<void(ir::TensorMap &)> &tweak = {},
                                      std::string *file_error = nullptr);

// The first stage over `tolerance`, else the worst stage.
StageError first_failure(const std::vector<StageError> &stages, double tolerance);

} // namespace kfuse::plan
