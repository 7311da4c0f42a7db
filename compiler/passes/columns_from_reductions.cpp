// columns_from_reductions: a sum or mean over the rows of a matrix becomes a column statistic.
//
//   sum(x, dim=0)               -> col_sum(x, local=true)                  x: [N, F] -> [F]
//   mean(x, dim=0)              -> col_mean(x, local=true)
//   sum(x, dim=0, keepdim=true) -> reshape(col_sum(x, local=true), shape=[1, F])
//
// Sound by definition: col_sum(x)[j] = Σ_i x[i, j] and col_mean(x)[j] = Σ_i x[i, j] / N, the
// reductions' own semantics along dim 0. The column statistics are what the planner already
// computes deterministically (per-tile partials in the epilogue of the kernel that stores x,
// merged in a fixed order by the column kernel), so a bias gradient costs no pass of its own.
// col_sum has its matrix's type, as sum does; col_mean is fp32 (batchnorm's statistic), so a
// mean over the rows of a bf16 or f16 matrix stays a reduction (refused on the GPU).
// Both are `local=true`: a reduction over the rows is of the rank's own rows, as in PyTorch,
// where statistics are exchanged across ranks (ir::is_batch_statistic): a bias's gradient
// is this rank's sum, which DDP averages itself.
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"

namespace kfuse::passes {

using namespace ir;

bool becomes_column_statistic(const Graph &g, const Value &v) {
  if (!v.is_op() || (v.op != OpKind::Sum && v.op != OpKind::Mean))
    return false;
  double dim = v.attr("dim");
  const TensorType &x = g[v.args[0]].type;
  return x.rank() == 2 && (dim == 0 || dim == -2) && (v.op == OpKind::Sum || x.dtype == DType::F32);
}

Graph columns_from_reductions(const Graph &g, Mode) {
  return Rewriter(g, "columns_from_reductions").run([](Rewriter &r, ValueId old) -> ValueId {
    const Value &v = r.old_graph()[old];
    if (!becomes_column_statistic(r.old_graph(), v))
      return -1;
    const ValueId stat = r.op(v.op == OpKind::Sum ? OpKind::ColSum : OpKind::ColMean,
                              {r.map(v.args[0])}, {{"local", AttrValue(1)}});
    if (v.attr("keepdim") == 0)
      return stat;
    return r.op(OpKind::Reshape, {stat}, {{"shape", AttrValue(0, {}, v.type.shape)}});
  });
}

} // namespace kfuse::passes
