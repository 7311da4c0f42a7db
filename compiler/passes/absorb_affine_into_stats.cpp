// absorb_affine_into_stats: column statistics of an affine map come from the statistics
// of its input, and a map centred on its input's mean reads the matrix under the maps.
//
//   col_mean(col_affine(y, a, b, s)) = (col_mean(y) - s) * a + b
//   col_var(col_affine(y, a, b, s))  = col_var(y) * a^2
// (no shift: s = 0, nothing subtracted), applied through every map stacked on y. Exact per
// column for every real a (zero and negative included: the variance of a*y is a^2 times the
// variance of y, never negative). This is what lets train-mode batchnorm after
// `linear -> * s (+ t)` take its statistics from the bare GEMM output in the GEMM's epilogue,
// while the scale moves across into the one affine map applied after it.
//
// A train-mode batchnorm's map subtracts the mean of its own input x = col_affine(y, a1, b1, s1):
//   col_affine(x, a2, b2, col_mean(x)) = col_affine(y, a1 * a2, b2, col_mean(y))
// since x - col_mean(x) = (y - col_mean(y)) * a1 exactly. Folding the maps instead would give
// y * (a1 * a2) + (b1 - col_mean(x)) * a2, two terms that cancel catastrophically on a column of
// small spread (a constant column scaled by 1e20 is off by 1e3, where the batchnorm gives
// exactly b2); the centred form subtracts the mean before any scaling, as PyTorch does, and
// gives exactly b2 there.
//
// Special values stay. An infinity or NaN in a column of y makes its mean and variance
// non-finite in both forms. An infinite or NaN vector of a map would have made the whole
// column of the variance or of the centred map NaN, which the rewritten forms (that drop b and
// s, or square a) need not: so each vector v of a map crossed is kept as |v| * -0, which is -0
// where v is finite and NaN where it is not, added to the variance or to the centred map's
// scale (a per-column value the column kernel computes anyway); adding -0 changes nothing, the
// sign of a zero included. A shift that is the mean of the map's own input is left out: it is
// non-finite only where that column is, and then the rewritten form is NaN as well.
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"

#include <map>
#include <tuple>

namespace kfuse::passes {

using namespace ir;

namespace {

// Each statistic of each matrix is made once, so the centred map and the running-stat
// update share the column mean they read; keyed by the statistic's op, the matrix and whether
// it is the rank's own (`local`, which the rewrite keeps: a batch statistic stays one), and by
// ColAffine and a map for that map's special-values term (dropped_specials).
using Statistics = std::map<std::tuple<OpKind, ValueId, bool>, ValueId>;

ValueId bare_statistic(Rewriter &r, Statistics &made, OpKind kind, ValueId y, bool local) {
  auto [it, fresh] = made.emplace(std::make_tuple(kind, y, local), -1);
  if (fresh)
    it->second = r.op(kind, {y}, {{"local", AttrValue(local ? 1 : 0)}});
  return it->second;
}

// -0, or NaN where a vector the rewrites drop from map `m` (new graph) is infinite or NaN: the
// sum of |v| * -0 over its scale, bias and shift; -1 when there is none. Made once per map.
ValueId dropped_specials(Rewriter &r, Statistics &made, ValueId m) {
  auto [it, fresh] = made.emplace(std::make_tuple(OpKind::ColAffine, m, false), -1);
  if (!fresh)
    return it->second;
  const Value map = r.new_value(m); // a copy: r.op() grows the graph
  ValueId sum = -1;
  for (size_t i = 1; i < map.args.size(); ++i) {
    const Value &v = r.new_value(map.args[i]);
    if (i == 3 && v.is_op() && v.op == OpKind::ColMean && v.args[0] == map.args[0])
      continue;
    ValueId term =
        r.op(OpKind::Mul, {r.op(OpKind::Abs, {map.args[i]}), r.constant(-0.0, DType::F32)});
    sum = sum < 0 ? term : r.op(OpKind::Add, {sum, term});
  }
  it->second = sum;
  return sum;
}

ValueId plus(Rewriter &r, ValueId x, ValueId specials) {
  return specials < 0 ? x : r.op(OpKind::Add, {x, specials});
}

// The statistic `kind` (col_mean or col_var) of new value `y`, from the statistics of the
// matrix under every map stacked on it (a batchnorm after a batchnorm after a bias), so
// that matrix is the only one whose statistics are taken and the maps can fold into one.
ValueId statistic(Rewriter &r, Statistics &made, OpKind kind, ValueId y, bool local) {
  const Value in = r.new_value(y); // a copy: r.op() grows the graph
  if (!(in.is_op() && in.op == OpKind::ColAffine))
    return bare_statistic(r, made, kind, y, local);
  ValueId inner = statistic(r, made, kind, in.args[0], local), a = in.args[1], b = in.args[2];
  if (kind == OpKind::ColVar)
    return plus(r, r.op(OpKind::Mul, {inner, r.op(OpKind::Mul, {a, a})}),
                dropped_specials(r, made, y));
  if (in.args.size() == 4)
    inner = r.op(OpKind::Sub, {inner, in.args[3]});
  return r.op(OpKind::Add, {r.op(OpKind::Mul, {inner, a}), b});
}

// col_affine(x, a2, b2, col_mean(x)) over maps x = col_affine(...(y)) as the centred map of y,
// or -1.
ValueId centred(Rewriter &r, Statistics &made, const Value &v) {
  const Graph &g = r.old_graph();
  if (v.op != OpKind::ColAffine || v.args.size() != 4)
    return -1;
  const Value &shift = g[v.args[3]];
  if (!(shift.is_op() && shift.op == OpKind::ColMean && shift.args[0] == v.args[0]))
    return -1;
  ValueId y = r.map(v.args[0]), scale = r.map(v.args[1]);
  bool through_map = false;
  for (Value in = r.new_value(y); in.is_op() && in.op == OpKind::ColAffine; in = r.new_value(y)) {
    scale = plus(r, r.op(OpKind::Mul, {in.args[1], scale}), dropped_specials(r, made, y));
    y = in.args[0];
    through_map = true;
  }
  if (!through_map)
    return -1;
  return r.op(OpKind::ColAffine,
              {y, scale, r.map(v.args[2]),
               bare_statistic(r, made, OpKind::ColMean, y, !is_batch_statistic(shift))});
}

} // namespace

Graph absorb_affine_into_stats(const Graph &g, Mode) {
  Statistics made;
  return Rewriter(g, "absorb_affine_into_stats").run([&made](Rewriter &r, ValueId old) -> ValueId {
    const Value &v = r.old_graph()[old];
    if (v.op == OpKind::ColAffine)
      return centred(r, made, v);
    if (v.op != OpKind::ColMean && v.op != OpKind::ColVar)
      return -1;
    ValueId y = r.map(v.args[0]);
    const Value &in = r.new_value(y);
    if (!(in.is_op() && in.op == OpKind::ColAffine))
      return -1;
    return statistic(r, made, v.op, y, !is_batch_statistic(v));
  });
}

} // namespace kfuse::passes
