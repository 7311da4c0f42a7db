// Vector-Jacobian products: each op's backward, written with ops of the table.
//
// One rule per op, in a table indexed by OpKind (checked complete and in order at compile time,
// compiler/ir/vjp.cpp), so that an op added to the table needs its rule. A rule is given the
// forward op (its kind and attributes), its arguments and its result as values of the backward
// graph under construction, and the gradient of its result; it returns the gradient of each
// argument, or kNoGradient for an argument that has none (a running statistic, an op that is
// piecewise constant). A gradient has its argument's shape: an argument that was broadcast gets
// the gradient summed back to its shape (VjpContext::sum_to).
//
// Non-differentiable points follow PyTorch's autograd: relu'(0) = 0, abs'(0) = 0 (sgn),
// hardtanh' = 0 at its bounds but clamp' = 1 at its bounds, maximum/minimum split the gradient
// evenly between equal operands, max/min/amax/amin reductions split it evenly between the
// equal maxima of a slice (amax's rule; PyTorch's max(dim) gives it all to the first maximal
// index, which no op of the table selects). max_pool1d's gradient goes where PyTorch's
// max_pool1d_with_indices points: a window's first maximum, or its last NaN.
#pragma once

#include "kfuse/error.h"

#include "compiler/ir/graph.h"

#include <functional>
#include <optional>
#include <vector>

namespace kfuse::ir {

inline constexpr ValueId kNoGradient = -1;

// A forward graph the grad transform cannot differentiate (an op whose rule is missing).
struct GradError : kfuse::Error {
  using kfuse::Error::Error;
  GradError(OpKind missing, const std::string &message) : kfuse::Error(message), op(missing) {}
  std::optional<OpKind> op; // the op without a rule, where that is the problem
};

// What a rule sees. `arg(i)` and `result()` give the forward values in the backward graph (saved
// by the forward or recomputed there, as the grad transform decides), built on first use.
class VjpContext {
public:
  VjpContext(GraphBuilder &b, const Graph &forward, ValueId op, Mode mode, ValueId grad,
             std::function<ValueId(ValueId)> forward_value,
             std::function<ValueId(OpKind, std::vector<ValueId>)> forward_op)
      : b_(b), forward_(forward), op_(op), mode_(mode), grad_(grad),
        forward_value_(std::move(forward_value)), forward_op_(std::move(forward_op)) {}

  const Value &op() const { return forward_[op_]; }
  Mode mode() const { return mode_; }
  ValueId grad() const { return grad_; }
  ValueId arg(size_t i) const { return forward_value_(op().args.at(i)); }
  // Op `k` of the op's forward arguments `args` (indices into its args), computed by the forward
  // for the backward (grad adds it to the forward graph, GradResult::forward) and then saved or
  // recomputed like any forward value: what the forward computes anyway (train-mode batchnorm's
  // batch statistics) costs a few stored features instead of a pass over the batch.
  ValueId forward_op(OpKind k, const std::vector<size_t> &args) const;
  ValueId result() const { return forward_value_(op_); }
  size_t arg_count() const { return op().args.size(); }
  const TensorType &arg_type(size_t i) const { return forward_[op().args.at(i)].type; }
  const TensorType &type(ValueId backward) const { return b_.graph()[backward].type; }
  double attr(const std::string &key) const { return op().attr(key); }
  [[noreturn]] void missing(const std::string &why) const;

