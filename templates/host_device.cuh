// KF_HOST_DEVICE: marks the geometry helpers that both the generated kernels (NVRTC/NVCC) and
// the code generator (plain C++) read, so launch geometry has one definition.
#pragma once

#ifndef KF_HOST_DEVICE
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KF_HOST_DEVICE __host__ __device__
#else
#define KF_HOST_DEVICE
#endif
#endif

namespace kf {

KF_HOST_DEVICE constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

} // namespace kf
