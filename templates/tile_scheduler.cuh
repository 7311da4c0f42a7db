// Tile schedulers: which output tile a block (or a persistent block's i-th turn) computes.
//
// Grouped rasterization: tiles are visited in groups of `group_m` row tiles, column-major inside a
// group, so blocks running at the same time share the column tiles of B' (the streamed weight)
// and the group's rows of A stay in L2. The map is a bijection from [0, tiles_m * tiles_n) onto
// the (row tile, column tile) grid.
#pragma once

#include "host_device.cuh"

namespace kf {

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

} // namespace kf
