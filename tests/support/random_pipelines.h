// Random valid .kf pipelines for the planner's proof-by-interpretation tests and fuzzer.
//
// Ops are drawn from the op table by class (compiler/ir/ops.h), user and internal ops alike,
// so an op added to the table is generated without a change here; operand shapes come from
// the op's own shape rule (infer_type), argument domains from its scalar semantics
// (eval_unary / eval_binary are probed: an op that is not finite everywhere gets operands
// kept away from its poles). Pipelines mix GEMMs, batchnorm, row ops and elementwise chains
// and cover: reads of running statistics after the batchnorm that updates them, returned
// declarations and column values, [N, 1] and [1, F] operands, scalars, a second dim, values
// read several times (h * sigmoid(h)), explicit bn_update effects, reductions (sum, var, ...)
// whose [N, 1] or [1, F] results are used again, chains of reductions on [N, 1] results
// (sum(exp(h - max(h)))), layernorm / rmsnorm / groupnorm (groups dividing the width) /
// instancenorm, max_pool1d / avg_pool1d (constant widths only), cross_entropy and
// cross_entropy_rows of a chain's rows against a new i64 target, and chains of thousands of ops
// (squashed now and then by a bounded op so values stay finite). With `mixed_types`,
// declarations are f32, bf16 or f16 within the type rules (a GEMM's operands share the input's
// type, normalization parameters are the input's type or f32, binary ops promote), so the
// interpreter's roundings to each declared type are proved too. With `ranks`, the chain may
// start from a rank-3/4 input: ops that run on rank 3/4 (GEMMs, pointwise, softmax, layernorm,
// reductions along the last axis) take it as it is, the others its [rows, F] matrix, reached
// through a reshape (batchnorm then counts N*T rows); views (reshape back and forth, unsqueeze /
// squeeze pairs, a vector unsqueezed to [1, F] as a pointwise operand, a vector through an op as
// [1, F] and back) come up as ops of their own. Literals include +-0 and +-1e-30 (+-inf and
// +-1e30 with `huge_literals`).
#pragma once

#include "compiler/ir/ops.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace kfuse::testing {

// Where the generator's decisions come from.
class Choices {
public:
  virtual ~Choices() = default;
  virtual uint64_t next() = 0;
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
};

// A deterministic stream (splitmix64).
class SeededChoices final : public Choices {
public:
  explicit SeededChoices(uint64_t seed) : s_(seed * 7919 + 1) {}
  uint64_t next() override;

private:
  uint64_t s_;
};

// The bytes of a fuzzer input, two per decision, then zeros: libFuzzer's mutations of the
// bytes become structural changes of the pipeline.
class ByteChoices final : public Choices {
public:
  ByteChoices(const uint8_t *data, size_t size) : data_(data), size_(size) {}
  uint64_t next() override;

private:
  const uint8_t *data_;
  size_t size_, pos_ = 0;
};

struct PipelineShape {
  int min_ops = 2, max_ops = 8; // op statements of the main chain (helpers come on top)
  bool second_dim = true;       // may declare `dim M` (bind every dim of the graph)
  bool last_axis_rows = false;  // row ops only over the last axis (what the GPU generates)
  bool mixed_types = true;      // bf16 and f16 declarations beside f32 ones
  // Activations of rank 3 or 4 ([N, T, F], [2, N, F], [N, 2, T, F]) now and then, and views
  // (reshape to and from their [rows, F] matrix, unsqueeze / squeeze, vectors as [1, F]).
  bool ranks = true;
  // Views of per-feature vectors: a column value or param unsqueezed or reshaped to [1, F],
  // through a pointwise or row op, and squeezed or reshaped back to [F]
  // (squeeze(silu(unsqueeze(col_mean(x), dim=0)), dim=0)), then an operand like any vector.
  bool column_views = true;
  // Literals of special values beside ordinary ones: +-0 and +-1e-30.
  bool special_literals = true;
  // Literals +-1e30 and +-inf (written div(constant(value=+-1), constant(value=0)): the language
  // has no infinite literal). A literal is a per-feature vector to the passes, which distribute
  // such vectors over sums and multiply them together: exact in real arithmetic, not where a
  // vector is infinite (inf * (a - a) is NaN, (y + inf) - mean(y + inf) too) or overflows in one
  // order only; the proof's special values go in inputs only for this reason
  // (compiler/plan/agreement.h).
  bool huge_literals = false;
};

std::string random_pipeline(Choices &choices, const PipelineShape &shape, const std::string &name);

// The small pipelines of the GPU test: one dim N, a few ops, rank 2, no views, ordinary literals.
std::string random_pipeline(uint64_t seed);

// Whether the generator draws `op`: every op of the table but those only backward graphs hold
// (compiler/ir/grad.h), which tests/unit/test_backward_plans.cpp plans and proves: transpose,
// matmul_tn (a [K, N] first operand, where the generator's rows are always the batch) and the
// pools' and groupnorm's gradients.
bool drawn_by_generator(ir::OpKind op);

} // namespace kfuse::testing
