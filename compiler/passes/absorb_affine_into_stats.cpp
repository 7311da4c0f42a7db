// absorb_affine_into_stats: column statistics of an affine map come from the statistics
// of its input.
//
//   col_mean(col_affine(y, a, b)) = a * col_mean(y) + b
//   col_var(col_affine(y, a, b))  = a^2 * col_var(y)
// Exact per column for every real a (zero and negative included: the variance of a*y is
// a^2 times the variance of y, never negative). This is what lets train-mode batchnorm
// after `linear -> * s (+ t)` take its statistics from the bare GEMM output in the GEMM's
// epilogue, while the scale moves across into the one affine map applied after it.
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"

namespace kfuse::passes {

using namespace ir;

Graph absorb_affine_into_stats(const Graph &g, Mode) {
  return Rewriter(g, "absorb_affine_into_stats").run([](Rewriter &r, ValueId old) -> ValueId {
    const Value &v = r.old_graph()[old];
    if (v.op != OpKind::ColMean && v.op != OpKind::ColVar)
      return -1;
    const Value &in = r.old_graph()[v.args[0]];
    if (!(in.is_op() && in.op == OpKind::ColAffine))
      return -1;
    ValueId y = r.map(in.args[0]), a = r.map(in.args[1]), b = r.map(in.args[2]);
    if (v.op == OpKind::ColMean)
      return r.op(OpKind::Add, {r.op(OpKind::Mul, {r.op(OpKind::ColMean, {y}), a}), b});
    return r.op(OpKind::Mul, {r.op(OpKind::ColVar, {y}), r.op(OpKind::Mul, {a, a})});
  });
}

} // namespace kfuse::passes
