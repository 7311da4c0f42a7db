// max_pool1d / avg_pool1d over each row of an [m, n] row-major matrix, as on [m, 1, n] without
// padding (width = (n - kernel) / stride + 1, from the code generator), with a per-column
// transform on load (the plan's pending elementwise prologue):
//
//   y = pre(col, in[row, col]);   out[row, j] = max or mean of y[j * stride .. + kernel - 1]
//
// One block of Threads threads per row (grid = dim3(m)) calls row_pool<Threads, R>(blockIdx.x,
// in, ld_in, out, width, kernel, stride, pre), R = Reduce::Max or Reduce::Mean (rows per warp:
// Threads = Lanes, a last argument kf::LaneTeam<Lanes>{lane}). Member t computes windows t, t +
// Threads, ...: neighbouring windows on neighbouring threads, so loads coalesce and overlapping
// windows hit L1. Windows are summed in order, in fp32; a NaN makes max NaN, as in PyTorch.
// Pre: __device__ float operator()(int col, float x) const. In, Out: float, kf::bf16 or kf::f16;
// In may be kf::Staged (a row staged in shared memory).
#pragma once

#include "math.cuh"
#include "row_reduce.cuh"

namespace kf {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// Pre concept: __device__ float operator()(int col, float x) const. In, Out: float, kf::bf16 or
// kf::f16 (dtype.cuh); windows are computed in float. In may also be kf::Staged: a row the caller
// staged in shared memory.
template <int Threads, Reduce R, class Pre, class In, class Out, class Team = BlockTeam<Threads>>
__device__ void row_pool(int row, const In *in, int ld_in, Out *out, int width, int kernel,
                         int stride, const Pre &pre, Team team = Team{}) {
  static_assert(Team::SIZE == Threads, "the team is Threads threads");
  static_assert(R == Reduce::Max || R == Reduce::Mean, "max_pool1d or avg_pool1d");
  const In *src = in + static_cast<long long>(row) * ld_in;
  Out *dst = out + static_cast<long long>(row) * width;
  for (int j = team.rank(); j < width; j += Threads) {
    const int first = j * stride;
    float acc = R == Reduce::Max ? row_detail::neg_inf() : 0.0f;
    for (int c = first; c < first + kernel; ++c) {
      const float y = pre(c, ldg(src + c));
      acc = R == Reduce::Max ? maximum(acc, y) : acc + y;
    }
    store(dst + j, R == Reduce::Max ? acc : acc / static_cast<float>(kernel));
  }
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
