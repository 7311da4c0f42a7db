#include "compiler/ir/pointwise.h"

#include "compiler/ir/types.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace kfuse::ir {

double eval_pointwise(OpKind op, const AttrMap &attrs, double x, double y) {
  const OpInfo &info = op_info(op);
  std::vector<double> a = attr_numbers(info, attrs);
  return info.fp64(x, y, a.data());
}

namespace pointwise {

// The comments give PyTorch's CUDA definition where it fixes an edge case.

double add(double x, double y, const double *) { return x + y; }
double sub(double x, double y, const double *) { return x - y; }
double mul(double x, double y, const double *) { return x * y; }
double div(double x, double y, const double *) { return x / y; }

// torch.maximum / torch.minimum propagate NaN from either side.
double maximum(double x, double y, const double *) {
  return std::isnan(x) ? x : std::isnan(y) ? y : std::max(x, y);
}
double minimum(double x, double y, const double *) {
  return std::isnan(x) ? x : std::isnan(y) ? y : std::min(x, y);
}
double pow(double x, double y, const double *) { return std::pow(x, y); }

// relu(NaN) = NaN, as torch.relu.
double relu(double x, double, const double *) { return x < 0 ? 0.0 : x; }
// x > 0 ? x : x * negative_slope.
double leaky_relu(double x, double, const double *a) { return x > 0 ? x : x * a[0]; }

double gelu(double x, double, const double *a) {
  if (a[0] == 0) // approximate="none": the exact erf form
    return x * 0.5 * (1.0 + std::erf(x * M_SQRT1_2));
  // approximate="tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  const double beta = M_SQRT2 * M_2_SQRTPI * 0.5, kappa = 0.044715;
  return 0.5 * x * (1.0 + std::tanh(beta * (x + kappa * x * x * x)));
}

// x / (1 + e^-x): silu(-inf) = NaN as in PyTorch.
double silu(double x, double, const double *) { return x / (1.0 + std::exp(-x)); }
double sigmoid(double x, double, const double *) { return 1.0 / (1.0 + std::exp(-x)); }
double tanh(double x, double, const double *) { return std::tanh(x); }

// min(max(x, lo), hi), NaN kept: torch.clamp (and F.hardtanh, which is clamp). With
// lo > hi every value becomes hi, as in PyTorch.
double clamp(double x, double, const double *a) {
  return std::isnan(x) ? x : std::min(std::max(x, a[0]), a[1]);
}

// min(max(x + 3, 0), 6) / 6, NaN kept.
double hardsigmoid(double x, double, const double *) {
  double t = x + 3.0;
  return std::isnan(t) ? t : std::min(std::max(t, 0.0), 6.0) / 6.0;
}
double hardswish(double x, double, const double *) {
  double t = x + 3.0;
  return std::isnan(t) ? t : x * std::min(std::max(t, 0.0), 6.0) / 6.0;
}

// x * tanh(log1p(exp(x))), without softplus's threshold, as PyTorch computes it.
double mish(double x, double, const double *) { return x * std::tanh(std::log1p(std::exp(x))); }

// x * beta > threshold ? x : log1p(exp(x * beta)) / beta.
double softplus(double x, double, const double *a) {
  return x * a[0] > a[1] ? x : std::log1p(std::exp(x * a[0])) / a[0];
}

// x <= 0 ? expm1(x) * alpha : x; NaN stays NaN.
double elu(double x, double, const double *a) { return x <= 0 ? std::expm1(x) * a[0] : x; }
double selu(double x, double, const double *) {
  return x <= 0 ? std::expm1(x) * (kSeluAlpha * kSeluScale) : x * kSeluScale;
}

// min(x, 0) - log1p(exp(-|x|)), as PyTorch computes it: no overflow for large |x|; NaN stays NaN.
double logsigmoid(double x, double, const double *) {
  return std::min(x, 0.0) - std::log1p(std::exp(-std::fabs(x)));
}

double exp(double x, double, const double *) { return std::exp(x); }
double log(double x, double, const double *) { return std::log(x); }
double abs(double x, double, const double *) { return std::fabs(x); }
double neg(double x, double, const double *) { return -x; }
double sqrt(double x, double, const double *) { return std::sqrt(x); }
double rsqrt(double x, double, const double *) { return 1.0 / std::sqrt(x); }
double square(double x, double, const double *) { return x * x; }
double reciprocal(double x, double, const double *) { return 1.0 / x; }
// As a kernel rounds: to fp32 first, then to the type (round_to); to f32 it is x itself.
double cast(double x, double, const double *a) { return round_to(static_cast<DType>(a[0]), x); }
// As cvt.rna.tf32.f32 rounds the fp32 value: 10 explicit mantissa bits, nearest, ties away from
// zero (half an ulp added to the magnitude's bits, then the 13 below cut); NaN and inf stay.
double round_tf32(double x, double, const double *) {
  const float f = static_cast<float>(x);
  if (!std::isfinite(f))
    return f;
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  bits = (bits + 0x1000u) & 0xffffe000u;
  float r = 0;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

} // namespace pointwise
} // namespace kfuse::ir
