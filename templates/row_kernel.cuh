// What every row kernel shares: a team of threads per row of an [m, n] row-major matrix
// (BlockTeam: the whole block; LaneTeam: lanes of one warp, for rows per warp; WarpTeam: the
// warp), block size and team lanes by row length, the shared-memory budget of a resident row,
// deterministic team reductions, and vector loads of the row (any dtype.cuh type or kf::Staged,
// converted to float) with the per-column prologue applied on load.
//
// Resident rows: a kernel keeping its transformed row in dynamic shared memory (16-byte aligned)
// gets round_up(n, 4) floats where that fits in ROW_SMEM_CAP_BYTES, else none (smem_floats = 0:
// it streams, reading the row twice); a lane team streams. Deterministic: fixed element order per
// thread, fixed shuffle pattern per warp, per-warp results combined in warp order. Also valid
// host C++, so the code generator sizes blocks and shared memory with the same constants.
#pragma once

#include "dtype.cuh"
#include "host_device.cuh"

namespace kf {

// Default cap on the dynamic shared memory of one row block. An sm_90 block may opt in to
// 227 KiB; above 48 KiB the launcher must raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
inline constexpr int ROW_SMEM_CAP_BYTES = 200 * 1024;

// Block size by row length: about 8 to 32 elements per thread.
KF_HOST_DEVICE constexpr int row_threads(int n) {
  return n <= 1024 ? 128 : n <= 4096 ? 256 : n <= 16384 ? 512 : 1024;
}

// Lanes of a LaneTeam by row length where a warp runs many rows (the GEMM's row epilogue): at
// most 16 elements per lane, so a warp runs up to 32 short rows at once, each reduction taking
// log2(lanes) shuffles, where a warp per row would run them one after another with five each.
KF_HOST_DEVICE constexpr int row_team_lanes(int n) {
  int lanes = 1;
  while (lanes < 32 && lanes * 16 < n)
    lanes *= 2;
  return lanes;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace row_detail {

// NVRTC has no <cmath> INFINITY.
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// Online softmax summary: the running max m and sum s of exp(y - m) over the values seen.
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ void online_add(MaxSum &a, float y) {
  if (y > a.m) {
    // a.m = -inf: exp(-inf) = 0. The new term, exp(y - y), is 1, or NaN for y = +inf as
    // PyTorch's exp(inf - inf) is: the row is then NaN.
    a.s = a.s * expf(a.m - y) + (y == -neg_inf() ? __int_as_float(0x7fc00000) : 1.0f);
    a.m = y;
  } else {
    // -inf adds 0 (exp(-inf - -inf) would be NaN); NaN fails y > a.m and poisons s.
    a.s += y == neg_inf() ? 0.0f : expf(y - a.m);
  }
}

// Commutative bitwise (fmaxf and + are), so butterfly lanes agree.
__device__ __forceinline__ MaxSum online_merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  // An empty side (s == 0, m == -inf) adds 0 rather than 0 * exp(NaN).
  const float sa = a.s == 0.0f ? 0.0f : a.s * expf(a.m - m);
  const float sb = b.s == 0.0f ? 0.0f : b.s * expf(b.m - m);
  return MaxSum{m, sa + sb};
}

// Welford's running (count, mean, M2) of the values seen; merged with Chan's formula, so a
// row's variance needs one read and no E[y^2] - E[y]^2 cancellation.
struct Welford {
  float n, mean, m2;
};

__device__ __forceinline__ void welford_add(Welford &a, float y) {
  a.n += 1.0f;
  const float d = y - a.mean;
  a.mean += d / a.n;
  a.m2 += d * (y - a.mean);
}

__device__ __forceinline__ Welford welford_merge(Welford a, Welford b) {
  if (b.n == 0.0f)
    return a;
  if (a.n == 0.0f)
    return b;
  const float n = a.n + b.n, d = b.mean - a.mean;
  return Welford{n, a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * (b.n / n))};
}

// The stages of Lanes lanes of one warp (a power of two; the lanes aligned to it, `mask` the
// lanes): Lanes = 32 is a warp, the stage of both teams. Butterfly: every lane ends with the
// same bits when combine is commutative bitwise.
template <int Lanes> __device__ __forceinline__ unsigned lanes_mask(int lane) {
  return Lanes == 32 ? 0xffffffffu : ((1u << Lanes) - 1u) << (lane & (32 - Lanes));
}

template <int Lanes, class Combine>
__device__ __forceinline__ float lanes_combine(float v, Combine combine, unsigned mask) {
#pragma unroll
  for (int o = Lanes / 2; o > 0; o >>= 1)
    v = combine(v, __shfl_xor_sync(mask, v, o, Lanes));
  return v;
}

template <int Lanes> __device__ __forceinline__ MaxSum lanes_max_sum(MaxSum v, unsigned mask) {
#pragma unroll
  for (int o = Lanes / 2; o > 0; o >>= 1) {
    const MaxSum other{__shfl_xor_sync(mask, v.m, o, Lanes), __shfl_xor_sync(mask, v.s, o, Lanes)};
    v = online_merge(v, other);
  }
  return v;
}

// The merge is not commutative bitwise, so lanes merge down to the first in a fixed order and
// only the first lane's result is the lanes'.
template <int Lanes>
__device__ __forceinline__ Welford lanes_welford_to_first(Welford v, unsigned mask) {
#pragma unroll
  for (int o = Lanes / 2; o > 0; o >>= 1) {
    const Welford other{__shfl_down_sync(mask, v.n, o, Lanes),
                        __shfl_down_sync(mask, v.mean, o, Lanes),
                        __shfl_down_sync(mask, v.m2, o, Lanes)};
    v = welford_merge(v, other);
  }
  return v;
}

} // namespace row_detail

