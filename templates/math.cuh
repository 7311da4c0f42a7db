// Scalar float functions of the pointwise ops, as the op table (compiler/ir/ops.cpp) names
// them in its CUDA expressions. Each is PyTorch's CUDA definition for float32 (the same
// formula in the same order, NaN and infinities handled alike); the fp64 reference of each
// is in compiler/ir/pointwise.cpp. Accurate libm calls only (expf, expm1f, log1pf, erff,
// tanhf): the fast intrinsics (__expf) miss the fp32 error bound against the fp64
// reference. There is no kf::tanh: generated code calls tanhf, because a kf::tanh(float)
// would be ambiguous with CUDA's ::tanh(float) under a using-directive.
#pragma once

// Device code only; the guard lets host C++ include every template header alike.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace kf {

// +infinity: a clamp bound left at none. NVRTC has no <cmath> and so no INFINITY.
__device__ __forceinline__ float inf() { return __int_as_float(0x7f800000); }

// relu(NaN) = NaN like torch.relu; fmaxf(x, 0.0f) would return 0.
__device__ __forceinline__ float relu(float x) { return x < 0.0f ? 0.0f : x; }

__device__ __forceinline__ float leaky_relu(float x, float negative_slope) {
  return x > 0.0f ? x : x * negative_slope;
}

// gelu_none and gelu_tanh: F.gelu with approximate="none" (the exact erf form, PyTorch's
// default) and approximate="tanh".
__device__ __forceinline__ float gelu_none(float x) {
  const float kSqrtHalf = 0.70710678118654752440f; // M_SQRT1_2; NVRTC has no <cmath>
  return x * 0.5f * (1.0f + erff(x * kSqrtHalf));
}
__device__ __forceinline__ float gelu_tanh(float x) {
  const float kBeta = 0.79788456080286535588f; // sqrt(2 / pi)
  const float kKappa = 0.044715f;
  const float inner = kBeta * (x + kKappa * (x * x * x));
  return 0.5f * x * (1.0f + tanhf(inner));
}

// 1 / (1 + e^-x): tends to 0 for x -> -inf (expf overflows to inf) and to 1 for x -> inf.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// x / (1 + e^-x) as PyTorch computes it (silu(-inf) is NaN there too).
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// NaN from either side, like torch.maximum / torch.minimum (fmaxf would drop it).
__device__ __forceinline__ float maximum(float a, float b) {
  return a != a ? a : b != b ? b : fmaxf(a, b);
}
__device__ __forceinline__ float minimum(float a, float b) {
  return a != a ? a : b != b ? b : fminf(a, b);
}

// torch.clamp and F.hardtanh: min(max(x, lo), hi), NaN kept; lo > hi gives hi.
__device__ __forceinline__ float clamp(float x, float lo, float hi) {
  return x != x ? x : fminf(fmaxf(x, lo), hi);
}

__device__ __forceinline__ float hardsigmoid(float x) { return clamp(x + 3.0f, 0.0f, 6.0f) / 6.0f; }
__device__ __forceinline__ float hardswish(float x) {
  return x * clamp(x + 3.0f, 0.0f, 6.0f) / 6.0f;
}

// No threshold, as PyTorch: log1pf(inf) = inf, tanhf(inf) = 1.
__device__ __forceinline__ float mish(float x) { return x * tanhf(log1pf(expf(x))); }

__device__ __forceinline__ float softplus(float x, float beta, float threshold) {
  return x * beta > threshold ? x : log1pf(expf(x * beta)) / beta;
}

__device__ __forceinline__ float elu(float x, float alpha) {
  return x <= 0.0f ? expm1f(x) * alpha : x;
}

// PyTorch multiplies its two constants in float for the negative side.
__device__ __forceinline__ float selu(float x) {
  const float kAlpha = 1.6732632423543772848170429916717f;
  const float kScale = 1.0507009873554804934193349852946f;
  return x <= 0.0f ? expm1f(x) * (kAlpha * kScale) : x * kScale;
}

// As PyTorch computes it; fminf(NaN, 0) is 0, but the NaN reaches the result through expf.
__device__ __forceinline__ float logsigmoid(float x) {
  return fminf(x, 0.0f) - log1pf(expf(-fabsf(x)));
}

} // namespace kf

#endif // __CUDACC__ || __CUDACC_RTC__
