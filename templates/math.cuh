// Scalar float activations used by generated code. Each matches PyTorch's float32 op in value
// (GELU is the exact erf form, PyTorch's default, not the tanh approximation) and propagates NaN
// like it. Accurate libm calls only (expf, erff): the fast intrinsics (__expf) miss the fp32
// error bound against the fp64 reference. There is no kf::tanh: generated code calls tanhf,
// because a kf::tanh(float) would be ambiguous with CUDA's ::tanh(float) under a using-directive.
#pragma once

// Device code only; the guard lets host C++ include every template header alike.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace kf {

// relu(NaN) = NaN like torch.relu; fmaxf(x, 0.0f) would return 0.
__device__ __forceinline__ float relu(float x) { return x < 0.0f ? 0.0f : x; }

__device__ __forceinline__ float gelu(float x) {
  const float kSqrtHalf = 0.70710678118654752440f; // M_SQRT1_2; NVRTC has no <cmath>
  return 0.5f * x * (1.0f + erff(x * kSqrtHalf));
}

// 1 / (1 + e^-x): tends to 0 for x -> -inf (expf overflows to inf) and to 1 for x -> inf.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float silu(float x) { return x * sigmoid(x); }

} // namespace kf

#endif // __CUDACC__ || __CUDACC_RTC__
