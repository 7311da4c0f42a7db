// Kernel specs: what `select` decides for each kernel of a plan, before any CUDA is written.
//
// A spec holds every choice that shapes a kernel (mainloop, tile, variants, threads, vector
// width) and the reason it was chosen; the emitters (compiler/codegen) render a spec to CUDA
// and never choose, and the launch geometry is derived from a spec's traits in one place
// (compiler/select/geometry.cpp). Specs are pure functions of the plan, the target and the
// tuned configurations, so tuning is keyed on them and emitting happens once.
#pragma once

#include "compiler/codegen/gemm_tuning.h"
#include "compiler/plan/plan.h"

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace kfuse::select {

// The GEMM mainloops (templates/gemm_simt.cuh, gemm_tc.cuh, gemm_sm90.cuh).
enum class Mainloop : uint8_t { Simt, MmaSync, Sm90 };
// What a Hopper mainloop multiplies (kf::sm90::Operand).
enum class Operand : uint8_t { Tf32, Tf32x3, Bf16, F16 };

// One compiled GEMM kernel: a mainloop with one tile. Sm90 tiles are bm x bn with min_blocks
// blocks per SM, staged_rows where its epilogue runs row passes over a staged tile; the SIMT
// mainloop has a narrow (128 x 32) and a wide (128 x 128) tile; mma.sync has one per math.
struct GemmTile {
  Mainloop mainloop = Mainloop::Simt;
  Operand operand = Operand::Tf32; // Sm90; MmaSync: Tf32 or Tf32x3
  int bm = 128, bn = 128, min_blocks = 1;
  bool staged_rows = false;
  std::string entry;  // k0_gemm, k0_gemm_wide, ...
  std::string config; // the configuration and why it was chosen
};

// A row kernel (a block per row) or a GEMM's row epilogue (a team of lanes per staged row).
struct RowSpec {
  int threads = 256;     // block threads, or lanes of the epilogue's team
  bool resident = false; // a pass keeps its row in shared memory
  // row_partials_epilogue: the column slices (kf::ROW_PARTIAL_COLS columns each) of the matrix
  // whose reductions the GEMM epilogue writes a partial of per slice, which the row kernel after
  // it merges. 0: none.
  int partial_tiles = 0;
};

struct GemmSpec {
  GemmTile tile;
  // The same GEMM with other tiles, compiled beside it, which runs take by the bound dims
  // (runtime/launch_geometry.cpp), emitted before the kernel itself.
  std::vector<GemmTile> by_rows;
  // The tiles `kfuse tune` may choose among (empty where the mainloop has one) and the key of
  // its tuned configuration: the target, the operands and the epilogue's ops.
  std::vector<codegen::Sm90Tile> tiles;
  std::string signature;
  std::map<int, int> max_splits_by_class; // tuned split-K caps by rows_class
  std::vector<std::string> split_whys;
  ir::ValueId a = -1, b = -1, out = -1; // operands and the epilogue's value
  bool trans_b = true;                  // Linear: B is [N, K]
  bool trans_a = false;                 // matmul_tn: A is [K, M], read column-major (SIMT)
  RowSpec rows = {0, false};            // where the epilogue runs row passes: its team's lanes
  // The epilogue applies its functor in a rolled loop over accumulators staged in shared memory
  // (Hopper tiles: gemm_epilogue.cuh's Apply::Rolled), not inlined once per accumulator.
  bool rolled_epilogue = false;
};

struct ElementwiseSpec {
  int vec = 1; // columns a thread moves per 16-byte access
  // Writes the column partials of its value (Kernel::stats_of) over row tiles of
  // COL_STATS_TILE_ROWS, a block per tile of columns (elementwise_stats.cuh); vec is then 1.
  bool partials = false;
};

struct ColPartialsSpec {};

struct TransposeSpec {
  // Stores the copy rounded to tf32: only GEMMs on tf32 operands read it, as an operand, and the
  // Hopper tensor cores truncate an fp32 operand where cuBLAS rounds it to nearest; truncation's
  // bias adds up over a long K, such as a weight gradient's batch.
  bool round_tf32 = false;
};

struct ColumnSpec {
  bool merges = false;  // merges column-statistics partials (a team per feature)
  bool summary = false; // a Summary kernel: stores the merged (count, mean, M2) and nothing else
  int ranks = 0; // merges the summaries gathered from this many ranks instead (Plan::stats_ranks)
};

using KernelSpec =
    std::variant<GemmSpec, RowSpec, ElementwiseSpec, ColPartialsSpec, ColumnSpec, TransposeSpec>;

// A plan's specs, one per kernel in plan order, and for each value whose column statistics a
// kernel writes, the rows per partial tile of its writer (the tile height the merge reads).
// Also the matrices whose rows their writers pad to a multiple of so many elements (16 bytes):
// operands of Hopper GEMMs, whose TMA loads need 16-byte row pitches whatever the inner dim,
// read otherwise only by transposes and column partials, which take the pitch (padded_rows).
struct Selection {
  std::vector<KernelSpec> kernels;
  std::map<ir::ValueId, int> partial_rows;
  std::map<ir::ValueId, int> row_multiples;
};

// "128x256x1": rows x columns x blocks per SM.
std::string tile_text(const GemmTile &t);

} // namespace kfuse::select
