// Tile schedulers: which output tile a block (or a persistent block's i-th turn) computes.
//
// A GEMM's output is cut into BM x BN tiles, numbered by a linear work index. A block starts at
// work index first() = blockIdx.x and, on a persistent grid (fewer blocks than tiles), steps by
// stride() = gridDim.x; on a grid of one block per tile it computes tile(first()) only. No
// mainloop derives tile coordinates from blockIdx itself.
//
// Grouped rasterization: tiles are visited in groups of `GROUP_M` row tiles, column-major inside a
// group, so blocks running at the same time share the column tiles of B' (the streamed weight)
// and the group's rows of A stay in L2. The map is a bijection from [0, tiles_m * tiles_n) onto
// the (row tile, column tile) grid.
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

template <int BlockM, int BlockN, int GroupM> struct TileScheduler {
  static constexpr int BM = BlockM; // the column statistics' tile height as well
  static constexpr int BN = BlockN;
  static constexpr int GROUP_M = GroupM;
  int tiles_m, tiles_n;

  KF_HOST_DEVICE explicit TileScheduler(GemmShape s)
      : tiles_m(ceil_div(s.m, BM)), tiles_n(ceil_div(s.n, BN)) {}
  KF_HOST_DEVICE int tiles() const { return tiles_m * tiles_n; }
  KF_HOST_DEVICE TileCoord tile(int work) const {
    return grouped_tile(work, tiles_m, tiles_n, GROUP_M);
  }
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  __device__ int first() const { return blockIdx.x; }
  __device__ int stride() const { return gridDim.x; }
#endif
};

} // namespace kf
