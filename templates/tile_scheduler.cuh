// Tile schedulers: which output tile, and which part of its K range, a block (or a persistent
// block's i-th turn) computes.
//
// A GEMM's output is cut into BM x BN tiles; split-K cuts each tile's K range into `splits`
// contiguous runs of k-blocks (as even as integers allow) so a problem with fewer tiles than SMs
// still fills the GPU, the epilogue adding the partials in a fixed order (gemm_epilogue.cuh). A
// work unit is one split of one tile, numbered in one of two orders the launch picks (the
// kernel's split parameter S, or -S for the second): tile-major, a tile's splits consecutive, for
// one wave (a tile's splits start together); split-major, every tile's first split, then every
// tile's second, ..., for more than one wave (tile-major would leave the last SMs finishing long
// after the others). A block starts at first() = blockIdx.x and, on a persistent grid, steps by
// stride() = gridDim.x; no mainloop derives tile coordinates or k ranges from blockIdx. A
// mainloop is given splits <= its k-blocks (the launch geometry keeps more).
//
// Grouped rasterization: tiles are visited in groups of GROUP_M row tiles, column-major inside
// a group, so concurrent blocks share B's column tiles (the streamed weight) and the group's rows
// of A stay in L2. The map is a bijection from [0, tiles_m * tiles_n) onto the tile grid.
#pragma once

#include "host_device.cuh"

namespace kf {

struct GemmShape {
  int m, n, k;
};

struct TileCoord {
  int m, n; // row tile, column tile
};

KF_HOST_DEVICE inline TileCoord grouped_tile(int linear, int tiles_m, int tiles_n, int group_m) {
  const int per_group = group_m * tiles_n;
  const int first = (linear / per_group) * group_m;
  const int rows = tiles_m - first < group_m ? tiles_m - first : group_m;
  const int in = linear % per_group;
  return TileCoord{first + in % rows, in / rows};
}

// One split of one tile: the tile, its linear index (its split-K counter and partials), and the
// k-blocks [k_begin, k_end) of this split.
struct WorkUnit {
  TileCoord tile;
  int index;
  int split, splits;
  int k_begin, k_end;
};

template <int BlockM, int BlockN, int GroupM> struct TileScheduler {
  static constexpr int BM = BlockM; // the column statistics' tile height as well
  static constexpr int BN = BlockN;
  static constexpr int GROUP_M = GroupM;
  int tiles_m, tiles_n, splits;
  bool split_major; // the work index's order (above)

  // split_param: S for tile-major order, -S for split-major.
  KF_HOST_DEVICE explicit TileScheduler(GemmShape s, int split_param = 1)
      : tiles_m(ceil_div(s.m, BM)), tiles_n(ceil_div(s.n, BN)),
        splits(split_param < 0 ? -split_param : split_param), split_major(split_param < 0) {}
  KF_HOST_DEVICE int tiles() const { return tiles_m * tiles_n; }
  KF_HOST_DEVICE int units() const { return tiles() * splits; }
  // Unit `work` of a GEMM whose K is `kblocks` k-blocks deep.
  KF_HOST_DEVICE WorkUnit unit(int work, int kblocks) const {
    const int index = split_major ? work % tiles() : work / splits;
    const int split = split_major ? work / tiles() : work % splits;
    return WorkUnit{grouped_tile(index, tiles_m, tiles_n, GROUP_M),
                    index,
                    split,
                    splits,
                    static_cast<int>(static_cast<long long>(split) * kblocks / splits),
                    static_cast<int>(static_cast<long long>(split + 1) * kblocks / splits)};
  }
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  __device__ int first() const { return blockIdx.x; }
  __device__ int stride() const { return gridDim.x; }
#endif
};

} // namespace kf
