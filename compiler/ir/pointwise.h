// The fp64 reference semantics of the pointwise ops, one function per op, named by the op
// table (compiler/ir/ops.cpp). Each is PyTorch's definition of the op evaluated in double,
// including its NaN and infinity behaviour; the interpreter applies them per element and
// constant folding uses them, so a folded constant means what the interpreter computes.
// Their fp32 CUDA counterparts are in templates/math.cuh.
#pragma once

#include "compiler/ir/ops.h"

namespace kfuse::ir {

// Applies pointwise op `op` with attributes `attrs` to x (and y for binary ops).
double eval_pointwise(OpKind op, const AttrMap &attrs, double x, double y = 0);

namespace pointwise {

// Signature ScalarFn: operands x, y (unused by unary ops), attributes in table order.
double add(double x, double y, const double *a);
double sub(double x, double y, const double *a);
double mul(double x, double y, const double *a);
double div(double x, double y, const double *a);
double maximum(double x, double y, const double *a);
double minimum(double x, double y, const double *a);
double pow(double x, double y, const double *a);
double relu(double x, double y, const double *a);
double leaky_relu(double x, double y, const double *a); // a: negative_slope
double gelu(double x, double y, const double *a);       // a: approximate (0 none, 1 tanh)
double silu(double x, double y, const double *a);
double sigmoid(double x, double y, const double *a);
double tanh(double x, double y, const double *a);
double clamp(double x, double y, const double *a); // a: min, max (+-inf: none); hardtanh too
double hardsigmoid(double x, double y, const double *a);
double hardswish(double x, double y, const double *a);
double mish(double x, double y, const double *a);
double softplus(double x, double y, const double *a); // a: beta, threshold
double elu(double x, double y, const double *a);      // a: alpha
double selu(double x, double y, const double *a);
double logsigmoid(double x, double y, const double *a);
double exp(double x, double y, const double *a);
double log(double x, double y, const double *a);
double abs(double x, double y, const double *a);
double neg(double x, double y, const double *a);
double sqrt(double x, double y, const double *a);
double rsqrt(double x, double y, const double *a);
double square(double x, double y, const double *a);
double reciprocal(double x, double y, const double *a);
double cast(double x, double y, const double *a); // a: dtype (its DType value)
double round_tf32(double x, double y, const double *a);

// torch.nn.SELU's constants.
inline constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
inline constexpr double kSeluScale = 1.0507009873554804934193349852946;

} // namespace pointwise
} // namespace kfuse::ir
