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
// the runtime check it). In registers, where the row's float4 chunks fit a few per member and a
// group is the chunks of a few aligned lanes (n a multiple of 4 * Threads, groups of 4 to 128
// features): each member loads its chunks once, and a group's sums are shuffles among its lanes,
// every group at once. Otherwise a unit of the team owns groups u, u + units, ...: it sums the
// group, then its squared deviations from the mean (two exact passes), then writes it, so one
// barrier (after the row is loaded) suffices; resident (n <= smem_floats): the row is loaded once
// into shared memory; streaming: each unit re-reads its group per pass. Deterministic; in == out
// is allowed (a member writes only what it has read itself, or a unit the group it has finished).
// Pre and Post: __device__ float operator()(int col, float x) const. In, Out: float, kf::bf16 or
// kf::f16 (dtype.cuh), computed in float; In may be kf::Staged (a row staged in shared memory).
#pragma once

#include "row_kernel.cuh"

namespace kf {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace row_detail {

// The most float4 chunks of a row a member holds in registers (row_group_norm_in_registers).
constexpr int kGroupNormChunks = 8;

// x summed over the member's `lanes` aligned lanes (a power of two dividing 32), the same in each.
__device__ __forceinline__ float aligned_lanes_sum(float x, int lanes) {
  for (int offset = 1; offset < lanes; offset <<= 1)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// row_group_norm with the row in registers: member r holds chunks r, r + SIZE, ... (elements
// 4i .. 4i + 3 of chunk i), so a group of `size` features is the same chunk of size / 4 aligned
// lanes in each sweep. False, having done nothing, where the row does not fit that layout.
template <class Pre, class Post, class In, class Out, class Team>
__device__ __forceinline__ bool row_group_norm_in_registers(int n, int size, const In *src,
                                                            Out *dst, float eps, const Pre &pre,
                                                            const Post &post, Team team) {
  constexpr int kSweep = 4 * Team::SIZE;
  const int lanes = size / 4, chunks = n / kSweep;
  if (Team::SIZE % 32 != 0 || n % kSweep != 0 || chunks > kGroupNormChunks || size % 4 != 0 ||
      lanes > 32 || 32 % lanes != 0 || !vec4_aligned(src) || !vec4_aligned(dst))
    return false;
  const float count = static_cast<float>(size);
  float4 v[kGroupNormChunks];
#pragma unroll
  for (int s = 0; s < kGroupNormChunks; ++s)
    if (s < chunks) {
      const int i = s * Team::SIZE + team.rank(), c = 4 * i;
      const float4 x = load4(src, i, true);
      v[s] = make_float4(pre(c, x.x), pre(c + 1, x.y), pre(c + 2, x.z), pre(c + 3, x.w));
    }
#pragma unroll
  for (int s = 0; s < kGroupNormChunks; ++s)
    if (s < chunks) {
      const int i = s * Team::SIZE + team.rank(), c = 4 * i;
      const float mean = aligned_lanes_sum(v[s].x + v[s].y + v[s].z + v[s].w, lanes) / count;
      const float4 d = make_float4(v[s].x - mean, v[s].y - mean, v[s].z - mean, v[s].w - mean);
      const float q = aligned_lanes_sum(d.x * d.x + d.y * d.y + d.z * d.z + d.w * d.w, lanes);
      const float rstd = 1.0f / sqrtf(q / count + eps);
      store4(dst, i,
             make_float4(post(c, d.x * rstd), post(c + 1, d.y * rstd), post(c + 2, d.z * rstd),
                         post(c + 3, d.w * rstd)),
             true);
    }
  return true;
}

} // namespace row_detail

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
  if (row_group_norm_in_registers(n, n / groups, src, dst, eps, pre, post, team))
    return;
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
