// Row reductions of a GEMM's product too wide for one tile, in two steps
// (row_partials_epilogue): the GEMM's epilogue reduces each row of a tile over the tile's
// columns, from its accumulators in registers, into one partial per (row, column tile), and a
// row kernel after it merges a row's partials in tile order into the reduction's result. No
// atomics: the result is the same run after run.
//
//   partial (partial_add,   Sum / Mean: the sum; Max / Min: the extremum (NaN with a NaN);
//   partial_merge):         LogSumExp: the online pair (max, sum of exp(y - max)), its max NaN
//                           where the tile holds a NaN; Var / Std: Welford's (count, mean, M2),
//                           merged with Chan's formula
//   merge (row_merge):      the sum of the sums (Mean: over n), the extremum of the extrema,
//                           logsumexp's pairs merged online, the Welford triples merged with
//                           Chan's formula (no E[y^2] - E[y]^2 cancellation); special values as
//                           row_reduce.cuh's
//
// Layout: a row's partials are [tiles][floats] floats, floats the sum of partial_floats() over
// the reductions the epilogue writes (RowPartials<R...>::FLOATS); a reduction at offset o has
// row r's partial of tile t at p[(r * tiles + t) * floats + o] (and o + 1, o + 2 for
// LogSumExp's sum and Welford's mean and M2). A partial in registers has the same floats.
#pragma once

#include "row_reduce.cuh"

namespace kf {

KF_HOST_DEVICE constexpr int partial_floats(Reduce r) {
  return r == Reduce::LogSumExp ? 2 : r == Reduce::Var || r == Reduce::Std ? 3 : 1;
}

// Whether a GEMM epilogue's Rows writes row partials (a member `static constexpr bool
// PARTIALS = true`) rather than running whole-row passes.
template <class R, class = void> struct writes_row_partials {
  static constexpr bool value = false;
};
template <class R> struct writes_row_partials<R, decltype(void(R::PARTIALS))> {
  static constexpr bool value = R::PARTIALS;
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// Reduction R's partial over no values, at p[0 .. partial_floats(R) - 1].
template <Reduce R> __device__ __forceinline__ void partial_init(float *p) {
  using namespace row_detail;
  if constexpr (R == Reduce::Max)
    p[0] = neg_inf();
  else if constexpr (R == Reduce::Min)
    p[0] = inf();
  else if constexpr (R == Reduce::LogSumExp) {
    p[0] = neg_inf();
    p[1] = 0.0f;
  } else {
#pragma unroll
    for (int e = 0; e < partial_floats(R); ++e)
      p[e] = 0.0f;
  }
}

// Value y added to the partial at p.
template <Reduce R> __device__ __forceinline__ void partial_add(float *p, float y) {
  using namespace row_detail;
  if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
    p[0] += y;
  } else if constexpr (R == Reduce::Max) {
    p[0] = maximum(p[0], y);
  } else if constexpr (R == Reduce::Min) {
    p[0] = minimum(p[0], y);
  } else if constexpr (R == Reduce::Var || R == Reduce::Std) {
    Welford a{p[0], p[1], p[2]};
    welford_add(a, y);
    p[0] = a.n;
    p[1] = a.mean;
    p[2] = a.m2;
  } else {
    // A NaN max stays (online_add would let a later value replace it).
    MaxSum a{p[0], p[1]};
    online_add(a, y);
    p[0] = p[0] != p[0] || y != y ? quiet_nan() : a.m;
    p[1] = a.s;
  }
}

// The partial of later values q merged into p's (of the values before them).
template <Reduce R> __device__ __forceinline__ void partial_merge(float *p, const float *q) {
  using namespace row_detail;
  if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
    p[0] += q[0];
  } else if constexpr (R == Reduce::Max) {
    p[0] = maximum(p[0], q[0]);
  } else if constexpr (R == Reduce::Min) {
    p[0] = minimum(p[0], q[0]);
  } else if constexpr (R == Reduce::Var || R == Reduce::Std) {
    const Welford a = welford_merge(Welford{p[0], p[1], p[2]}, Welford{q[0], q[1], q[2]});
    p[0] = a.n;
    p[1] = a.mean;
    p[2] = a.m2;
  } else {
    const MaxSum a = online_merge(MaxSum{p[0], p[1]}, MaxSum{q[0], q[1]});
    p[0] = p[0] != p[0] || q[0] != q[0] ? quiet_nan() : a.m;
    p[1] = a.s;
  }
}

// The partials of reductions R..., one after another (their offsets: the floats before them).
template <Reduce... R> struct RowPartials {
  static constexpr int FLOATS = (partial_floats(R) + ...);

  __device__ static void init(float *p) {
    int o = 0;
    ((partial_init<R>(p + o), o += partial_floats(R)), ...);
  }
  __device__ static void merge(float *p, const float *q) {
    int o = 0;
    ((partial_merge<R>(p + o, q + o), o += partial_floats(R)), ...);
  }
};

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
