// fold_affine: per-column affine maps of a matrix collapse into one col_affine.
//
// For a matrix y[N, C] and per-feature vectors c ([C] or [1], broadcast over rows), with
// col_affine(y, a, b, s) = (y - s) * a + b and no shift meaning s = 0:
//   y + c = col_affine(y, 1, c)    y - c = col_affine(y, 1, -0, c)    c - y = col_affine(y, -1, c)
//   y * c = col_affine(y, c, -0)   y / c = col_affine(y, 1/c, -0)
// and a chain of two maps is one map:
//   col_affine(col_affine(y, a1, b1, s1), a2, b2, s2)
//       = col_affine(y, a1*a2, (b1 - s2)*a2 + b2, s1),
// where a bias of -0 (no bias) adds no term: (-0)*a2 is +0 for a negative a2.
// Both are exact in real arithmetic, and keep IEEE's special values: a map without a bias adds
// -0, the additive identity (x + -0 = x for every x, -0 included), where + 0 would turn the -0
// of x * 0 (x negative) or of x / inf into +0, and 1 / (x * 0) from -inf into +inf. Products
// and sums of the vectors reassociate, which keeps the sign of every zero, infinity and NaN of
// y; distributing a vector over a sum is not exact where the vector is zero, infinite or huge
// (a1 = 0 and a2 = 1 / 0 give 0 * inf, NaN, where the file gives inf), which no fold can know
// of run-time parameters (compiler/plan/agreement.h). In floating point the subtraction of a shift
// (a batchnorm's mean) happens before any scaling, as PyTorch does it: on a column whose spread is
// tiny next to its mean, (y - s) and (b1 - s2) are exact where y * a + (b - s * a) would cancel
// catastrophically; the rest reassociates per-column products, well inside every precision's error
// bound. A map is merged into its consumer only when nothing else reads it, so no value is computed
// twice. The vectors are built from the parameters at run time (a few ops per column), nothing is
// baked in.
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"

#include <cmath>
#include <optional>

namespace kfuse::passes {

using namespace ir;

namespace {

// The bias of a map that adds nothing: -0, IEEE's additive identity.
ValueId no_bias(Rewriter &r, DType dt) { return r.constant(-0.0, dt); }

bool is_no_bias(const Rewriter &r, ValueId id) {
  auto c = r.constant_value(id);
  return c && *c == 0 && std::signbit(*c);
}

bool is_column_vector(const Value &v, const Value &matrix) {
  return v.type.rank() == 1 &&
         (v.type.shape[0] == matrix.type.shape.back() || v.type.shape[0] == Dim::constant(1));
}

// The binary op `v` as a col_affine of its matrix operand, or -1.
ValueId binary_to_affine(Rewriter &r, const Value &v) {
  const Graph &g = r.old_graph();
  if (op_info(v.op).cls != OpClass::Binary || v.type.rank() < 2)
    return -1;
  const Value &a = g[v.args[0]], &b = g[v.args[1]];
  bool matrix_first = a.type == v.type && is_column_vector(b, a);
  bool matrix_second = b.type == v.type && is_column_vector(a, b);
  if (!matrix_first && !matrix_second)
    return -1;
  ValueId y = r.map(v.args[matrix_first ? 0 : 1]);
  ValueId c = r.map(v.args[matrix_first ? 1 : 0]);
  DType dt = v.type.dtype;
  if (v.op == OpKind::Add)
    return r.op(OpKind::ColAffine, {y, r.constant(1, dt), c});
  if (v.op == OpKind::Sub)
    return matrix_first ? r.op(OpKind::ColAffine, {y, r.constant(1, dt), r.constant(0, dt), c})
                        : r.op(OpKind::ColAffine, {y, r.constant(-1, dt), c});
  if (v.op == OpKind::Mul)
    return r.op(OpKind::ColAffine, {y, c, no_bias(r, dt)});
  if (v.op == OpKind::Div && matrix_first)
    return r.op(OpKind::ColAffine, {y, r.op(OpKind::Div, {r.constant(1, dt), c}), no_bias(r, dt)});
  return -1; // maximum, minimum, pow, c / y: not affine in y
}

// The merged map's bias (b1 - s2) * a2 + b2, leaving out the terms of an absent bias or shift.
ValueId merged_bias(Rewriter &r, ValueId b1, ValueId a2, ValueId b2, std::optional<ValueId> s2) {
  if (!s2 && is_no_bias(r, b1))
    return b2;
  ValueId term = r.op(OpKind::Mul, {s2 ? r.op(OpKind::Sub, {b1, *s2}) : b1, a2});
  return is_no_bias(r, b2) ? term : r.op(OpKind::Add, {term, b2});
}

} // namespace

Graph fold_affine(const Graph &g, Mode) {
  return Rewriter(g, "fold_affine").run([](Rewriter &r, ValueId old) -> ValueId {
    const Value &v = r.old_graph()[old];
    ValueId affine = v.op == OpKind::ColAffine ? -1 : binary_to_affine(r, v);
    if (v.op != OpKind::ColAffine && affine < 0)
      return -1;
    ValueId input_old =
        v.args[v.op == OpKind::ColAffine || r.old_graph()[v.args[0]].type == v.type ? 0 : 1];
    // The outer map's operands in the new graph: y, a2, b2 and maybe s2.
    std::vector<ValueId> outer;
    if (affine >= 0)
      outer = r.new_value(affine).args;
    else
      for (ValueId a : v.args)
        outer.push_back(r.map(a));
    const Value &inner_value = r.new_value(outer[0]);
    // The live reader of the inner map merges it, never a dead one: the merge moves the inner
    // map's provenance (Rewriter::merge_provenance).
    if (!(inner_value.is_op() && inner_value.op == OpKind::ColAffine &&
          r.old_uses(input_old) == 1 && r.old_live(old)))
      return affine;
    // Its operands only: r.op() grows the graph, and a copy of its provenance (every statement
    // merged into it so far) would make a chain of merges quadratic.
    const std::vector<ValueId> inner_args = inner_value.args;
    // Both maps' vectors are column vectors of the same matrix, so the products broadcast.
    ValueId a2 = outer[1];
    std::optional<ValueId> s2;
    if (outer.size() == 4)
      s2 = outer[3];
    std::vector<ValueId> args = {inner_args[0], r.op(OpKind::Mul, {inner_args[1], a2}),
                                 merged_bias(r, inner_args[2], a2, outer[2], s2)};
    if (inner_args.size() == 4)
      args.push_back(inner_args[3]);
    ValueId merged = r.op(OpKind::ColAffine, args);
    r.merge_provenance(merged, outer[0]);
    return merged;
  });
}

} // namespace kfuse::passes
