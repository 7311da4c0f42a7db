// Row reductions of a GEMM's product too wide for one tile, in two steps
// (row_partials_epilogue): the GEMM's epilogue reduces each row of a staged tile over the tile's
// columns into one partial per (row, column tile), and a row kernel after it merges a row's
// partials in tile order into the reduction's result. No atomics: the result is the same run
// after run.
//
//   partial (row_partial):  Sum / Mean: the sum; Max / Min: the extremum (NaN with a NaN);
//                           LogSumExp: the online pair (max, sum of exp(y - max)), its max NaN
//                           where the tile holds a NaN; Var / Std: Welford's (count, mean, M2)
//   merge (row_merge):      the sum of the sums (Mean: over n), the extremum of the extrema,
//                           logsumexp's pairs merged online, the Welford triples merged with
//                           Chan's formula (no E[y^2] - E[y]^2 cancellation); special values as
//                           row_reduce.cuh's
//
// Layout: a row's partials are [tiles][floats] floats, floats the sum of partial_floats() over
// the reductions the epilogue writes; a reduction at offset o has row r's partial of tile t at
// p[(r * tiles + t) * floats + o] (and o + 1 for LogSumExp's sum).
#pragma once

#include "row_reduce.cuh"

namespace kf {

KF_HOST_DEVICE constexpr int partial_floats(Reduce r) {
  return r == Reduce::LogSumExp ? 2 : r == Reduce::Var || r == Reduce::Std ? 3 : 1;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// Whether a GEMM epilogue's Rows writes row partials (a member `static constexpr bool
// PARTIALS = true`) rather than running whole-row passes.
template <class R, class = void> struct writes_row_partials {
  static constexpr bool value = false;
};
template <class R> struct writes_row_partials<R, decltype(void(R::PARTIALS))> {
  static constexpr bool value = R::PARTIALS;
};

// The partial of reduction R over a tile's `cols` staged values x[0 .. cols - 1] of one row,
// y = pre(c, x[c]), written at out[0 .. partial_floats(R) - 1] by the team's first member.
template <Reduce R, class Pre, class Team>
__device__ __forceinline__ void row_partial(int cols, const Staged *x, const Pre &pre, Team team,
                                            float *out) {
  using namespace row_detail;
  if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
    float s = 0.0f;
    for_each_loaded(team, x, cols, pre, [&](int, float y) { s += y; });
    s = team.sum(s);
    if (team.rank() == 0)
      out[0] = s;
  } else if constexpr (R == Reduce::Max || R == Reduce::Min) {
    float m = R == Reduce::Max ? neg_inf() : inf();
    for_each_loaded(team, x, cols, pre,
                    [&](int, float y) { m = R == Reduce::Max ? maximum(m, y) : minimum(m, y); });
    if constexpr (R == Reduce::Max)
      m = team.combine(m, MaximumOp{});
    else
      m = team.combine(m, MinimumOp{});
    if (team.rank() == 0)
      out[0] = m;
  } else if constexpr (R == Reduce::Var || R == Reduce::Std) {
    Welford acc{0.0f, 0.0f, 0.0f};
    for_each_loaded(team, x, cols, pre, [&](int, float y) { welford_add(acc, y); });
    const Welford tot = team.welford(acc);
    if (team.rank() == 0) {
      out[0] = tot.n;
      out[1] = tot.mean;
      out[2] = tot.m2;
    }
  } else {
    MaxSum acc{neg_inf(), 0.0f};
    float any_nan = 0.0f;
    for_each_loaded(team, x, cols, pre, [&](int, float y) {
      any_nan = y != y ? 1.0f : any_nan;
      online_add(acc, y);
    });
    any_nan = team.max(any_nan);
    const MaxSum tot = team.max_sum(acc);
    if (team.rank() == 0) {
      out[0] = any_nan != 0.0f ? quiet_nan() : tot.m;
      out[1] = tot.s;
    }
  }
}

// Reduction R of row `row` of n values from its `tiles` partials at offset `offset` of the
// partials (`floats` per tile), merged in tile order by a block of Threads threads (or a Team);
// every member gets the result. `correction`: var / std's (divisor max(0, n - correction)).
template <int Threads, Reduce R, class Team = BlockTeam<Threads>>
__device__ __forceinline__ float row_merge(int row, int tiles, const float *partials, int floats,
                                           int offset, int n, float correction,
                                           Team team = Team{}) {
  static_assert(Team::SIZE == Threads, "the team is Threads threads");
  using namespace row_detail;
  const float *p = partials + static_cast<long long>(row) * tiles * floats + offset;
  if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
    float s = 0.0f;
    for (int t = team.rank(); t < tiles; t += Team::SIZE)
      s += p[t * floats];
    s = team.sum(s);
    return R == Reduce::Mean ? s / static_cast<float>(n) : s;
  } else if constexpr (R == Reduce::Max) {
    float m = neg_inf();
    for (int t = team.rank(); t < tiles; t += Team::SIZE)
      m = maximum(m, p[t * floats]);
    return team.combine(m, MaximumOp{});
  } else if constexpr (R == Reduce::Min) {
    float m = inf();
    for (int t = team.rank(); t < tiles; t += Team::SIZE)
      m = minimum(m, p[t * floats]);
    return team.combine(m, MinimumOp{});
  } else if constexpr (R == Reduce::Var || R == Reduce::Std) {
    Welford acc{0.0f, 0.0f, 0.0f};
    for (int t = team.rank(); t < tiles; t += Team::SIZE)
      acc = welford_merge(acc, Welford{p[t * floats], p[t * floats + 1], p[t * floats + 2]});
    const Welford tot = team.welford(acc);
    const float var = tot.m2 / fmaxf(0.0f, static_cast<float>(n) - correction);
    return R == Reduce::Std ? sqrtf(var) : var;
  } else {
    MaxSum acc{neg_inf(), 0.0f};
    float any_nan = 0.0f;
    for (int t = team.rank(); t < tiles; t += Team::SIZE) {
      const float m = p[t * floats];
      any_nan = m != m ? 1.0f : any_nan;
      acc = online_merge(acc, MaxSum{m, p[t * floats + 1]});
    }
    any_nan = team.max(any_nan);
    const MaxSum tot = team.max_sum(acc);
    // An infinite max is the result itself (torch.logsumexp shifts by 0 there).
    return any_nan != 0.0f                        ? quiet_nan()
           : tot.m == inf() || tot.m == neg_inf() ? tot.m
                                                  : tot.m + logf(tot.s);
  }
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