  // Ops of the backward graph.
  ValueId op(OpKind k, std::vector<ValueId> args, AttrMap attrs = {}) const;
  ValueId add(ValueId a, ValueId b) const { return op(OpKind::Add, {a, b}); }
  ValueId sub(ValueId a, ValueId b) const { return op(OpKind::Sub, {a, b}); }
  ValueId mul(ValueId a, ValueId b) const { return op(OpKind::Mul, {a, b}); }
  ValueId div(ValueId a, ValueId b) const { return op(OpKind::Div, {a, b}); }
  ValueId neg(ValueId a) const { return op(OpKind::Neg, {a}); }
  ValueId gt(ValueId a, ValueId b) const { return op(OpKind::Greater, {a, b}); }
  ValueId ge(ValueId a, ValueId b) const { return op(OpKind::GreaterEqual, {a, b}); }
  ValueId number(double value) const; // a constant [1] f32
  // A tensor of ones with x's shape (the operand that spreads a gradient over x's shape).
  ValueId ones_like(ValueId x) const;
  // The extent of axis `axis` of x as a [1] value, or a keepdim sum of ones where it is a dim.
  ValueId extent(ValueId x, size_t axis) const;
  // `g` summed over the axes along which a value of type `to` was broadcast to g's shape, and
  // viewed in `to`'s shape.
  ValueId sum_to(ValueId g, const TensorType &to) const;
  // The gradient of a reduction of x along `axis` without keepdim, reshaped so that it
  // broadcasts against x as the kept-dim result would ([N] of dim 1 becomes [N, 1]).
  ValueId unreduce(ValueId g, ValueId x, size_t axis, bool keepdim) const;
  // `x` viewed as its [rows, F] matrix (itself when of rank 1 or 2).
  ValueId matrix(ValueId x) const;
  // Sum over every row of a [.., F] value: [F].
  ValueId sum_rows(ValueId g) const;
  // The reduced axis of the forward op, in [0, rank of its argument).
  size_t axis() const;

private:
  GraphBuilder &b_;
  const Graph &forward_;
  ValueId op_;
  Mode mode_;
  ValueId grad_;
  std::function<ValueId(ValueId)> forward_value_;
  std::function<ValueId(OpKind, std::vector<ValueId>)> forward_op_;
};

// A rule: the gradient of each of the op's arguments, in order (kNoGradient where none).
using VjpFn = std::vector<ValueId> (*)(const VjpContext &c);

VjpFn vjp_rule(OpKind k);

namespace vjp {
// A batchnorm's x̂ = (x - mean) rstd with the statistics its rule reads (train mode: the batch
// statistics the forward computes, VjpContext::forward_op; eval mode: the running ones), and rstd.
struct BatchnormNormalized {
  ValueId xhat, rstd;
};
BatchnormNormalized batchnorm_normalized(const VjpContext &c);
// The batchnorm's result rebuilt from them (x̂ weight + bias, in its type): ir::grad recomputes
// it where the rule reads them anyway.
ValueId batchnorm_result(const VjpContext &c);

// The pointwise rules (compiler/ir/vjp_pointwise.cpp), named after their ops.
std::vector<ValueId> add(const VjpContext &c);
std::vector<ValueId> sub(const VjpContext &c);
std::vector<ValueId> mul(const VjpContext &c);
std::vector<ValueId> div(const VjpContext &c);
std::vector<ValueId> maximum(const VjpContext &c);
std::vector<ValueId> minimum(const VjpContext &c);
std::vector<ValueId> pow(const VjpContext &c);
std::vector<ValueId> relu(const VjpContext &c);
std::vector<ValueId> leaky_relu(const VjpContext &c);
std::vector<ValueId> gelu(const VjpContext &c);
std::vector<ValueId> silu(const VjpContext &c);
std::vector<ValueId> sigmoid(const VjpContext &c);
std::vector<ValueId> tanh(const VjpContext &c);
std::vector<ValueId> hardtanh(const VjpContext &c);
std::vector<ValueId> clamp(const VjpContext &c);
std::vector<ValueId> hardsigmoid(const VjpContext &c);
std::vector<ValueId> hardswish(const VjpContext &c);
std::vector<ValueId> mish(const VjpContext &c);
std::vector<ValueId> softplus(const VjpContext &c);
std::vector<ValueId> elu(const VjpContext &c);
std::vector<ValueId> selu(const VjpContext &c);
std::vector<ValueId> logsigmoid(const VjpContext &c);
std::vector<ValueId> softsign(const VjpContext &c);
std::vector<ValueId> exp(const VjpContext &c);
std::vector<ValueId> log(const VjpContext &c);
std::vector<ValueId> abs(const VjpContext &c);
std::vector<ValueId> neg(const VjpContext &c);
std::vector<ValueId> sqrt(const VjpContext &c);
std::vector<ValueId> rsqrt(const VjpContext &c);
std::vector<ValueId> square(const VjpContext &c);
std::vector<ValueId> reciprocal(const VjpContext &c);
std::vector<ValueId> cast(const VjpContext &c);
std::vector<ValueId> round_tf32(const VjpContext &c);
std::vector<ValueId> comparison(const VjpContext &c);
std::vector<ValueId> erf(const VjpContext &c);
} // namespace vjp

} // namespace kfuse::ir
