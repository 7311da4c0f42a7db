// Programmatic dependent launch (sm_90 and later). Every generated kernel's first statement is
// kf::wait_prior_grid(): it holds every thread until the kernel launched before it on the stream
// has completed and its writes are visible. Where the code generator marks a launch so
// (LaunchGeometry::waits_prior_grid: kernels built for sm_90 or later), the runtime lets the
// kernel start while that kernel is still finishing (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_
// SERIALIZATION): its blocks are scheduled and reach the wait during the previous kernel's last
// blocks and memory flush, rather than after them. Before sm_90 the wait is empty and launches
// are plain.
#pragma once

namespace kf {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

__device__ __forceinline__ void wait_prior_grid() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
