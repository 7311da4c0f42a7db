// The vector-Jacobian products of the pointwise ops (compiler/ir/vjp.h). Each is PyTorch's
// backward formula (tools/autograd/derivatives.yaml and the *_backward kernels), written with ops
// of the table; the comments give PyTorch's choice where an op is not differentiable.
#include "compiler/ir/vjp.h"

#include "compiler/ir/pointwise.h"

#include <cmath>

namespace kfuse::ir::vjp {
namespace {

// The gradient of a unary op with local derivative `d`.
std::vector<ValueId> chain(const VjpContext &c, ValueId d) { return {c.mul(c.grad(), d)}; }

// 1 where x > 0, else 0 (NaN included).
ValueId positive(const VjpContext &c, ValueId x) { return c.gt(x, c.number(0)); }

// The gradients of a binary op: g * da and g * db, each summed back to its operand's shape.
std::vector<ValueId> binary_chain(const VjpContext &c, ValueId da, ValueId db) {
  return {da == kNoGradient ? kNoGradient : c.sum_to(c.mul(c.grad(), da), c.arg_type(0)),
          db == kNoGradient ? kNoGradient : c.sum_to(c.mul(c.grad(), db), c.arg_type(1))};
}

// elu's derivative below 0, `scale * alpha * exp(x)`, and `scale` above: exp of min(x, 0) so that
// the branch not taken does not overflow into inf * 0.
ValueId elu_derivative(const VjpContext &c, double alpha, double scale) {
  ValueId x = c.arg(0), above = positive(c, x);
  ValueId below =
      c.mul(c.number(alpha * scale), c.op(OpKind::Exp, {c.op(OpKind::Minimum, {x, c.number(0)})}));
  // above * scale + (1 - above) * below
  return c.add(c.mul(above, c.number(scale)), c.mul(c.sub(c.number(1), above), below));
}

} // namespace

std::vector<ValueId> add(const VjpContext &c) {
  return {c.sum_to(c.grad(), c.arg_type(0)), c.sum_to(c.grad(), c.arg_type(1))};
}

std::vector<ValueId> sub(const VjpContext &c) {
  return {c.sum_to(c.grad(), c.arg_type(0)), c.sum_to(c.neg(c.grad()), c.arg_type(1))};
}

std::vector<ValueId> mul(const VjpContext &c) { return binary_chain(c, c.arg(1), c.arg(0)); }

// d(a / b) = 1 / b, -a / b².
std::vector<ValueId> div(const VjpContext &c) {
  ValueId b = c.arg(1);
  return binary_chain(c, c.op(OpKind::Reciprocal, {b}),
                      c.neg(c.div(c.arg(0), c.op(OpKind::Square, {b}))));
}

// PyTorch: the whole gradient to the larger operand, half to each where they are equal:
// (ge(a, b) + gt(a, b)) / 2.
std::vector<ValueId> maximum(const VjpContext &c) {
  ValueId a = c.arg(0), b = c.arg(1), half = c.number(0.5);
  return binary_chain(c, c.mul(half, c.add(c.ge(a, b), c.gt(a, b))),
                      c.mul(half, c.add(c.ge(b, a), c.gt(b, a))));
}

std::vector<ValueId> minimum(const VjpContext &c) {
  ValueId a = c.arg(0), b = c.arg(1), half = c.number(0.5);
  return binary_chain(c, c.mul(half, c.add(c.ge(b, a), c.gt(b, a))),
                      c.mul(half, c.add(c.ge(a, b), c.gt(a, b))));
}

// d(a^b) = b a^(b-1), a^b log(a).
std::vector<ValueId> pow(const VjpContext &c) {
  ValueId a = c.arg(0), b = c.arg(1);
  ValueId da = c.mul(b, c.op(OpKind::Pow, {a, c.sub(b, c.number(1))}));
  return binary_chain(c, da, c.mul(c.result(), c.op(OpKind::Log, {a})));
}

// relu'(0) = 0 (threshold_backward passes the gradient where the result is > 0).
std::vector<ValueId> relu(const VjpContext &c) { return chain(c, positive(c, c.arg(0))); }

// x > 0 ? 1 : negative_slope.
std::vector<ValueId> leaky_relu(const VjpContext &c) {
  double s = c.attr("negative_slope");
  return chain(c, c.add(c.mul(positive(c, c.arg(0)), c.number(1 - s)), c.number(s)));
}

std::vector<ValueId> gelu(const VjpContext &c) {
  ValueId x = c.arg(0);
  if (c.op().attrs.at("approximate").dim != "tanh") { // Φ(x) + x φ(x)
    ValueId cdf = c.mul(c.number(0.5),
                        c.add(c.number(1), c.op(OpKind::Erf, {c.mul(x, c.number(M_SQRT1_2))})));
    ValueId pdf = c.mul(c.number(0.5 * M_2_SQRTPI * M_SQRT1_2),
                        c.op(OpKind::Exp, {c.mul(c.number(-0.5), c.op(OpKind::Square, {x}))}));
    return chain(c, c.add(cdf, c.mul(x, pdf)));
  }
  // t = tanh(k (x + κ x³)): 0.5 (1 + t) + 0.5 x (1 - t²) k (1 + 3 κ x²)
  const double k = M_SQRT2 * M_2_SQRTPI * 0.5, kappa = 0.044715;
  ValueId x2 = c.op(OpKind::Square, {x});
  ValueId inner = c.mul(c.number(k), c.add(x, c.mul(c.number(kappa), c.mul(x2, x))));
  ValueId t = c.op(OpKind::Tanh, {inner});
  ValueId left = c.mul(c.number(0.5), c.add(c.number(1), t));
  ValueId slope = c.mul(c.number(k), c.add(c.number(1), c.mul(c.number(3 * kappa), x2)));
  ValueId right =
      c.mul(c.mul(c.number(0.5), x), c.mul(c.sub(c.number(1), c.op(OpKind::Square, {t})), slope));
  return chain(c, c.add(left, right));
}

// s (1 + x (1 - s)), s = sigmoid(x).
std::vector<ValueId> silu(const VjpContext &c) {
  ValueId x = c.arg(0), s = c.op(OpKind::Sigmoid, {x});
  return chain(c, c.mul(s, c.add(c.number(1), c.mul(x, c.sub(c.number(1), s)))));
}

std::vector<ValueId> sigmoid(const VjpContext &c) {
  ValueId y = c.result();
  return chain(c, c.mul(y, c.sub(c.number(1), y)));
}

std::vector<ValueId> tanh(const VjpContext &c) {
  return chain(c, c.sub(c.number(1), c.op(OpKind::Square, {c.result()})));
}

// hardtanh_backward: 0 at the bounds and outside.
std::vector<ValueId> hardtanh(const VjpContext &c) {
  ValueId x = c.arg(0);
  return chain(c,
               c.mul(c.gt(x, c.number(c.attr("min_val"))), c.gt(c.number(c.attr("max_val")), x)));
}

// clamp_backward: 1 at the bounds, 0 outside; an absent bound is no condition.
std::vector<ValueId> clamp(const VjpContext &c) {
  ValueId x = c.arg(0), d = c.number(1);
  if (std::isfinite(c.attr("min")))
    d = c.mul(d, c.ge(x, c.number(c.attr("min"))));
  if (std::isfinite(c.attr("max")))
    d = c.mul(d, c.ge(c.number(c.attr("max")), x));
  return chain(c, d);
}

// hardsigmoid_backward: 1/6 strictly inside (-3, 3).
std::vector<ValueId> hardsigmoid(const VjpContext &c) {
  ValueId x = c.arg(0);
  return chain(c, c.mul(c.number(1.0 / 6), c.mul(c.gt(x, c.number(-3)), c.gt(c.number(3), x))));
}

// hardswish_backward: 0 below -3, x / 3 + 0.5 on [-3, 3], 1 above.
std::vector<ValueId> hardswish(const VjpContext &c) {
  ValueId x = c.arg(0);
  ValueId inside = c.mul(c.ge(x, c.number(-3)), c.ge(c.number(3), x));
  ValueId middle = c.add(c.mul(x, c.number(1.0 / 3)), c.number(0.5));
  return chain(c, c.add(c.mul(inside, middle), c.gt(x, c.number(3))));
}

// t + x sigmoid(x) (1 - t²), t = tanh(softplus(x)).
std::vector<ValueId> mish(const VjpContext &c) {
  ValueId x = c.arg(0), t = c.op(OpKind::Tanh, {c.op(OpKind::Softplus, {x})});
  ValueId rest =
      c.mul(c.mul(x, c.op(OpKind::Sigmoid, {x})), c.sub(c.number(1), c.op(OpKind::Square, {t})));
  return chain(c, c.add(t, rest));
}

// softplus_backward: 1 where x beta > threshold (the linear branch), else sigmoid(x beta).
std::vector<ValueId> softplus(const VjpContext &c) {
  ValueId bx = c.mul(c.arg(0), c.number(c.attr("beta")));
  ValueId linear = c.gt(bx, c.number(c.attr("threshold")));
  ValueId s = c.op(OpKind::Sigmoid, {bx});
  return chain(c, c.add(s, c.mul(linear, c.sub(c.number(1), s))));
}

// elu_backward: alpha exp(x) at and below 0, 1 above.
std::vector<ValueId> elu(const VjpContext &c) {
  return chain(c, elu_derivative(c, c.attr("alpha"), 1));
}

std::vector<ValueId> selu(const VjpContext &c) {
  return chain(c, elu_derivative(c, pointwise::kSeluAlpha, pointwise::kSeluScale));
}

// sigmoid(-x).
std::vector<ValueId> logsigmoid(const VjpContext &c) {
  return chain(c, c.op(OpKind::Sigmoid, {c.neg(c.arg(0))}));
}

// 1 / (1 + |x|)².
std::vector<ValueId> softsign(const VjpContext &c) {
  ValueId d = c.add(c.number(1), c.op(OpKind::Abs, {c.arg(0)}));
  return chain(c, c.op(OpKind::Reciprocal, {c.op(OpKind::Square, {d})}));
}

std::vector<ValueId> exp(const VjpContext &c) { return chain(c, c.result()); }

std::vector<ValueId> log(const VjpContext &c) { return {c.div(c.grad(), c.arg(0))}; }

// sgn(x): abs'(0) = 0.
std::vector<ValueId> abs(const VjpContext &c) {
  ValueId x = c.arg(0), zero = c.number(0);
  return chain(c, c.sub(c.gt(x, zero), c.gt(zero, x)));
}

std::vector<ValueId> neg(const VjpContext &c) { return {c.neg(c.grad())}; }

// 1 / (2 sqrt(x)).
std::vector<ValueId> sqrt(const VjpContext &c) {
  return {c.div(c.mul(c.grad(), c.number(0.5)), c.result())};
}

// -x^(-3/2) / 2 = -y³ / 2.
std::vector<ValueId> rsqrt(const VjpContext &c) {
  ValueId y = c.result();
  return chain(c, c.mul(c.number(-0.5), c.mul(y, c.op(OpKind::Square, {y}))));
}

std::vector<ValueId> square(const VjpContext &c) { return chain(c, c.mul(c.number(2), c.arg(0))); }

// -1 / x² = -y².
std::vector<ValueId> reciprocal(const VjpContext &c) {
  return chain(c, c.neg(c.op(OpKind::Square, {c.result()})));
}

// The gradient in the operand's type, as PyTorch's .to() backward.
std::vector<ValueId> cast(const VjpContext &c) {
  DType to = c.arg_type(0).dtype;
  if (c.type(c.grad()).dtype == to)
    return {c.grad()};
  return {c.op(OpKind::Cast, {c.grad()}, {{"dtype", AttrValue(0, std::string(dtype_name(to)))}})};
}

// The gradient as it is: PyTorch's tf32 GEMMs round their operands and differentiate as if
// they did not, as a cast's backward does.
std::vector<ValueId> round_tf32(const VjpContext &c) { return {c.grad()}; }

// Piecewise constant: no gradient, as PyTorch's comparisons.
std::vector<ValueId> comparison(const VjpContext &) { return {kNoGradient, kNoGradient}; }

// 2 / sqrt(pi) exp(-x²).
std::vector<ValueId> erf(const VjpContext &c) {
  ValueId e = c.op(OpKind::Exp, {c.neg(c.op(OpKind::Square, {c.arg(0)}))});
  return chain(c, c.mul(c.number(M_2_SQRTPI), e));
}

} // namespace kfuse::ir::vjp
