// The vector-Jacobian products of the ops that are not pointwise, the rule table, and the
// helpers the rules build with (compiler/ir/vjp.h).
#include "compiler/ir/vjp.h"

#include "compiler/ir/infer.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/views.h"

#include <fmt/format.h>

#include <iterator>

namespace kfuse::ir {

ValueId VjpContext::forward_op(OpKind k, const std::vector<size_t> &args) const {
  std::vector<ValueId> ids;
  for (size_t i : args)
    ids.push_back(op().args.at(i));
  return forward_value_(forward_op_(k, ids));
}

void VjpContext::missing(const std::string &why) const {
  throw GradError(op().op, fmt::format("grad: {} has no vector-Jacobian product: {}",
                                       describe(forward_, op_), why));
}

ValueId VjpContext::op(OpKind k, std::vector<ValueId> args, AttrMap attrs) const {
  return b_.op(k, std::move(args), std::move(attrs));
}

ValueId VjpContext::number(double value) const {
  return op(OpKind::Constant, {}, {{"value", AttrValue(value)}, {"dtype", AttrValue(0, "f32")}});
}

// pow(x, 0) is 1 for every x, NaN and infinities included (C's pow and CUDA's powf alike).
ValueId VjpContext::ones_like(ValueId x) const { return op(OpKind::Pow, {x, number(0)}); }

ValueId VjpContext::extent(ValueId x, size_t axis) const {
  const Dim &d = type(x).shape.at(axis);
  if (!d.is_symbolic())
    return number(static_cast<double>(d.value));
  return op(OpKind::Sum, {ones_like(x)},
            {{"dim", AttrValue(static_cast<double>(axis))}, {"keepdim", AttrValue(1)}});
}

ValueId VjpContext::matrix(ValueId x) const {
  const TensorType &t = type(x);
  if (t.rank() <= 2)
    return x;
  return op(OpKind::Reshape, {x}, {{"shape", AttrValue(0, {}, t.matrix_view().shape)}});
}

ValueId VjpContext::sum_rows(ValueId g) const {
  ValueId m = matrix(g);
  if (type(m).rank() == 1)
    return m;
  return op(OpKind::Sum, {m}, {{"dim", AttrValue(0)}});
}

ValueId VjpContext::sum_to(ValueId g, const TensorType &to) const {
  if (type(g).shape == to.shape)
    return g;
  const Dim one = Dim::constant(1);
  ValueId m = matrix(g);
  auto sum = [&](int dim, bool keepdim) {
    m = op(OpKind::Sum, {m}, {{"dim", AttrValue(dim)}, {"keepdim", AttrValue(keepdim ? 1 : 0)}});
  };
  int last = type(m).rank() - 1;
  const bool along_rows = to.shape.back() == one && type(m).shape[static_cast<size_t>(last)] != one;
  const bool over_rows = type(m).rank() == 2 && row_extent(to) == one && type(m).shape[0] != one;
  // Summed in two steps, the per-row sums are values of their own: kept in f32, as PyTorch's
  // one reduction accumulates, not rounded to a 16-bit type whose sums then cancel (the
  // gradient is cast to its value's type where it is accumulated).
  if (along_rows && over_rows && type(m).dtype != DType::F32)
    m = op(OpKind::Cast, {m}, {{"dtype", AttrValue(0, "f32")}});
  if (along_rows)
    sum(last, true);
  if (over_rows)
    sum(0, to.rank() != 1);
  if (type(m).shape != to.shape)
    m = op(OpKind::Reshape, {m}, {{"shape", AttrValue(0, {}, to.shape)}});
  return m;
}

ValueId VjpContext::unreduce(ValueId g, ValueId x, size_t axis, bool keepdim) const {
  if (keepdim || axis == 0)
    return g; // [.., 1] or, along the rows of a matrix, [F]: both broadcast against x
  // [N] from a row reduction of [N, F]: the per-row values as a column.
  const Dim &rows = type(x).shape[0];
  ValueId row = op(OpKind::Reshape, {g}, {{"shape", AttrValue(0, {}, {Dim::constant(1), rows})}});
  return op(OpKind::Transpose, {row});
}

size_t VjpContext::axis() const {
  int rank = arg_type(0).rank();
  auto d = static_cast<int>(attr("dim"));
  return static_cast<size_t>(d < 0 ? d + rank : d);
}

namespace vjp {
namespace {

AttrMap dim_attrs(size_t axis, bool keepdim) {
  return {{"dim", AttrValue(static_cast<double>(axis))}, {"keepdim", AttrValue(keepdim ? 1 : 0)}};
}

// `x` in f32 where it is 16-bit. The rules of the row ops (softmax, the norms) compute in f32,
// as PyTorch's backward kernels do, and their results are rounded once, to the gradient's type
// (ir::grad casts where it accumulates): a per-row sum rounded to 16 bits would put its error
// into every element of the row, and a product rounded before its sum breaks the cancellation
// softmax's Σ g y relies on.
ValueId in_f32(const VjpContext &c, ValueId x) {
  if (c.type(x).dtype == DType::F32)
    return x;
  return c.op(OpKind::Cast, {x}, {{"dtype", AttrValue(0, "f32")}});
}

// A keepdim sum of `x` along the forward op's axis.
ValueId sum_along(const VjpContext &c, ValueId x) {
  return c.op(OpKind::Sum, {x}, dim_attrs(c.axis(), true));
}

// matmul_tn: y = aᵀ b. da = b gᵀ (linear's product), db = a g.
std::vector<ValueId> matmul_tn(const VjpContext &c) {
  ValueId g = c.grad(), a = c.arg(0), b = c.arg(1);
  return {c.op(OpKind::Linear, {b, g}), c.op(OpKind::Matmul, {a, g})};
}

// linear: y = x Wᵀ + b. dx = g W, dW = gᵀ x (over all rows), db = Σ_rows g.
std::vector<ValueId> linear(const VjpContext &c) {
  ValueId g = c.grad(), x = c.arg(0), w = c.arg(1);
  std::vector<ValueId> out = {
      c.op(OpKind::Matmul, {g, w}),
      c.op(OpKind::Matmul, {c.op(OpKind::Transpose, {c.matrix(g)}), c.matrix(x)})};
  if (c.arg_count() == 3)
    out.push_back(c.sum_rows(g));
  return out;
}

// matmul: y = a b. da = g bᵀ (linear's product), db = aᵀ g.
std::vector<ValueId> matmul(const VjpContext &c) {
  ValueId g = c.grad(), a = c.arg(0), b = c.arg(1);
  return {c.op(OpKind::Linear, {g, b}),
          c.op(OpKind::Matmul, {c.op(OpKind::Transpose, {c.matrix(a)}), c.matrix(g)})};
}

} // namespace

BatchnormNormalized batchnorm_normalized(const VjpContext &c) {
  const bool affine = c.arg_count() == 5;
  ValueId x = c.arg(0);
  // Train mode: the batch statistics the forward normalized with, which it computes anyway.
  const bool train = c.mode() == Mode::Train;
  ValueId mean = train ? c.forward_op(OpKind::ColMean, {0}) : c.arg(affine ? 3 : 1);
  ValueId var = train ? c.forward_op(OpKind::ColVar, {0}) : c.arg(affine ? 4 : 2);
  ValueId rstd = c.op(OpKind::Rsqrt, {c.add(var, c.number(c.attr("eps")))});
  return {c.mul(c.sub(x, mean), rstd), rstd};
}

ValueId batchnorm_result(const VjpContext &c) {
  ValueId y = batchnorm_normalized(c).xhat;
  if (c.arg_count() == 5) {
    y = c.mul(y, c.arg(1)); // before arg(2): the backward declares them in this order
    y = c.add(y, c.arg(2));
  }
  const DType want = c.op().type.dtype;
  if (c.type(y).dtype != want)
    y = c.op(OpKind::Cast, {y}, {{"dtype", AttrValue(0, std::string(dtype_name(want)))}});
  return y;
}

namespace {

// Train mode: the exact backward through the batch mean and biased variance,
//   dx = rstd (gx - mean(gx) - x̂ mean(gx x̂)),  gx = g * weight,
// the statistics recomputed from x by the column statistics of the table. Eval mode: the affine
// map with the running statistics, dx = gx rstd. Both: dweight = Σ g x̂, dbias = Σ g; the running
// statistics (states) get none.
std::vector<ValueId> batchnorm(const VjpContext &c) {
  bool affine = c.arg_count() == 5;
  ValueId g = c.grad();
  bool train = c.mode() == Mode::Train;
  const auto [xhat, rstd] = batchnorm_normalized(c);
  ValueId gx = affine ? c.mul(g, c.arg(1)) : g;
  ValueId dx = c.mul(gx, rstd);
  if (train) {
    ValueId centered = c.sub(gx, c.op(OpKind::ColMean, {gx}));
    ValueId along = c.mul(xhat, c.op(OpKind::ColMean, {c.mul(gx, xhat)}));
    dx = c.mul(rstd, c.sub(centered, along));
  }
  std::vector<ValueId> out(c.arg_count(), kNoGradient);
  out[0] = dx;
  if (affine) {
    out[1] = c.sum_rows(c.mul(g, xhat));
    out[2] = c.sum_rows(g);
  }
  return out;
}

// softmax: dx = y (g - Σ g y); log_softmax: dx = g - exp(y) Σ g.
std::vector<ValueId> softmax(const VjpContext &c) {
  ValueId g = in_f32(c, c.grad()), y = in_f32(c, c.result());
  return {c.mul(y, c.sub(g, sum_along(c, c.mul(g, y))))};
}

std::vector<ValueId> log_softmax(const VjpContext &c) {
  ValueId g = in_f32(c, c.grad());
  return {c.sub(g, c.mul(c.op(OpKind::Exp, {in_f32(c, c.result())}), sum_along(c, g)))};
}

// A keepdim mean along the feature axis.
ValueId feature_mean(const VjpContext &c, ValueId x) {
  return c.op(OpKind::Mean, {x}, dim_attrs(static_cast<size_t>(c.type(x).rank() - 1), true));
}

// layernorm and instancenorm: x̂ = (x - mean) rstd over the feature axis;
// dx = rstd (gx - mean(gx) - x̂ mean(gx x̂)), gx = g * weight; dweight = Σ_rows g x̂, dbias = Σ g.
std::vector<ValueId> layernorm(const VjpContext &c) {
  ValueId g = in_f32(c, c.grad()), x = in_f32(c, c.arg(0));
  ValueId centered = c.sub(x, feature_mean(c, x));
  ValueId var = feature_mean(c, c.op(OpKind::Square, {centered}));
  ValueId rstd = c.op(OpKind::Rsqrt, {c.add(var, c.number(c.attr("eps")))});
  ValueId xhat = c.mul(centered, rstd);
  ValueId gx = c.arg_count() > 1 ? c.mul(g, c.arg(1)) : g;
  ValueId inner =
      c.sub(c.sub(gx, feature_mean(c, gx)), c.mul(xhat, feature_mean(c, c.mul(gx, xhat))));
  std::vector<ValueId> out = {c.mul(rstd, inner)};
  if (c.arg_count() > 1)
    out.push_back(c.sum_rows(c.mul(g, xhat)));
  if (c.arg_count() > 2)
    out.push_back(c.sum_rows(g));
  return out;
}

// rmsnorm: r = rsqrt(mean(x²) + eps); dx = r gx - x r³ mean(gx x); dweight = Σ_rows g x r.
std::vector<ValueId> rmsnorm(const VjpContext &c) {
  ValueId g = in_f32(c, c.grad()), x = in_f32(c, c.arg(0));
  ValueId r = c.op(OpKind::Rsqrt,
                   {c.add(feature_mean(c, c.op(OpKind::Square, {x})), c.number(c.attr("eps")))});
  ValueId gx = c.arg_count() > 1 ? c.mul(g, c.arg(1)) : g;
  ValueId r3 = c.mul(r, c.op(OpKind::Square, {r}));
  std::vector<ValueId> out = {
      c.sub(c.mul(r, gx), c.mul(c.mul(x, r3), feature_mean(c, c.mul(gx, x))))};
  if (c.arg_count() > 1)
    out.push_back(c.sum_rows(c.mul(g, c.mul(x, r))));
  return out;
}

// groupnorm: dx through each group's mean and rstd in one row pass, as the forward is
// (groupnorm_backward, PyTorch's native_group_norm_backward); dweight = Σ_rows g x̂ with x̂ the
// forward without its affine, dbias = Σ_rows g.
std::vector<ValueId> groupnorm(const VjpContext &c) {
  ValueId g = c.grad(), x = c.arg(0);
  const AttrMap attrs = {{"groups", AttrValue(c.attr("groups"))},
                         {"eps", AttrValue(c.attr("eps"))}};
  std::vector<ValueId> args = {g, x};
  if (c.arg_count() > 1)
    args.push_back(c.arg(1));
  std::vector<ValueId> out = {c.op(OpKind::GroupNormBackward, args, attrs)};
  if (c.arg_count() > 1)
    out.push_back(c.sum_rows(c.mul(g, c.op(OpKind::GroupNorm, {x}, attrs))));
  if (c.arg_count() > 2)
    out.push_back(c.sum_rows(g));
  return out;
}

// The incoming gradient as the forward's keepdim result, broadcast against x.
ValueId kept_grad(const VjpContext &c) {
  return c.unreduce(c.grad(), c.arg(0), c.axis(), c.attr("keepdim") != 0);
}

ValueId kept_result(const VjpContext &c) {
  return c.unreduce(c.result(), c.arg(0), c.axis(), c.attr("keepdim") != 0);
}

std::vector<ValueId> sum(const VjpContext &c) {
  return {c.mul(kept_grad(c), c.ones_like(c.arg(0)))};
}

std::vector<ValueId> mean(const VjpContext &c) {
  ValueId x = c.arg(0);
  return {c.div(c.mul(kept_grad(c), c.ones_like(x)), c.extent(x, c.axis()))};
}

// amax's rule: the gradient split evenly between the slice's elements equal to the extreme.
std::vector<ValueId> extreme(const VjpContext &c, bool largest) {
  ValueId x = c.arg(0), y = kept_result(c);
  ValueId hit = largest ? c.ge(x, y) : c.ge(y, x);
  return {c.mul(kept_grad(c), c.div(hit, sum_along(c, hit)))};
}

std::vector<ValueId> maxima(const VjpContext &c) { return extreme(c, true); }
std::vector<ValueId> minima(const VjpContext &c) { return extreme(c, false); }

std::vector<ValueId> logsumexp(const VjpContext &c) {
  return {c.mul(kept_grad(c), c.op(OpKind::Exp, {c.sub(c.arg(0), kept_result(c))}))};
}

// d var = 2 (x - mean) / (n - correction); d std = d var / (2 std).
ValueId var_derivative(const VjpContext &c, double factor) {
  ValueId x = c.arg(0);
  ValueId mean = c.op(OpKind::Mean, {x}, dim_attrs(c.axis(), true));
  ValueId divisor = c.sub(c.extent(x, c.axis()), c.number(c.attr("correction")));
  return c.div(c.mul(c.number(factor), c.sub(x, mean)), divisor);
}

std::vector<ValueId> var(const VjpContext &c) {
  return {c.mul(kept_grad(c), var_derivative(c, 2))};
}

std::vector<ValueId> std_(const VjpContext &c) {
  return {c.div(c.mul(kept_grad(c), var_derivative(c, 1)), kept_result(c))};
}

// max_pool1d: each window's gradient to the feature PyTorch's indices pick; avg_pool1d:
// g / kernel_size to every feature of the window. Both gathered per feature by one row op.
std::vector<ValueId> pool(const VjpContext &c) {
  AttrMap attrs = {{"kernel_size", AttrValue(c.attr("kernel_size"))},
                   {"stride", AttrValue(static_cast<double>(pool_stride(c.op().attrs)))}};
  if (c.op().op == OpKind::MaxPool1d)
    return {c.op(OpKind::MaxPool1dBackward, {c.grad(), c.arg(0)}, attrs)};
  attrs["features"] = AttrValue(static_cast<double>(c.arg_type(0).shape.back().value));
  return {c.op(OpKind::AvgPool1dBackward, {c.grad()}, attrs)};
}

// avg_pool1d_backward is linear in g, its transpose avg_pool1d itself.
std::vector<ValueId> avg_pool_grad(const VjpContext &c) {
  return {c.op(OpKind::AvgPool1d, {c.grad()},
               {{"kernel_size", AttrValue(c.attr("kernel_size"))},
                {"stride", AttrValue(c.attr("stride"))}})};
}

// Second derivatives of the max pool and of groupnorm would need ops the table does not have
// (a gather at the pool's indices; groupnorm's Hessian terms).
std::vector<ValueId> max_pool_grad(const VjpContext &c) {
  c.missing("the gradient of max_pool1d's gradient (a second derivative) is not supported");
}

std::vector<ValueId> groupnorm_grad(const VjpContext &c) {
  c.missing("the gradient of groupnorm's gradient (a second derivative) is not supported");
}

// One row pass for the logits (PyTorch's: softmax minus the smoothed one-hot, times g, over the
// count of rows for "mean"); the target is a class index, which has no gradient.
std::vector<ValueId> cross_entropy(const VjpContext &c) {
  return {c.op(OpKind::CrossEntropyBackward, {c.arg(0), c.arg(1), c.grad()}, c.op().attrs),
          kNoGradient};
}

// cross_entropy_rows is what a pass makes of cross_entropy: grad runs before the passes.
std::vector<ValueId> cross_entropy_rows(const VjpContext &c) {
  c.missing("cross_entropy_rows is differentiated as the cross_entropy it lowers");
}

std::vector<ValueId> cross_entropy_grad(const VjpContext &c) {
  c.missing("the gradient of cross_entropy's gradient (a second derivative) is not supported");
}

// The backward draws the forward's mask: a dropout of the gradient on the same stream, run with
// the forward's (seed, offset), keeps the same elements (the mask is a function of the element's
// index, the stream and the run's Philox key and counter: templates/dropout.cuh) and scales them
// by the same 1 / (1 - p).
std::vector<ValueId> dropout(const VjpContext &c) {
  return {c.op(OpKind::Dropout, {c.grad()},
               {{"p", AttrValue(c.attr("p"))}, {"stream", AttrValue(c.attr("stream"))}})};
}

std::vector<ValueId> view(const VjpContext &c) {
  const TensorType &x = c.arg_type(0);
  return {c.op(OpKind::Reshape, {c.grad()}, {{"shape", AttrValue(0, {}, x.shape)}})};
}

// col_mean: g / N on every row; col_sum: g on every row; col_var: g 2 (y - mean) / N.
std::vector<ValueId> col_mean(const VjpContext &c) {
  ValueId y = c.arg(0);
  return {c.mul(c.ones_like(y), c.div(c.grad(), c.extent(y, 0)))};
}

std::vector<ValueId> col_sum(const VjpContext &c) {
  return {c.mul(c.ones_like(c.arg(0)), c.grad())};
}

std::vector<ValueId> col_var(const VjpContext &c) {
  ValueId y = c.arg(0);
  // The mean of the rows the variance is of: the batch's or, `local`, the rank's own.
  ValueId centered = c.sub(y, c.op(OpKind::ColMean, {y}, c.op().attrs));
  return {c.div(c.mul(c.mul(c.number(2), c.grad()), centered), c.extent(y, 0))};
}

// (y - shift) alpha + beta.
std::vector<ValueId> col_affine(const VjpContext &c) {
  ValueId g = c.grad(), y = c.arg(0), alpha = c.arg(1);
  bool shifted = c.arg_count() == 4;
  ValueId centered = shifted ? c.sub(y, c.arg(3)) : y;
  ValueId dy = c.mul(g, alpha);
  std::vector<ValueId> out = {dy, c.sum_to(c.mul(g, centered), c.arg_type(1)),
                              c.sum_to(g, c.arg_type(2))};
  if (shifted)
    out.push_back(c.sum_to(c.neg(dy), c.arg_type(3)));
  return out;
}

// bn_update has no value, so no gradient reaches it.
std::vector<ValueId> effect(const VjpContext &c) {
  return std::vector<ValueId>(c.arg_count(), kNoGradient);
}

std::vector<ValueId> transpose(const VjpContext &c) {
  return {c.op(OpKind::Transpose, {c.grad()})};
}

std::vector<ValueId> constant(const VjpContext &) { return {}; }

struct VjpEntry {
  OpKind kind;
  VjpFn fn;
};

// In OpKind order (checked below).
constexpr VjpEntry kRules[] = {
    {OpKind::Linear, linear},
    {OpKind::Matmul, matmul},
    {OpKind::MatmulTN, matmul_tn},
    {OpKind::BatchNorm, batchnorm},
    {OpKind::Add, add},
    {OpKind::Sub, sub},
    {OpKind::Mul, mul},
    {OpKind::Div, div},
    {OpKind::Maximum, maximum},
    {OpKind::Minimum, minimum},
    {OpKind::Pow, pow},
    {OpKind::Relu, relu},
    {OpKind::LeakyRelu, leaky_relu},
    {OpKind::Gelu, gelu},
    {OpKind::Silu, silu},
    {OpKind::Sigmoid, sigmoid},
    {OpKind::Tanh, tanh},
    {OpKind::Hardtanh, hardtanh},
    {OpKind::Clamp, clamp},
    {OpKind::Hardsigmoid, hardsigmoid},
    {OpKind::Hardswish, hardswish},
    {OpKind::Mish, mish},
    {OpKind::Softplus, softplus},
    {OpKind::Elu, elu},
    {OpKind::Selu, selu},
    {OpKind::LogSigmoid, logsigmoid},
    {OpKind::Softsign, softsign},
    {OpKind::Exp, exp},
    {OpKind::Log, log},
    {OpKind::Abs, abs},
    {OpKind::Neg, neg},
    {OpKind::Sqrt, sqrt},
    {OpKind::Rsqrt, rsqrt},
    {OpKind::Square, square},
    {OpKind::Reciprocal, reciprocal},
    {OpKind::Softmax, softmax},
    {OpKind::LogSoftmax, log_softmax},
    {OpKind::LayerNorm, layernorm},
    {OpKind::RmsNorm, rmsnorm},
    {OpKind::GroupNorm, groupnorm},
    {OpKind::InstanceNorm, layernorm},
    {OpKind::Sum, sum},
    {OpKind::Mean, mean},
    {OpKind::Max, maxima},
    {OpKind::Min, minima},
    {OpKind::Amax, maxima},
    {OpKind::Amin, minima},
    {OpKind::Logsumexp, logsumexp},
    {OpKind::Var, var},
    {OpKind::Std, std_},
    {OpKind::MaxPool1d, pool},
    {OpKind::AvgPool1d, pool},
    {OpKind::CrossEntropy, cross_entropy},
    {OpKind::Dropout, dropout},
    {OpKind::Reshape, view},
    {OpKind::Unsqueeze, view},
    {OpKind::Squeeze, view},
    {OpKind::ColMean, col_mean},
    {OpKind::ColVar, col_var},
    {OpKind::ColSum, col_sum},
    {OpKind::ColAffine, col_affine},
    {OpKind::BnUpdate, effect},
    {OpKind::Cast, cast},
    {OpKind::RoundTf32, round_tf32},
    {OpKind::Greater, comparison},
    {OpKind::GreaterEqual, comparison},
    {OpKind::Erf, erf},
    {OpKind::Transpose, transpose},
    {OpKind::MaxPool1dBackward, max_pool_grad},
    {OpKind::AvgPool1dBackward, avg_pool_grad},
    {OpKind::GroupNormBackward, groupnorm_grad},
    {OpKind::CrossEntropyRows, cross_entropy_rows},
    {OpKind::CrossEntropyBackward, cross_entropy_grad},
    {OpKind::Constant, constant},
};

constexpr bool in_enum_order() {
  for (size_t i = 0; i < std::size(kRules); ++i)
    if (static_cast<size_t>(kRules[i].kind) != i)
      return false;
  return std::size(kRules) == kOpCount;
}
static_assert(in_enum_order(), "kRules must list every OpKind once, in enum order");

} // namespace
} // namespace vjp

VjpFn vjp_rule(OpKind k) { return vjp::kRules[static_cast<size_t>(k)].fn; }

} // namespace kfuse::ir
