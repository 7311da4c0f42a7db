#include "runtime/launch_geometry.h"

#include "kfuse/error.h"

#include <algorithm>
#include <fmt/format.h>

namespace kfuse::rt {

namespace {

int64_t extent(const ir::Dim &d, const std::map<std::string, int64_t> &dims) {
  return d.is_symbolic() ? dims.at(d.sym) : d.value;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

unsigned grid_extent(int64_t blocks, const char *axis) {
  if (blocks > 0x7fffffff)
    throw Error(
        fmt::format("a kernel needs {} blocks along {}, more than a grid holds", blocks, axis));
  return static_cast<unsigned>(std::max<int64_t>(blocks, 1));
}

} // namespace

LaunchShape resolve(const codegen::LaunchGeometry &g, const std::map<std::string, int64_t> &dims,
                    int multiprocessors) {
  using Grid = codegen::LaunchGeometry::Grid;
  const int64_t rows = extent(g.rows, dims), cols = extent(g.cols, dims);
  const int64_t row_tiles = ceil_div(rows, g.tile_rows), col_tiles = ceil_div(cols, g.tile_cols);
  const int64_t cap = static_cast<int64_t>(g.blocks_per_sm) * multiprocessors;
  LaunchShape s;
  switch (g.grid) {
  case Grid::Tiles2D:
    s.grid = {grid_extent(col_tiles, "x"), grid_extent(row_tiles, "y"), 1};
    if (row_tiles > 65535)
      throw Error(
          fmt::format("a kernel needs {} row tiles, more than a grid's y extent", row_tiles));
    break;
  case Grid::Tiles:
    s.grid = {grid_extent(row_tiles * col_tiles, "x"), 1, 1};
    break;
  case Grid::Persistent:
    s.grid = {grid_extent(std::min(row_tiles * col_tiles, cap), "x"), 1, 1};
    break;
  case Grid::Elements:
    s.grid = {
        grid_extent(
            std::min(ceil_div(rows * cols, static_cast<int64_t>(g.tile_rows) * g.tile_cols), cap),
            "x"),
        1, 1};
    break;
  }
  s.block = {static_cast<unsigned>(g.block_threads), 1, 1};
  s.shared_bytes = static_cast<unsigned>(g.smem_bytes);
  if (g.row_bytes_cap > 0) {
    const int64_t floats = ceil_div(extent(g.row_length, dims), 4) * 4;
    if (floats * 4 <= g.row_bytes_cap) {
      s.row_floats = static_cast<int>(floats);
      s.shared_bytes += static_cast<unsigned>(floats * 4);
    }
  }
  s.cluster = static_cast<unsigned>(g.cluster);
  return s;
}

} // namespace kfuse::rt
