// An elementwise pass over one row of an [m, n] row-major matrix inside a row kernel, after the
// passes that reduced the row (e.g. exp(h - max(h)) / sum(...)):
//
//   out[row, col] = f(col, in[row, col])
//
// f is generated and holds the row's earlier results (a max, a sum). A team calls
// row_map<Threads>(row, n, in, ld_in, out, ld_out, f) (rows per warp: Threads = Lanes and a last
// argument kf::LaneTeam<Lanes>{lane}), each thread taking for_each_loaded's elements, four per
// access where the row's pointers allow. F: __device__ float operator()(int col, float x) const.
// In, Out: float, kf::bf16 or kf::f16, computed in float, rounded once on store; In may be
// kf::Staged (a row staged in shared memory).
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
