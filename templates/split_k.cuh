// Split-K's reduction: the splits of one output tile (tile_scheduler.cuh's work units) add their
// fp32 partial tiles in a fixed order, so a split GEMM gives the same bits on every run, without
// float atomics and without a block waiting for another.
//
// Workspace (sized by the launcher from the launch geometry):
//   partials: [tiles][splits][BM * BN] floats; unit (tile, split) writes at
//             partials + (tile * splits + split) * BM * BN in the Fragment's layout (below).
//   counters: [tiles] unsigned, zero before the first launch; each launch leaves them zero.
//
// Per unit: every epilogue thread stores its partial (st.global.cg) and fences; after a barrier
// one thread counts the arrival with an integer atomic. The last to arrive resets the counter,
// fences, sums the partials in split order 0 .. splits - 1 (its own read back like the others)
// and alone runs the tile's epilogue; the others return. No block waits on another, so any
// grid, persistent or not, is deadlock-free. Also valid host C++.
#pragma once

#include "tile_scheduler.cuh"

namespace kf {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace split_k_detail {
// Partial tiles move as float4: vector v of a thread holds its accumulators 4v .. 4v + 3 (e =
// i * COLS + j), at float4 index v * THREADS + t of the unit's tile.
template <class Fragment, class Acc> __device__ __forceinline__ float &element(Acc &acc, int e) {
  return Fragment::at(acc, e / Fragment::COLS, e % Fragment::COLS);
}
template <class Fragment, class Acc>
__device__ __forceinline__ void set(Acc &acc, int v, float4 x) {
  element<Fragment>(acc, 4 * v) = x.x;
  element<Fragment>(acc, 4 * v + 1) = x.y;
  element<Fragment>(acc, 4 * v + 2) = x.z;
  element<Fragment>(acc, 4 * v + 3) = x.w;
}
template <class Fragment, class Acc>
__device__ __forceinline__ void add(Acc &acc, int v, float4 x) {
  element<Fragment>(acc, 4 * v) += x.x;
  element<Fragment>(acc, 4 * v + 1) += x.y;
  element<Fragment>(acc, 4 * v + 2) += x.z;
  element<Fragment>(acc, 4 * v + 3) += x.w;
}
} // namespace split_k_detail

// Adds unit u's partial tile `acc` to its tile's sum. Returns true in the last split of the
// tile, whose `acc` then holds the tile's accumulators summed in split order; false elsewhere
// (acc unchanged). `flag` is an int of shared memory that no epilogue thread reads while this
// runs (the epilogue's statistics scratch, which is synchronised before its next use).
template <class Fragment, class Acc>
__device__ bool split_k_reduce(const Fragment &f, const WorkUnit &u, float *partials,
                               unsigned *counters, Acc &acc, int *flag) {
  using namespace split_k_detail;
  constexpr int VECS = Fragment::ROWS * Fragment::COLS / 4;
  constexpr int UNIT = VECS * Fragment::THREADS; // float4 per partial tile
  static_assert(VECS * 4 == Fragment::ROWS * Fragment::COLS, "accumulators in whole float4s");
  static_assert(UNIT * 4 == Fragment::BM * Fragment::BN, "a partial tile is BM x BN floats");
  float4 *tile = reinterpret_cast<float4 *>(partials) +
                 static_cast<long long>(u.index) * u.splits * UNIT + f.thread;
  float4 *mine = tile + static_cast<long long>(u.split) * UNIT;
#pragma unroll
  for (int v = 0; v < VECS; ++v)
    __stcg(mine + v * Fragment::THREADS,
           make_float4(element<Fragment>(acc, 4 * v), element<Fragment>(acc, 4 * v + 1),
                       element<Fragment>(acc, 4 * v + 2), element<Fragment>(acc, 4 * v + 3)));
  __threadfence(); // this thread's partial is visible device-wide before the arrival counts
  Fragment::sync();
  if (f.thread == 0) {
    const bool last = atomicAdd(counters + u.index, 1u) == static_cast<unsigned>(u.splits - 1);
    if (last)
      counters[u.index] = 0u;
    *flag = last;
  }
  Fragment::sync();
  if (!*flag)
    return false;
  __threadfence(); // the other splits' partials, counted before the last arrival, are seen
  // Split 0 goes straight into the accumulators (its loads need no other registers), then each
  // later split is added in turn: the loads of one split are independent of each other, so
  // they overlap as far as the registers left beside the accumulators allow.
#pragma unroll
  for (int v = 0; v < VECS; ++v)
    set<Fragment>(acc, v, __ldcg(tile + v * Fragment::THREADS));
  for (int split = 1; split < u.splits; ++split) {
    const float4 *p = tile + static_cast<long long>(split) * UNIT;
#pragma unroll
    for (int v = 0; v < VECS; ++v)
      add<Fragment>(acc, v, __ldcg(p + v * Fragment::THREADS));
  }
  return true;
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
