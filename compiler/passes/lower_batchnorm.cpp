// lower_batchnorm: batchnorm becomes column statistics, a running-stat update and one
// per-column affine map, according to the mode.
//
//   eval:  y = (x - rm) * rsqrt(rv + eps) * w + b = col_affine(x, alpha, b, rm)
//          alpha = w * rsqrt(rv + eps)
//          (the mean is the map's shift, subtracted first as PyTorch does: folding it into
//          b - rm * alpha would cancel catastrophically on a column of tiny spread)
//   train: m = col_mean(x), v = col_var(x) (biased), bn_update(rm, rv, m, v; momentum,
//          count = rows of x: N, 64 or B*T), and the same affine map with m, v in place of rm, rv.
//
// alpha is a [C] vector derived from parameters and statistics at run time; no
// weight is rewritten. Without weight/bias, w = 1 and b = -0 (constants: -0 adds nothing, the
// sign of a zero included, as PyTorch adds no bias).
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"

namespace kfuse::passes {

using namespace ir;

Graph lower_batchnorm(const Graph &g, Mode mode) {
  return Rewriter(g, "lower_batchnorm").run([mode](Rewriter &r, ValueId old) -> ValueId {
    const Value &v = r.old_graph()[old];
    if (v.op != OpKind::BatchNorm)
      return -1;
    bool affine = v.args.size() == 5;
    ValueId x = r.map(v.args[0]);
    ValueId weight = affine ? r.map(v.args[1]) : r.constant(1.0, DType::F32);
    ValueId bias = affine ? r.map(v.args[2]) : r.constant(-0.0, DType::F32);
    ValueId rm = r.map(v.args[affine ? 3 : 1]);
    ValueId rv = r.map(v.args[affine ? 4 : 2]);
    ValueId mean = rm, var = rv;
    if (mode == Mode::Train) {
      mean = r.op(OpKind::ColMean, {x});
      var = r.op(OpKind::ColVar, {x});
      r.op(OpKind::BnUpdate, {rm, rv, mean, var},
           {{"momentum", AttrValue{v.attr("momentum"), {}}},
            {"count", AttrValue::extent(v.type.shape[0])}});
    }
    ValueId inv_std =
        r.op(OpKind::Rsqrt, {r.op(OpKind::Add, {var, r.constant(v.attr("eps"), DType::F32)})});
    ValueId alpha = r.op(OpKind::Mul, {weight, inv_std});
    return r.op(OpKind::ColAffine, {x, alpha, bias, mean});
  });
}

} // namespace kfuse::passes
