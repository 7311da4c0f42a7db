// The passes over a row that row kernels and GEMM row epilogues make
// (compiler/codegen/emit_row.cpp). The pass of a row op is emitted by its class's emitter
// (compiler/codegen/class_codegen.h).
#pragma once

#include "compiler/codegen/emit.h"

#include <set>
#include <string>
#include <vector>

namespace kfuse::codegen {

// The passes over a row of rows_of, one per row stage, in plan order: by a block of `threads`
// threads per row reading the stored matrix (a row kernel: `row` = blockIdx.x, `smem` its
// resident row), or by `threads` lanes of a warp (`team`) reading the row `x` the GEMM epilogue
// staged (staged).
// Each pass that reads the row gets a generated functor (col, x) -> value, appended to `defs`,
// computing the stage's input from the loaded element (the prologue), the row index and the
// per-row results of earlier passes (members); the stage's class picks the template. Per-row
// values computed from those results alone (row_result) are computed in the body and written by
// the team's first thread.
// With `partial_tiles` column slices (row_partials_epilogue), a GEMM's epilogue adds the value x
// of column col to partial p of each reduction (gemm_epilogue.cuh's Row partials); a row kernel
// merges each reduction from those partials instead of reading the row (row_partials.cuh), then
// computes the per-row values after them.
class RowPasses {
public:
  RowPasses(EmitContext &cx, const plan::Kernel &k, const KernelWriter &w, int threads, bool staged,
            int partial_tiles = 0);

  // The body's statements; the functors they name are appended to `defs`.
  std::string run(std::string &defs);

  // The row-pass emitters of the classes (class_codegen.cpp): the template call of row stage i
  // (value st), with the pass's prologue functor `pre`.
  void softmax(size_t i, ir::ValueId st, const std::string &pre, std::string &defs);
  // layernorm, rmsnorm and groupnorm: the normalized row, its affine applied by the post functor.
  void norm(size_t i, ir::ValueId st, const std::string &pre, std::string &defs);
  void reduce(size_t i, ir::ValueId st, const std::string &pre, std::string &defs);
  void pool(size_t i, ir::ValueId st, const std::string &pre, std::string &defs);
  // The pools' gradients, gathered over the windows (the row is g's; x's row read directly).
  void pool_grad(size_t i, ir::ValueId st, const std::string &pre, std::string &defs);
  // groupnorm's input gradient (the row is g's; x's row and the weight read directly).
  void norm_grad(size_t i, ir::ValueId st, const std::string &pre, std::string &defs);
  // cross_entropy per row (the row is the logits'; the target read directly), and its gradient
  // for the logits; their sum and mean are column sums
  // (compiler/passes/columns_from_reductions.cpp).
  void loss(size_t i, ir::ValueId st, const std::string &pre, std::string &defs);
  void loss_grad(size_t i, ir::ValueId st, const std::string &pre, std::string &defs);
  // An elementwise value over the row (row_map).
  void map(size_t i, ir::ValueId st, const std::string &pre, std::string &defs);

private:
  void check_last_axis() const;
  // The floats of a row tile's partials, and the offset of reduction st's among them.
  int partial_offset(ir::ValueId st, int &floats) const;
  // Reduction st merged from the partials (a row kernel of row_partials_epilogue).
  void merge(ir::ValueId st);
  // Where a pass writes stored value st's row, and at which leading dimension: st's own, its
  // rows padded where the selection pads them (EmitContext::leading_dim).
  std::string dst(ir::ValueId st) const;
  std::string dst_ld(ir::ValueId st) const;
  // Row `row` of matrix operand v, which the kernel reads from memory (not its rows_of).
  std::string operand_row(ir::ValueId v) const;
  // A per-row value from this row's results only.
  void row_result(ir::ValueId st);
  // The pass of row stage i (value st) over the row.
  void pass(size_t i, ir::ValueId st, bool row_op, std::string &defs);
  // The functor of a softmax's or normalization's result y at column col (`value`: y, or the
  // normalization's affine of it). Where the kernel does not store the result, the functor
  // computes its row_tail value instead (the elementwise ops after it, which read no other
  // matrix: the row's results, per-feature values), and the pass stores that in `out`.
  std::string post_functor(size_t i, ir::ValueId st, const std::string &value, ir::ValueId &out,
                           std::string &defs);
  // The template call of stage st's class (its row-pass emitter).
  void call(size_t i, ir::ValueId st, const std::string &pre, std::string &defs);

  EmitContext &cx_;
  const ir::Graph &g_;
  const plan::Kernel &k_;
  const KernelWriter &w_;
  const int threads_;
  const bool staged_;
  const int partial_tiles_;
  const std::string n_, src_, ld_, row_arg_, team_, smem_, first_;
  std::string body_;
  std::vector<ir::ValueId> row_values_; // per-row results so far, in registers
  std::set<ir::ValueId> in_entry_;      // values the body has computed
  std::set<ir::ValueId> tails_;         // row_tail values, computed in their normalization's pass
  bool smem_filled_ = false;            // an earlier pass left its row in shared memory
  // The current pass's functor type, its members and their initializers.
  std::string type_, members_;
  std::vector<std::string> init_;
};

} // namespace kfuse::codegen
