// groupnorm over each row of an [m, n] row-major matrix: the row's n features split into `groups`
// contiguous groups of n / groups, each normalized by its own statistics, with a per-column
// transform applied on load (the pending elementwise prologue) and the per-feature affine on
// store:
//
//   y = pre(col, in[row, col])
//   out[row, col] = post(col, (y - mean_g) / sqrt(var_g + eps))
//
// with mean_g and the biased var_g over the group g holding col, as F.group_norm on [N, C].
//
// One block of Threads threads per row: the generated entry point calls
//   row_group_norm<Threads>(blockIdx.x, n, groups, in, ld_in, out, ld_out, eps, pre, post,
//                           smem, smem_floats)
// with grid = dim3(m), block = dim3(Threads) and the resident-row shared memory of
// row_kernel.cuh. The caller guarantees groups divides n (the compiler checks it, the runtime
// checks a bound dim). A unit of the team (a warp of a kf::BlockTeam) owns a group at a time
// (groups u, u + units, ...): it sums the group, then its squared deviations from the mean (two
// exact passes, no cancellation), then writes it; no statistics are shared between units, so
// one barrier (after the row is loaded) suffices. A kernel running rows per warp passes Threads =
// Lanes, a last argument kf::LaneTeam<Lanes>{lane}, and smem = nullptr, smem_floats = 0: the team
// owns every group in turn, streaming.
// - resident (smem != nullptr and n <= smem_floats): the transformed row is loaded once into
//   shared memory (float4 loads); one read and one write per element.
// - streaming (longer rows): each unit re-reads its group from global memory for each pass.
// Deterministic (a fixed butterfly per unit). in == out is allowed: a unit writes only the group
// it has finished reading.
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
