// columns_from_reductions: a sum or mean over the rows of a matrix becomes a column statistic,
// and so do cross_entropy's sum and mean over its rows (below).
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
//
// cross_entropy's sum and mean become column sums of its per-row form, and the mean's gradient
// the sum's with g over the count of rows:
//
//   cross_entropy(x, t, reduction="sum")  -> col_sum(cross_entropy_rows(x, t), local=true)
//   cross_entropy(x, t, reduction="mean") -> div(col_sum(cross_entropy_rows(x, t), local=true),
//                                                count)
//   count = col_sum(cross_entropy_rows(x, t, weight=true), local=true)
//   cross_entropy_backward(x, t, g, reduction="mean")
//       -> cross_entropy_backward(x, t, div(g, count), reduction="sum")
//
// Sound by definition: the sum is Σ_i loss_i over the rows (0 on ignored ones), the mean that
// sum over the rows not ignored (Σ_i weight_i; 0 / 0 = NaN where every row is, as PyTorch's),
// and the mean's gradient is the sum's scaled by 1 / count. A row's loss is one pass over its
// logits (a row kernel), and the sum over the rows is the column machinery's deterministic sum:
// no kernel needs a reduction across its blocks of its own. The sums are `local`, the rank's
// own rows, as PyTorch's loss on each rank.
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"

namespace kfuse::passes {

using namespace ir;

namespace {

// col_sum over the rows of cross_entropy_rows(x, t) of `v`'s attributes: the loss, or the
// count of rows not ignored (`weight`).
ValueId rows_sum(Rewriter &r, const Value &v, bool weight) {
  AttrMap attrs{{"ignore_index", v.attrs.at("ignore_index")},
                {"label_smoothing", AttrValue(weight ? 0.0 : v.attr("label_smoothing"))}};
  if (weight)
    attrs["weight"] = AttrValue(1);
  const ValueId rows = r.op(OpKind::CrossEntropyRows, {r.map(v.args[0]), r.map(v.args[1])}, attrs);
  return r.op(OpKind::ColSum, {rows}, {{"local", AttrValue(1)}});
}

// cross_entropy's or its gradient's sum or mean over the rows, rewritten; -1 for anything else.
ValueId cross_entropy_columns(Rewriter &r, const Value &v) {
  const bool loss = v.op == OpKind::CrossEntropy, grad = v.op == OpKind::CrossEntropyBackward;
  if (!(loss || grad) || v.attrs.at("reduction").dim == "none")
    return -1;
  const bool mean = v.attrs.at("reduction").dim == "mean";
  if (loss) {
    const ValueId sum = rows_sum(r, v, false);
    return mean ? r.op(OpKind::Div, {sum, rows_sum(r, v, true)}) : sum;
  }
  if (!mean)
    return -1;
  AttrMap attrs = v.attrs;
  attrs["reduction"] = AttrValue(0, "sum");
  const ValueId g_over_count = r.op(OpKind::Div, {r.map(v.args[2]), rows_sum(r, v, true)});
  return r.op(OpKind::CrossEntropyBackward, {r.map(v.args[0]), r.map(v.args[1]), g_over_count},
              attrs);
}

} // namespace

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
      return cross_entropy_columns(r, v);
    const ValueId stat = r.op(v.op == OpKind::Sum ? OpKind::ColSum : OpKind::ColMean,
                              {r.map(v.args[0])}, {{"local", AttrValue(1)}});
    if (v.attr("keepdim") == 0)
      return stat;
    return r.op(OpKind::Reshape, {stat}, {{"shape", AttrValue(0, {}, v.type.shape)}});
  });
}

} // namespace kfuse::passes
