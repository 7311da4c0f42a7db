// cross_entropy over each row of [m, n] logits with a class index per row (torch.int64), as
// PyTorch's F.cross_entropy(reduction="none", label_smoothing=eps), and its gradient for the
// logits, with a per-column transform on load (the plan's pending elementwise prologue):
//
//   y = pre(col, in[row, col]);   lse = max + log Σ exp(y - max);   t = target[row]
//   loss = (1 - eps) (lse - y[t]) + eps (lse - Σ y / n)                 row_cross_entropy
//   out[row, col] = (exp(y - lse) - (1 - eps) [col = t] - eps / n) g    row_cross_entropy_grad
//
// A row whose target is ignore_index gives 0 (and a zero gradient row); a target outside
// [0, n) that is not ignore_index, which PyTorch stops on with a device-side assert, gives NaN
// for the row's loss and every element of its gradient, and no element outside the row is read.
// With `weight`, row_cross_entropy gives the row's weight in a mean instead: 1, 0 where ignored.
//
// One block of Threads threads per row (grid = dim3(m)), or rows per warp with Threads = Lanes
// and a last argument kf::LaneTeam<Lanes>{lane}. The loss reads the row once (online max and
// sum, Σ y and the target's y in the same pass); the gradient reads it twice and writes it
// once. Every member gets the loss, so later passes follow without a barrier. fp32,
// deterministic (row_kernel.cuh). A NaN in the row makes its loss NaN, as PyTorch's.
// `t` is the row's class index (target[row]), passed by value so that a pass on a staged row
// (row 0 of its own buffer) still reads its own. Pre: __device__ float operator()(int col, float
// x) const. In, Out: float, kf::bf16 or kf::f16;
// In may be kf::Staged (a row staged in shared memory).
#pragma once

#include "math.cuh"
#include "row_reduce.cuh"

namespace kf {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace row_detail {

// The row's log Σ exp(y), and Σ y and y[t] where wanted: one pass.
struct RowLogits {
  float lse, sum, picked;
};

template <int Threads, class Pre, class In, class Team>
__device__ __forceinline__ RowLogits row_logits(const In *src, int n, long long t, const Pre &pre,
                                                Team team) {
  MaxSum acc{neg_inf(), 0.0f};
  float any_nan = 0.0f, sum = 0.0f, picked = 0.0f;
  for_each_loaded(team, src, n, pre, [&](int col, float y) {
    any_nan = y != y ? 1.0f : any_nan;
    online_add(acc, y);
    sum += y;
    picked = col == t ? y : picked;
  });
  any_nan = team.max(any_nan);
  const MaxSum tot = team.max_sum(acc);
  const float lse = any_nan != 0.0f                        ? quiet_nan()
                    : tot.m == inf() || tot.m == neg_inf() ? tot.m
                                                           : tot.m + logf(tot.s);
  return {lse, team.sum(sum), team.sum(picked)};
}

} // namespace row_detail

template <int Threads, class Pre, class In, class Team = BlockTeam<Threads>>
__device__ __forceinline__ float
row_cross_entropy(int row, int n, const In *in, int ld_in, long long t, long long ignore_index,
                  float eps, bool weight, const Pre &pre, Team team = Team{}) {
  static_assert(Team::SIZE == Threads, "the team is Threads threads");
  using namespace row_detail;
  if (t == ignore_index)
    return 0.0f;
  if (t < 0 || t >= n)
    return quiet_nan();
  if (weight)
    return 1.0f;
  const RowLogits r =
      row_logits<Threads>(in + static_cast<long long>(row) * ld_in, n, t, pre, team);
  return (1.0f - eps) * (r.lse - r.picked) + eps * (r.lse - r.sum / static_cast<float>(n));
}

template <int Threads, class Pre, class In, class Out, class Team = BlockTeam<Threads>>
__device__ void row_cross_entropy_grad(int row, int n, const In *in, int ld_in, long long t,
                                       long long ignore_index, float eps, float g, Out *out,
                                       int ld_out, const Pre &pre, Team team = Team{}) {
  static_assert(Team::SIZE == Threads, "the team is Threads threads");
  using namespace row_detail;
  const In *src = in + static_cast<long long>(row) * ld_in;
  Out *dst = out + static_cast<long long>(row) * ld_out;
  if (t == ignore_index || t < 0 || t >= n) {
    const float v = t == ignore_index ? 0.0f : quiet_nan();
    for (int c = team.rank(); c < n; c += Threads)
      store(dst + c, v);
    return;
  }
  const float lse = row_logits<Threads>(src, n, t, pre, team).lse;
  const float smooth = eps / static_cast<float>(n);
  for (int c = team.rank(); c < n; c += Threads) {
    const float p = expf(pre(c, ldg(src + c)) - lse);
    store(dst + c, (p - (c == t ? 1.0f - eps : 0.0f) - smooth) * g);
  }
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
