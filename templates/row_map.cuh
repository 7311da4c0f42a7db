// An elementwise pass over one row of an [m, n] row-major matrix inside a row kernel:
//
//   out[row, col] = f(col, in[row, col])
//
// where f is the generated functor of a value computed from the row and from the row's results
// of earlier passes (a reduction's max or sum, held by f as members): the epilogue of a row
// kernel, e.g. exp(h - max(h)) / sum(...) after the passes that reduced the row. One block of
// Threads threads per row calls
//   row_map<Threads>(row, n, in, ld_in, out, ld_out, f)
// (a kernel running rows per warp: Threads = Lanes and a last argument
// kf::LaneTeam<Lanes>{lane})
// with the elements of each thread those of row_kernel.cuh's for_each_loaded, four elements per
// access where the row's pointers are aligned to four elements. In, Out: float, kf::bf16 or
// kf::f16 (dtype.cuh); f computes in float and the store rounds once to Out.
#pragma once

#include "row_kernel.cuh"

namespace kf {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// F concept: __device__ float operator()(int col, float x) const. In may also be kf::Staged: a row
// the caller staged in shared memory.
template <int Threads, class F, class In, class Out, class Team = BlockTeam<Threads>>
__device__ __forceinline__ void row_map(int row, int n, const In *in, int ld_in, Out *out,
                                        int ld_out, const F &f, Team team = Team{}) {
  static_assert(Team::SIZE == Threads, "the team is Threads threads");
  const In *src = in + static_cast<long long>(row) * ld_in;
  Out *dst = out + static_cast<long long>(row) * ld_out;
  const bool vin = vec4_aligned(src), vout = vec4_aligned(dst);
  const int n4 = n / 4;
  for (int i = team.rank(); i < n4; i += Threads) {
    float4 v = load4(src, i, vin);
    v.x = f(4 * i, v.x);
    v.y = f(4 * i + 1, v.y);
    v.z = f(4 * i + 2, v.z);
    v.w = f(4 * i + 3, v.w);
    store4(dst, i, v, vout);
  }
  for (int c = 4 * n4 + team.rank(); c < n; c += Threads)
    store(dst + c, f(c, ldg(src + c)));
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
