// groupnorm over each row of an [m, n] row-major matrix, as F.group_norm on [N, C]: the row's n
// features in `groups` contiguous groups of n / groups, each normalized by its own mean and
// biased variance, a per-column transform on load (the pending elementwise prologue) and the
// per-feature affine on store:
//
//   y = pre(col, in[row, col]);   out[row, col] = post(col, (y - mean_g) / sqrt(var_g + eps))
//
// One block of Threads threads per row (grid = dim3(m), the resident-row shared memory of
// row_kernel.cuh) calls row_group_norm<Threads>(blockIdx.x, n, groups, in, ld_in, out, ld_out,
// eps, pre, post, smem, smem_floats); rows per warp: Threads = Lanes, a last argument
// kf::LaneTeam<Lanes>{lane}, smem = nullptr, smem_floats = 0. groups divides n (the compiler and
// the runtime check it). A unit of the team owns groups u, u + units, ...: it sums the group, then
// its squared deviations from the mean (two exact passes), then writes it, so one barrier (after
// the row is loaded) suffices. Resident (n <= smem_floats): the row is loaded once into shared
// memory; streaming: each unit re-reads its group per pass. Deterministic; in == out is allowed
// (a unit writes only the group it has finished reading).
// Pre and Post: __device__ float operator()(int col, float x) const. In, Out: float, kf::bf16 or
// kf::f16 (dtype.cuh), computed in float; In may be kf::Staged (a row staged in shared memory).
#pragma once

#include "row_kernel.cuh"

namespace kf {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// Pre concept: __device__ float operator()(int col, float x) const; Post likewise, given the
// normalized value. In, Out: float, kf::bf16 or kf::f16 (dtype.cuh); the row is computed in float.
// In may also be kf::Staged: a row the caller staged in shared memory.
template <int Threads, class Pre, class Post, class In, class Out, class Team = BlockTeam<Threads>>
__device__ void row_group_norm(int row, int n, int groups, const In *in, int ld_in, Out *out,
                               int ld_out, float eps, const Pre &pre, const Post &post, float *smem,
                               int smem_floats, Team team = Team{}) {
  static_assert(Team::SIZE == Threads, "the team is Threads threads");
  using namespace row_detail;
  const In *src = in + static_cast<long long>(row) * ld_in;
  Out *dst = out + static_cast<long long>(row) * ld_out;
  const bool resident = smem != nullptr && n <= smem_floats;
  if (resident) {
    for_each_loaded(team, src, n, pre, [&](int c, float y) { smem[c] = y; });
    team.sync();
  }
  auto get = [&](int c) { return resident ? smem[c] : pre(c, ldg(src + c)); };
  const int size = n / groups;
  const auto unit = team.unit(); // the member's warp (or its whole team), which owns the group
  const int lane = unit.rank();
  const float count = static_cast<float>(size);
  for (int g = team.unit_index(); g < groups; g += Threads / Team::UNIT) {
    const int first = g * size, end = first + size;
    float s = 0.0f;
    for (int c = first + lane; c < end; c += Team::UNIT)
      s += get(c);
    const float mean = unit.sum(s) / count;
    float q = 0.0f;
    for (int c = first + lane; c < end; c += Team::UNIT)
      q += (get(c) - mean) * (get(c) - mean);
    const float rstd = 1.0f / sqrtf(unit.sum(q) / count + eps);
    for (int c = first + lane; c < end; c += Team::UNIT)
      store(dst + c, post(c, (get(c) - mean) * rstd));
  }
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