// A team is the threads that work on one row together; every row template takes one. Each
// member i of a team of SIZE has rank() i; sync() is a barrier of the team; the reductions give
// every member the same result, in a fixed order (deterministic). unit() is the member's part of
// the team of UNIT members (at most a warp) that works alone, unit_index() which one it is.

// Lanes lanes of one warp on a row (lane: the caller's threadIdx.x % 32; the team is the Lanes
// lanes aligned to Lanes that hold it, and all of them take part): shuffles only, no shared
// memory, so a warp can run 32 / Lanes rows at once, e.g. over a tile it staged. The teams of a
// warp are independent: one may end its rows before another.
template <int Lanes> struct LaneTeam {
  static_assert(Lanes >= 1 && Lanes <= 32 && (Lanes & (Lanes - 1)) == 0,
                "Lanes: a power of two, at most 32");
  int lane;

  static constexpr int SIZE = Lanes;
  static constexpr int UNIT = Lanes; // a team of at most a warp is its own unit

  __device__ int rank() const { return lane & (Lanes - 1); }
  __device__ unsigned mask() const { return row_detail::lanes_mask<Lanes>(lane); }
  __device__ void sync() const { __syncwarp(mask()); }
  __device__ LaneTeam unit() const { return *this; }
  __device__ int unit_index() const { return 0; }

  template <class Combine> __device__ __forceinline__ float combine(float v, Combine op) const {
    return row_detail::lanes_combine<Lanes>(v, op, mask());
  }
  __device__ __forceinline__ float max(float v) const { return combine(v, row_detail::MaxOp{}); }
  __device__ __forceinline__ float sum(float v) const { return combine(v, row_detail::SumOp{}); }
  __device__ __forceinline__ row_detail::MaxSum max_sum(row_detail::MaxSum v) const {
    return row_detail::lanes_max_sum<Lanes>(v, mask());
  }
  // The first member's merge, broadcast: the same order as BlockTeam's warp stage.
  __device__ __forceinline__ row_detail::Welford welford(row_detail::Welford v) const {
    v = row_detail::lanes_welford_to_first<Lanes>(v, mask());
    return row_detail::Welford{__shfl_sync(mask(), v.n, 0, Lanes),
                               __shfl_sync(mask(), v.mean, 0, Lanes),
                               __shfl_sync(mask(), v.m2, 0, Lanes)};
  }
};

// One warp on a row.
using WarpTeam = LaneTeam<32>;

