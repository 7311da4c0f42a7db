// A reduction over each row of an [m, n] row-major matrix, one value per row, with a per-column
// transform on load (the plan's pending elementwise prologue): torch.sum / mean / amax / amin /
// logsumexp / var / std along the last axis, keepdim or not (the same m floats).
//
//   y = pre(col, in[row, col]);   result = reduce over the row of y
//
// float r = row_reduce<Threads, R>(row, n, in, ld_in, correction, pre): one block of
// row_threads(n) threads per row, or rows per warp with Threads = Lanes and a last
// argument kf::LaneTeam<Lanes>{lane} (shuffles only). One read of the row. Every member gets the
// result, so later passes over the row follow without a barrier; the entry point stores r where
// the plan says. `correction` is var / std's (divisor max(0, n - correction)).
//
// fp32, deterministic (row_kernel.cuh). Special values as PyTorch: max / min NaN with a NaN;
// logsumexp NaN with a NaN, +inf with a +inf, -inf for a row of -inf; var and std NaN with a NaN
// or an infinity.
#pragma once

#include "math.cuh"
#include "row_kernel.cuh"

namespace kf {

enum class Reduce { Sum, Mean, Max, Min, LogSumExp, Var, Std };

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace row_detail {

struct MaximumOp {
  __device__ float operator()(float a, float b) const { return maximum(a, b); }
};
struct MinimumOp {
  __device__ float operator()(float a, float b) const { return minimum(a, b); }
};

__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fffffff); }

} // namespace row_detail

// Pre concept: __device__ float operator()(int col, float x) const. In: float, kf::bf16 or kf::f16
// (dtype.cuh); the reduction is computed in float. In may also be kf::Staged: a row the caller
// staged in shared memory.
template <int Threads, Reduce R, class Pre, class In, class Team = BlockTeam<Threads>>
__device__ __forceinline__ float row_reduce(int row, int n, const In *in, int ld_in,
                                            float correction, const Pre &pre, Team team = Team{}) {
  static_assert(Team::SIZE == Threads, "the team is Threads threads");
  using namespace row_detail;
  const In *src = in + static_cast<long long>(row) * ld_in;
  float result;
  if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
    float s = 0.0f;
    for_each_loaded(team, src, n, pre, [&](int, float y) { s += y; });
    s = team.sum(s);
    result = R == Reduce::Mean ? s / static_cast<float>(n) : s;
  } else if constexpr (R == Reduce::Max) {
    float m = neg_inf();
    for_each_loaded(team, src, n, pre, [&](int, float y) { m = maximum(m, y); });
    result = team.combine(m, MaximumOp{});
  } else if constexpr (R == Reduce::Min) {
    float m = inf();
    for_each_loaded(team, src, n, pre, [&](int, float y) { m = minimum(m, y); });
    result = team.combine(m, MinimumOp{});
  } else if constexpr (R == Reduce::LogSumExp) {
    MaxSum acc{neg_inf(), 0.0f};
    float any_nan = 0.0f;
    for_each_loaded(team, src, n, pre, [&](int, float y) {
      any_nan = y != y ? 1.0f : any_nan;
      online_add(acc, y);
    });
    any_nan = team.max(any_nan);
    const MaxSum tot = team.max_sum(acc);
    // An infinite max is the result itself (torch.logsumexp shifts by 0 there).
    result = any_nan != 0.0f                        ? quiet_nan()
             : tot.m == inf() || tot.m == neg_inf() ? tot.m
                                                    : tot.m + logf(tot.s);
  } else {
    static_assert(R == Reduce::Var || R == Reduce::Std, "a Reduce");
    Welford acc{0.0f, 0.0f, 0.0f};
    for_each_loaded(team, src, n, pre, [&](int, float y) { welford_add(acc, y); });
    const Welford tot = team.welford(acc);
    const float var = tot.m2 / fmaxf(0.0f, static_cast<float>(n) - correction);
    result = R == Reduce::Std ? sqrtf(var) : var;
  }
  return result;
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
