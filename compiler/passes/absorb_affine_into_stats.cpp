// absorb_affine_into_stats: column statistics of an affine map come from the statistics
// of its input.
//
//   col_mean(col_affine(y, a, b, s)) = (col_mean(y) - s) * a + b
//   col_var(col_affine(y, a, b, s))  = col_var(y) * a^2
// (no shift: s = 0, nothing subtracted), applied through every map stacked on y. Exact per
// column for every real a (zero and negative included: the variance of a*y is a^2 times the
// variance of y, never negative). The mean subtracts the shift first, as the map does: when s
// is col_mean(y) itself (a batchnorm after a batchnorm), col_mean(y) - s is an exact 0 and
// the mean is exactly b. This is what lets train-mode batchnorm after `linear -> * s (+ t)`
// take its statistics from the bare GEMM output in the GEMM's epilogue, while the scale moves
// across into the one affine map applied after it.
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"

namespace kfuse::passes {

using namespace ir;

namespace {

// The statistic `kind` (col_mean or col_var) of new value `y`, from the statistics of the
// matrix under every map stacked on it (a batchnorm after a batchnorm after a bias), so
// that matrix is the only one whose statistics are taken and the maps can fold into one.
ValueId statistic(Rewriter &r, OpKind kind, ValueId y) {
  const Value in = r.new_value(y); // a copy: r.op() grows the graph
  if (!(in.is_op() && in.op == OpKind::ColAffine))
    return r.op(kind, {y});
  ValueId inner = statistic(r, kind, in.args[0]), a = in.args[1], b = in.args[2];
  if (kind == OpKind::ColVar)
    return r.op(OpKind::Mul, {inner, r.op(OpKind::Mul, {a, a})});
  if (in.args.size() == 4)
    inner = r.op(OpKind::Sub, {inner, in.args[3]});
  return r.op(OpKind::Add, {r.op(OpKind::Mul, {inner, a}), b});
}

} // namespace

Graph absorb_affine_into_stats(const Graph &g, Mode) {
  return Rewriter(g, "absorb_affine_into_stats").run([](Rewriter &r, ValueId old) -> ValueId {
    const Value &v = r.old_graph()[old];
    if (v.op != OpKind::ColMean && v.op != OpKind::ColVar)
      return -1;
    ValueId y = r.map(v.args[0]);
    const Value &in = r.new_value(y);
    if (!(in.is_op() && in.op == OpKind::ColAffine))
      return -1;
    return statistic(r, v.op, y);
  });
}

} // namespace kfuse::passes
