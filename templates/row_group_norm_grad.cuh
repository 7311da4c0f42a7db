// The gradient of groupnorm for its input, over each row of an [m, n] row-major matrix, as
// PyTorch's native_group_norm_backward: per group of n / groups features, with x̂ = (x - mean)
// rstd from the group's mean and biased variance of x, gx = pre(col, g[row, col]) * weight[col],
//
//   out[row, col] = post(col, rstd (gx - mean(gx) - x̂ mean(gx x̂)))
//
// One block of Threads threads per row (grid = dim3(m)) calls row_group_norm_grad<Threads>(
// blockIdx.x, n, groups, g, ld_g, x_row, weight, out, ld_out, eps, pre, post); rows per warp:
// Threads = Lanes, a last argument kf::LaneTeam<Lanes>{lane}. x_row is this row of x, weight
// nullptr for none. A unit of the team owns groups u, u + units, ... and makes four passes over
// its group (x's mean, x's deviations, the two sums, the store), all exact and in a fixed order,
// so no barrier is needed and the result is deterministic; the group's elements stay in L1.
// Pre and Post: __device__ float operator()(int col, float x) const. In, X, W, Out: float,
// kf::bf16 or kf::f16, computed in float; In may be kf::Staged (a row staged in shared memory).
#pragma once

#include "row_kernel.cuh"

namespace kf {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

template <int Threads, class Pre, class Post, class In, class X, class W, class Out,
          class Team = BlockTeam<Threads>>
__device__ void row_group_norm_grad(int row, int n, int groups, const In *g, int ld_g,
                                    const X *x_row, const W *weight, Out *out, int ld_out,
                                    float eps, const Pre &pre, const Post &post,
                                    Team team = Team{}) {
  static_assert(Team::SIZE == Threads, "the team is Threads threads");
  const In *src = g + static_cast<long long>(row) * ld_g;
  Out *dst = out + static_cast<long long>(row) * ld_out;
  const int size = n / groups;
  const auto unit = team.unit(); // the member's warp (or its whole team), which owns the group
  const int lane = unit.rank();
  // The means as sums times 1 / size, as PyTorch's group_norm backward kernels take them.
  const float inv_count = 1.0f / static_cast<float>(size);
  auto gx = [&](int c) { return pre(c, ldg(src + c)) * (weight ? ldg(weight + c) : 1.0f); };
  for (int grp = team.unit_index(); grp < groups; grp += Threads / Team::UNIT) {
    const int first = grp * size, end = first + size;
    float s = 0.0f;
    for (int c = first + lane; c < end; c += Team::UNIT)
      s += ldg(x_row + c);
    const float mean = unit.sum(s) * inv_count;
    float q = 0.0f;
    for (int c = first + lane; c < end; c += Team::UNIT)
      q += (ldg(x_row + c) - mean) * (ldg(x_row + c) - mean);
    const float rstd = 1.0f / sqrtf(unit.sum(q) * inv_count + eps);
    float sum_gx = 0.0f, sum_gx_xhat = 0.0f;
    for (int c = first + lane; c < end; c += Team::UNIT) {
      const float d = gx(c);
      sum_gx += d;
      sum_gx_xhat += d * ((ldg(x_row + c) - mean) * rstd);
    }
    const float mean_gx = unit.sum(sum_gx) * inv_count;
    const float mean_gx_xhat = unit.sum(sum_gx_xhat) * inv_count;
    for (int c = first + lane; c < end; c += Team::UNIT)
      store(dst + c,
            post(c, rstd * (gx(c) - mean_gx - (ldg(x_row + c) - mean) * rstd * mean_gx_xhat)));
  }
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
