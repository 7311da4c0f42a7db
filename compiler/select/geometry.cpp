#include "compiler/select/geometry.h"

#include "compiler/codegen/program.h"
#include "templates/col_stats.cuh"
#include "templates/elementwise.cuh"
#include "templates/gemm_simt.cuh"
#include "templates/gemm_sm90.cuh"
#include "templates/gemm_tc.cuh"
#include "templates/row_kernel.cuh"
#include "templates/transpose.cuh"

#include <cctype>
#include <fmt/format.h>

namespace kfuse::select {

using codegen::LaunchGeometry;

namespace {

template <class Config> GemmTraits traits_of(int smem_bytes) {
  GemmTraits t;
  t.bm = Config::BM;
  t.bn = Config::BN;
  t.bk = Config::BK;
  t.group_m = Config::GROUP_M;
  t.threads = Config::THREADS;
  t.min_blocks = Config::MIN_BLOCKS;
  t.split_cost_kblocks = Config::SPLIT_COST_KBLOCKS;
  t.kblock_time = Config::KBLOCK_TIME;
  t.smem_bytes = smem_bytes;
  return t;
}

template <kf::sm90::Operand Op> GemmTraits sm90_traits(const GemmTile &t, int column_floats) {
  auto of = [&](auto config) {
    using C = decltype(config);
    return traits_of<C>(C::smem_bytes(column_floats));
  };
  if (t.staged_rows && t.bm == 128 && t.bn == 128 && t.min_blocks == 1)
    return of(kf::Sm90Gemm<Op, 128, 128, 1, true>{});
  if (!t.staged_rows && t.bm == 128 && t.bn == 128 && t.min_blocks == 1)
    return of(kf::Sm90Gemm<Op, 128>{});
  // 3xTF32 keeps a per-stage partial sum of 128 columns, and its small parts take a second
  // block's shared memory: it has the 128 x 128 tile only.
  if constexpr (Op != kf::sm90::Operand::Tf32x3) {
    if (!t.staged_rows && t.bm == 128 && t.bn == 256 && t.min_blocks == 1)
      return of(kf::Sm90Gemm<Op, 256>{});
    if (!t.staged_rows && t.bm == 64 && t.bn == 256 && t.min_blocks == 1)
      return of(kf::Sm90Gemm<Op, 256, 64>{});
    if (!t.staged_rows && t.bm == 64 && t.bn == 128 && t.min_blocks == 2)
      return of(kf::Sm90Gemm<Op, 128, 64, 2>{});
  }
  throw codegen::CodegenError(fmt::format("internal error: no sm90 GEMM of tile {}", tile_text(t)));
}

GemmTraits tc_traits(int precision) {
  GemmTraits t;
  t.bm = kf::GEMM_TC_BM;
  t.bn = kf::gemm_tc_bn(precision);
  t.bk = kf::GEMM_TC_BK;
  t.group_m = kf::GEMM_TC_GROUP_M;
  t.threads = kf::GEMM_TC_THREADS;
  t.min_blocks = kf::GEMM_TC_MIN_BLOCKS;
  t.split_cost_kblocks = kf::GEMM_TC_SPLIT_COST_KBLOCKS;
  t.smem_bytes = kf::gemm_tc_smem_bytes(precision);
  return t;
}

// A block of `threads` per tile_rows x tile_cols tile, on a 2-D grid.
LaunchGeometry tiles_2d(const ir::Dim &rows, const ir::Dim &cols, int tile_rows, int tile_cols,
                        int threads) {
  LaunchGeometry g;
  g.grid = LaunchGeometry::Grid::Tiles2D;
  g.rows = rows;
  g.cols = cols;
  g.tile_rows = tile_rows;
  g.tile_cols = tile_cols;
  g.block_threads = threads;
  return g;
}

} // namespace

GemmTraits gemm_traits(const GemmTile &t, int column_floats) {
  switch (t.mainloop) {
  case Mainloop::Simt:
    return t.bn == kf::SimtWide::BN ? traits_of<kf::SimtWide>(kf::SimtWide::SMEM_BYTES)
                                    : traits_of<kf::SimtNarrow>(kf::SimtNarrow::SMEM_BYTES);
  case Mainloop::MmaSync:
    return tc_traits(t.operand == Operand::Tf32 ? 0 : 1);
  case Mainloop::Sm90:
    switch (t.operand) {
    case Operand::Tf32:
      return sm90_traits<kf::sm90::Operand::Tf32>(t, column_floats);
    case Operand::Tf32x3:
      return sm90_traits<kf::sm90::Operand::Tf32x3>(t, column_floats);
    case Operand::Bf16:
      return sm90_traits<kf::sm90::Operand::Bf16>(t, column_floats);
    case Operand::F16:
      return sm90_traits<kf::sm90::Operand::F16>(t, column_floats);
    }
  }
  throw codegen::CodegenError("internal error: a GEMM tile of no mainloop");
}

LaunchGeometry gemm_geometry(const GemmTile &t, const GemmSpec &spec, int column_floats,
                             const ir::Dim &rows, const ir::Dim &cols, const ir::Dim &inner) {
  const GemmTraits traits = gemm_traits(t, column_floats);
  LaunchGeometry g;
  // The Hopper mainloop is persistent; the cp.async mainloops run a block per work unit, and
  // split-K counts one block per SM for them: a second adds little throughput.
  g.grid =
      t.mainloop == Mainloop::Sm90 ? LaunchGeometry::Grid::Persistent : LaunchGeometry::Grid::Tiles;
  g.rows = rows;
  g.cols = cols;
  g.inner = inner;
  g.tile_rows = traits.bm;
  g.tile_cols = traits.bn;
  g.tile_k = traits.bk;
  g.blocks_per_sm = t.mainloop == Mainloop::Simt ? 1 : traits.min_blocks;
  g.block_threads = traits.threads;
  g.smem_bytes = traits.smem_bytes;
  g.split_cost_kblocks = traits.split_cost_kblocks;
  g.kblock_time = traits.kblock_time;
  g.max_splits_by_class = spec.max_splits_by_class;
  return g;
}

LaunchGeometry row_geometry(const RowSpec &spec, const ir::Dim &rows, const ir::Dim &cols) {
  LaunchGeometry g;
  g.grid = LaunchGeometry::Grid::Tiles; // a block per row
  g.rows = rows;
  g.block_threads = spec.threads;
  if (spec.resident) {
    g.row_length = cols;
    g.row_bytes_cap = kf::ROW_SMEM_CAP_BYTES;
  }
  return g;
}

LaunchGeometry elementwise_geometry(const ElementwiseSpec &spec, const ir::Dim &rows,
                                    const ir::Dim &cols) {
  if (spec.partials)
    return col_partials_geometry(rows, cols);
  LaunchGeometry g;
  g.grid = LaunchGeometry::Grid::Elements;
  g.rows = rows;
  g.cols = cols;
  g.tile_cols = kf::ELEMENTWISE_THREADS * spec.vec;
  g.blocks_per_sm = kf::ELEMENTWISE_BLOCKS_PER_SM;
  g.block_threads = kf::ELEMENTWISE_THREADS;
  return g;
}

LaunchGeometry col_partials_geometry(const ir::Dim &rows, const ir::Dim &cols) {
  return tiles_2d(rows, cols, kf::COL_STATS_TILE_ROWS, kf::COL_STATS_COLS, kf::COL_STATS_THREADS);
}

LaunchGeometry transpose_geometry(const ir::Dim &rows, const ir::Dim &cols) {
  return tiles_2d(rows, cols, kf::TRANSPOSE_TILE, kf::TRANSPOSE_TILE, kf::TRANSPOSE_THREADS);
}

LaunchGeometry column_geometry(const ColumnSpec &spec, const ir::Dim &features) {
  LaunchGeometry g;
  g.grid = LaunchGeometry::Grid::Tiles;
  g.cols = features;
  // A thread per feature; a team of COLUMN_MERGE_LANES where they merge statistics.
  g.tile_cols = spec.merges ? kf::COLUMN_THREADS / kf::COLUMN_MERGE_LANES : kf::COLUMN_THREADS;
  g.block_threads = kf::COLUMN_THREADS;
  return g;
}

bool waits_prior_grid(const std::string &arch) {
  return arch.rfind("sm_", 0) == 0 && arch.size() >= 5 && std::isdigit(arch[3]) &&
         std::isdigit(arch[4]) && std::stoi(arch.substr(3)) >= 90;
}

} // namespace kfuse::select