// The whole block of Threads threads (a multiple of 32) on a row: the warps' results are
// combined in warp order through scratch(), static shared memory that a trailing barrier in
// every reduction leaves free for the next one.
template <int Threads> struct BlockTeam {
  static_assert(Threads % 32 == 0 && Threads >= 32 && Threads <= 1024, "Threads: warps, <= 1024");
  static constexpr int SIZE = Threads;
  static constexpr int WARPS = Threads / 32;
  static constexpr int UNIT = 32;

  __device__ int rank() const { return threadIdx.x; }
  __device__ void sync() const { __syncthreads(); }
  // This thread's warp: the unit that owns part of the row alone (row_group_norm's groups).
  __device__ WarpTeam unit() const { return WarpTeam{static_cast<int>(threadIdx.x & 31)}; }
  __device__ int unit_index() const { return threadIdx.x >> 5; }

  // One array for every reduction of every row template in the kernel (3 * WARPS floats, the
  // most any reduction uses): an array per reduction (one per member instantiation) raised the
  // register pressure of a chain of row passes until it spilled.
  __device__ static float *scratch() {
    __shared__ float red[3 * WARPS];
    return red;
  }

  template <class Combine> __device__ __forceinline__ float combine(float v, Combine op) const {
    float *red = scratch();
    v = row_detail::lanes_combine<32>(v, op, 0xffffffffu);
    if ((rank() & 31) == 0)
      red[rank() >> 5] = v;
    __syncthreads();
    float r = red[0];
#pragma unroll
    for (int w = 1; w < WARPS; ++w)
      r = op(r, red[w]);
    __syncthreads();
    return r;
  }
  __device__ __forceinline__ float max(float v) const { return combine(v, row_detail::MaxOp{}); }
  __device__ __forceinline__ float sum(float v) const { return combine(v, row_detail::SumOp{}); }

  __device__ __forceinline__ row_detail::MaxSum max_sum(row_detail::MaxSum v) const {
    float *red = scratch();
    v = row_detail::lanes_max_sum<32>(v, 0xffffffffu);
    if ((rank() & 31) == 0) {
      red[rank() >> 5] = v.m;
      red[WARPS + (rank() >> 5)] = v.s;
    }
    __syncthreads();
    row_detail::MaxSum r{red[0], red[WARPS]};
#pragma unroll
    for (int w = 1; w < WARPS; ++w)
      r = row_detail::online_merge(r, row_detail::MaxSum{red[w], red[WARPS + w]});
    __syncthreads();
    return r;
  }

  __device__ __forceinline__ row_detail::Welford welford(row_detail::Welford v) const {
    float *red = scratch();
    v = row_detail::lanes_welford_to_first<32>(v, 0xffffffffu);
    const int w = rank() >> 5;
    if ((rank() & 31) == 0) {
      red[w] = v.n;
      red[WARPS + w] = v.mean;
      red[2 * WARPS + w] = v.m2;
    }
    __syncthreads();
    row_detail::Welford r{red[0], red[WARPS], red[2 * WARPS]};
#pragma unroll
    for (int i = 1; i < WARPS; ++i)
      r = row_detail::welford_merge(
          r, row_detail::Welford{red[i], red[WARPS + i], red[2 * WARPS + i]});
    __syncthreads();
    return r;
  }
};

namespace row_detail {

// Calls f(col, pre(col, src[col])) for this member's elements of a row of n: groups of four
// rank, rank + SIZE, ... (one access each where src is aligned to four elements), then the
// scalar tail.
template <class Team, class T, class Pre, class F>
__device__ __forceinline__ void for_each_loaded(const Team &team, const T *src, int n,
                                                const Pre &pre, F &&f) {
  const bool vec = vec4_aligned(src);
  const int n4 = n / 4;
  for (int i = team.rank(); i < n4; i += Team::SIZE) {
    const float4 v = load4(src, i, vec);
    f(4 * i, pre(4 * i, v.x));
    f(4 * i + 1, pre(4 * i + 1, v.y));
    f(4 * i + 2, pre(4 * i + 2, v.z));
    f(4 * i + 3, pre(4 * i + 3, v.w));
  }
  for (int c = 4 * n4 + team.rank(); c < n; c += Team::SIZE)
    f(c, pre(c, ldg(src + c)));
}

} // namespace row_detail

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
