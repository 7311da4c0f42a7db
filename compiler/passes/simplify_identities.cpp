// simplify_identities: removes the identities and constant arithmetic the other passes
// leave behind, so plans and generated code read like the math.
//
//   x * 1 = 1 * x = x + -0 = -0 + x = x - 0 = x / 1 = x     col_affine(y, 1, -0) = y
//   col_affine(y, a, b, 0) = col_affine(y, a, b)   (no subtraction, no shift vector read)
//   dropout(x) = x in eval mode, and dropout(x, p=0) = x in both (nothing is dropped, the
//   scale is 1)
//   op(constants) = the constant it evaluates to (the interpreter's scalar semantics)
//   a reduction over an axis of extent 1 = its element (max, min, amax, amin) or its element
//   + 0 (sum, mean, logsumexp), squeezed where keepdim is false and the axis is not the last
// The zeros are signed as IEEE arithmetic requires: x + -0 and x - +0 are x for every x, while
// x + 0 is +0 where x is -0 (PyTorch's -0 + 0 is +0), so adding +0 or subtracting -0 stays.
// An identity is removed only where x already has the result's type (no broadcast is
// lost). Constant folding is done in double and stored as the constant's value; it only
// meets the few scalars the passes introduce (1, -1, -0, eps).
#include "compiler/ir/pointwise.h"
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace kfuse::passes {

using namespace ir;

namespace {

// Constant arithmetic with the interpreter's semantics, except where it is not finite
// (division by zero, rsqrt of a non-positive number): those stay ops, as written.
std::optional<double> fold(const Value &v_op, double a, double b) {
  double v = eval_pointwise(v_op.op, v_op.attrs, a, b);
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

// Whether `id` is the constant `c`, a zero's sign included.
bool is(const Rewriter &r, ValueId id, double c) {
  auto v = r.constant_value(id);
  return v && *v == c && std::signbit(*v) == std::signbit(c);
}

// A reduction over an axis of extent 1 reduces one element: max, min, amax and amin give it,
// sum, mean and logsumexp give it plus +0 (their sums start from +0, so -0 gives +0, as
// PyTorch's do). -1 where `v` is no such reduction.
ValueId reduce_one(Rewriter &r, const Value &v, ValueId x) {
  static const OpKind kGives[] = {OpKind::Max, OpKind::Min, OpKind::Amax, OpKind::Amin};
  static const OpKind kPlusZero[] = {OpKind::Sum, OpKind::Mean, OpKind::Logsumexp};
  const bool gives = std::count(std::begin(kGives), std::end(kGives), v.op) > 0;
  if (!gives && std::count(std::begin(kPlusZero), std::end(kPlusZero), v.op) == 0)
    return -1;
  const TensorType &t = r.new_value(x).type;
  const int64_t dim = static_cast<int64_t>(v.attr("dim"));
  const int64_t axis = dim < 0 ? dim + static_cast<int64_t>(t.rank()) : dim;
  if (axis < 0 || axis >= static_cast<int64_t>(t.rank()) ||
      t.shape[static_cast<size_t>(axis)] != Dim::constant(1))
    return -1;
  // Without keepdim the result drops the axis: a squeeze, which is a view kfuse runs only
  // where the axis is not the last (the features).
  const bool keep = v.attr("keepdim") != 0;
  if (!keep && axis == static_cast<int64_t>(t.rank()) - 1)
    return -1;
  ValueId out = gives ? x : r.op(OpKind::Add, {x, r.constant(0.0, t.dtype)});
  if (keep)
    return out;
  return r.op(OpKind::Squeeze, {out}, {{"dim", AttrValue(static_cast<double>(axis))}});
}

} // namespace

Graph simplify_identities(const Graph &g, Mode mode) {
  return Rewriter(g, "simplify_identities").run([mode](Rewriter &r, ValueId old) -> ValueId {
    const Value &v = r.old_graph()[old];
    std::vector<ValueId> args;
    for (ValueId a : v.args)
      args.push_back(r.map(a));
    auto same_type = [&](ValueId id) { return r.new_value(id).type == v.type ? id : -1; };
    if (v.op == OpKind::ColAffine && args.size() == 4 && is(r, args[3], 0)) {
      args.pop_back();
      if (!is(r, args[1], 1) || !is(r, args[2], -0.0))
        return r.op(OpKind::ColAffine, args);
    }
    if (v.op == OpKind::ColAffine && args.size() == 3 && is(r, args[1], 1) && is(r, args[2], -0.0))
      return args[0];
    if (v.op == OpKind::Dropout && (mode == Mode::Eval || v.attr("p") == 0))
      return args[0];
    if (op_info(v.op).cls == OpClass::Reduce)
      if (ValueId one = reduce_one(r, v, args[0]); one >= 0)
        return one;
    if (is_pointwise(v.op)) {
      auto a = r.constant_value(args[0]);
      auto b = args.size() > 1 ? r.constant_value(args[1]) : a;
      if (a && b)
        if (auto c = fold(v, *a, *b))
          return r.constant(*c, v.type.dtype);
    }
    if (args.size() != 2)
      return -1;
    if (v.op == OpKind::Add)
      return is(r, args[1], -0.0)   ? same_type(args[0])
             : is(r, args[0], -0.0) ? same_type(args[1])
                                    : -1;
    if (v.op == OpKind::Mul)
      return is(r, args[1], 1) ? same_type(args[0]) : is(r, args[0], 1) ? same_type(args[1]) : -1;
    if (v.op == OpKind::Sub)
      return is(r, args[1], 0) ? same_type(args[0]) : -1;
    if (v.op == OpKind::Div)
      return is(r, args[1], 1) ? same_type(args[0]) : -1;
    return -1;
  });
}

} // namespace kfuse::passes
