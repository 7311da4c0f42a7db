#include "runtime/launch_geometry.h"

#include "kfuse/error.h"

#include <algorithm>
#include <fmt/format.h>

namespace kfuse::rt {

namespace {

int64_t extent(const exec::Extent &d, const std::map<std::string, int64_t> &dims) {
  return d.evaluate(dims);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

unsigned grid_extent(int64_t blocks, const char *axis) {
  if (blocks > 0x7fffffff)
    throw Error(
        fmt::format("a kernel needs {} blocks along {}, more than a grid holds", blocks, axis));
  return static_cast<unsigned>(std::max<int64_t>(blocks, 1));
}

// A GEMM launch's output tiles at `dims`.
int64_t tile_count(const exec::Geometry &g, const std::map<std::string, int64_t> &dims) {
  return ceil_div(extent(g.rows, dims), g.tile_rows) * ceil_div(extent(g.cols, dims), g.tile_cols);
}

// Split-K's cost model, in k-block times of one tile: `tiles` tiles split S ways take
// ceil(tiles * S / slots) waves of units, each ceil(kblocks / S) k-blocks plus, where split, the
// unit's partial tile (split_cost_kblocks).
int64_t kblock_times(const exec::Geometry &g, int64_t tiles, int64_t kblocks, int64_t slots,
                     int64_t s) {
  return ceil_div(tiles * s, slots) * (ceil_div(kblocks, s) + (s > 1 ? g.split_cost_kblocks : 0));
}

// Split-K's rule. The batch (a GEMM's rows) is bound only now, and output tiles rarely fill
// whole waves of the block slots (blocks_per_sm * SMs): 8 tiles of 128 x 128 at 128 x 1024 leave
// most SMs idle. Splitting each tile's K S ways makes tiles * S units, each kblocks / S k-blocks
// plus its partial tile (split_cost_kblocks), in ceil(tiles * S / slots) waves; S is the smallest
// count with the fewest k-block times (kblock_times), where that saves at least a tenth of
// S = 1's, the estimate's margin. A short K does not pay for the partial tiles, however few the
// tiles. S is at most kMaxSplits (a tile's last split reads all S partials alone), at most
// kblocks / kMinSplitKBlocks (each split streams a few k-blocks through its pipeline), and at
// most max_splits when set, else the cap tuned for the rows' class.
constexpr int64_t kMaxSplits = 8;
constexpr int64_t kMinSplitKBlocks = 2;

int64_t split_bound_by_k(const exec::Geometry &g, const std::map<std::string, int64_t> &dims,
                         int max_splits) {
  if (g.tile_k == 0)
    return 1;
  int64_t bound =
      std::min(kMaxSplits, ceil_div(extent(g.inner, dims), g.tile_k) / kMinSplitKBlocks);
  // The caller's cap first, else the one tuned for this class of batch (kfuse tune).
  if (max_splits == 0)
    if (auto it = g.max_splits_by_class.find(codegen::rows_class(extent(g.rows, dims)));
        it != g.max_splits_by_class.end())
      max_splits = it->second;
  if (max_splits > 0)
    bound = std::min<int64_t>(bound, max_splits);
  return std::max<int64_t>(bound, 1);
}

} // namespace

int split_count(const exec::Geometry &g, const std::map<std::string, int64_t> &dims,
                int multiprocessors, int max_splits) {
  const int64_t bound = split_bound_by_k(g, dims, max_splits);
  const int64_t tiles = tile_count(g, dims);
  if (bound == 1 || tiles == 0 || multiprocessors <= 0)
    return 1;
  const int64_t slots = static_cast<int64_t>(g.blocks_per_sm) * multiprocessors;
  const int64_t kblocks = ceil_div(extent(g.inner, dims), g.tile_k);
  auto time = [&](int64_t s) { return kblock_times(g, tiles, kblocks, slots, s); };
  int64_t best = 1;
  for (int64_t s = 2; s <= bound; ++s)
    if (time(s) < time(best))
      best = s;
  return 10 * time(best) <= 9 * time(1) ? static_cast<int>(best) : 1;
}

bool may_split(const exec::Geometry &g, const std::map<std::string, int64_t> &dims,
               int max_splits) {
  return split_bound_by_k(g, dims, max_splits) > 1;
}

namespace {

// The time of a GEMM launch at `dims`, in kblock_time units: split-K's k-block times at the
// S its rule picks.
int64_t estimated_time(const exec::Geometry &g, const std::map<std::string, int64_t> &dims,
                       int multiprocessors, int max_splits) {
  return kblock_times(g, tile_count(g, dims), ceil_div(extent(g.inner, dims), g.tile_k),
                      static_cast<int64_t>(g.blocks_per_sm) * multiprocessors,
                      split_count(g, dims, multiprocessors, max_splits)) *
         g.kblock_time;
}

} // namespace

size_t variant_of(const exec::Kernel &l, const std::map<std::string, int64_t> &dims,
                  int multiprocessors, int max_splits) {
  if (multiprocessors <= 0) // no device: the launch itself
    return 0;
  bool timed = l.geometry.kblock_time > 0 && l.geometry.tile_k > 0;
  for (const exec::Kernel &v : l.variants)
    timed = timed && v.geometry.kblock_time > 0 && v.geometry.tile_k > 0;
  if (timed) { // the lowest estimate; the earliest of equal ones
    size_t best = 0;
    int64_t best_time = estimated_time(l.geometry, dims, multiprocessors, max_splits);
    for (size_t i = 0; i < l.variants.size(); ++i) {
      const int64_t t = estimated_time(l.variants[i].geometry, dims, multiprocessors, max_splits);
      if (t < best_time) {
        best = i + 1;
        best_time = t;
      }
    }
    return best;
  }
  size_t taken = 0;
  for (size_t i = 0; i < l.variants.size(); ++i) {
    const exec::Geometry &g = l.variants[i].geometry, &t = variant(l, taken).geometry;
    const bool weighed = taken > 0 && g.kblock_time > 0 && t.kblock_time > 0;
    const bool better = weighed ? estimated_time(g, dims, multiprocessors, max_splits) <
                                      estimated_time(t, dims, multiprocessors, max_splits)
                                : tile_count(g, dims) >= static_cast<int64_t>(g.min_waves) *
                                                             g.blocks_per_sm * multiprocessors;
    if (better)
      taken = i + 1;
  }
  return taken;
}

const exec::Kernel &variant(const exec::Kernel &l, size_t index) {
  return index == 0 ? l : l.variants.at(index - 1);
}

LaunchShape resolve(const exec::Geometry &g, const std::map<std::string, int64_t> &dims,
                    int multiprocessors, int max_splits) {
  using Grid = exec::Geometry::Grid;
  const int64_t rows = extent(g.rows, dims), cols = extent(g.cols, dims);
  const int64_t row_tiles = ceil_div(rows, g.tile_rows), col_tiles = ceil_div(cols, g.tile_cols);
  const int64_t cap = static_cast<int64_t>(g.blocks_per_sm) * multiprocessors;
  LaunchShape s;
  s.splits = split_count(g, dims, multiprocessors, max_splits);
  s.split_major = s.splits > 1 && row_tiles * col_tiles * s.splits > cap;
  switch (g.grid) {
  case Grid::Tiles2D:
    s.grid = {grid_extent(col_tiles, "x"), grid_extent(row_tiles, "y"), 1};
    if (row_tiles > 65535)
      throw Error(
          fmt::format("a kernel needs {} row tiles, more than a grid's y extent", row_tiles));
    break;
  case Grid::Tiles:
    s.grid = {grid_extent(row_tiles * col_tiles * s.splits, "x"), 1, 1};
    break;
  case Grid::Persistent:
    s.grid = {grid_extent(std::min(row_tiles * col_tiles * s.splits, cap), "x"), 1, 1};
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
  s.programmatic = g.waits_prior_grid;
  return s;
}

} // namespace kfuse::rt
