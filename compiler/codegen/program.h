// Code generation: a plan becomes one CUDA translation unit plus a launch description
// for each of its kernels, in plan order.
//
// The translation unit includes the template headers (templates/*.cuh), defines one
// generated functor per kernel (the epilogue, prologue or element function the template
// calls) and one `extern "C"` entry point per kernel named after it (k0_gemm, ...). Output
// is deterministic: the same plan gives byte-identical source.
#pragma once

#include "kfuse/error.h"

#include "compiler/codegen/gemm_tuning.h"
#include "compiler/plan/plan.h"

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace kfuse::select {
struct Selection;
}

namespace kfuse {
struct Target;
}

namespace kfuse::codegen {

// A plan the code generator cannot express (e.g. an f16 tensor); names the tensor or op.
struct CodegenError : kfuse::Error {
  using kfuse::Error::Error;
};

// How GEMM kernels multiply: the fp32 SIMT template, or tensor cores with inputs rounded to
// tf32, or split into two tf32 terms each (3xTF32, fp32-level accuracy). On sm_90a tf32 runs on
// the Hopper mainloop (gemm_sm90.cuh) where its operands allow, on gemm_tc.cuh otherwise.
enum class GemmMath : uint8_t { Fp32, Tf32, Tf32x3 };

// A 2-D TMA descriptor the launcher encodes for a kernel parameter: the matrix `value` of
// `rows` x `inner` elements of type `element`, row-major with no padding, read in boxes of
// box_rows x box_inner elements with the 128-byte swizzle.
struct TensorMapSpec {
  ir::Dim rows, inner;
  int box_rows = 0, box_inner = 0;
  ir::DType element = ir::DType::F32;
  int row_multiple = 1; // rows stored padded to a multiple of this many elements (Program's)
};

// One kernel argument, in entry-point order.
struct LaunchParam {
  enum class Kind : uint8_t {
    Buffer,      // the device buffer of `value` (declared tensor or stored value)
    PartialMean, // column partials of `value`: one row per `tile_rows` rows of it
    PartialM2,
    Dim,           // the bound extent of `dim`, as int
    SmemFloats,    // row kernels: how many floats of the row fit in dynamic shared memory
    TensorMap,     // a TMA descriptor of `value` (kf::sm90::TensorMap, by value)
    Splits,        // GEMMs: the K split count S of the launch (LaunchShape::splits), as int
    SplitPartials, // GEMMs: split-K's partial tiles in the workspace (float *)
    SplitCounters, // GEMMs: split-K's per-tile arrival counters in the workspace (unsigned *)
    RngSeed,       // kernels with a dropout: the run's RNG seed (unsigned long long, by value)
    RngOffset,     // and its offset (templates/dropout.cuh)
    // Statistics exchanged across ranks (Plan::stats_ranks), of the matrix `value`:
    StatsSummary,      // this rank's per-feature (count, mean, M2), 3 x F doubles
    GatheredSummaries, // every rank's, all-gathered: ranks x 3 x F doubles
    // Row partials of the matrix `value` (row_partials_epilogue): `row_floats` floats per row,
    // each column slice's partials of every reduction the GEMM's epilogue writes (float *).
    RowPartials,
  };
  Kind kind;
  ir::ValueId value = -1; // SplitPartials / SplitCounters: the GEMM's product
  std::string dim;
  int tile_rows = 0;      // PartialMean / PartialM2
  int row_floats = 0;     // RowPartials
  TensorMapSpec map = {}; // TensorMap
};

// Everything a launcher needs to start a kernel, derived by the code generator from the
// templates' constexpr traits, so the runtime includes no template.
//
// The grid covers `rows` x `cols` (bound dims) in tiles of tile_rows x tile_cols:
//   Tiles2D:    grid = (ceil(cols / tile_cols), ceil(rows / tile_rows))
//   Tiles:      grid.x = ceil(rows / tile_rows) * ceil(cols / tile_cols)
//   Persistent: grid.x = min(that, blocks_per_sm * SMs), at least 1
//   Elements:   grid.x = min(ceil(rows * cols / (tile_rows * tile_cols)), blocks_per_sm * SMs),
//               at least 1 (grid-stride kernels)
// GEMM kernels (tile_k > 0) may split their K (`inner`, in k-blocks of tile_k) S ways, S
// chosen when the dims are bound (runtime/launch_geometry.cpp's rule): the grid then counts
// S work units per tile (Tiles: tiles * S blocks; Persistent: min(tiles * S, cap)), and the
// workspace holds tiles * S partial tiles of tile_rows x tile_cols floats and tiles counters.
// Dynamic shared memory is smem_bytes, plus, for row kernels (row_bytes_cap > 0), a resident
// row of row_length floats rounded up to 4 when that fits in row_bytes_cap (else nothing: the
// kernel streams); SmemFloats parameters receive that row's float count.
struct LaunchGeometry {
  enum class Grid : uint8_t { Tiles2D, Tiles, Persistent, Elements };
  Grid grid = Grid::Tiles;
  ir::Dim rows = ir::Dim::constant(1), cols = ir::Dim::constant(1);
  int tile_rows = 1, tile_cols = 1;
  int blocks_per_sm = 1;
  int block_threads = 0;
  int smem_bytes = 0;
  ir::Dim row_length = ir::Dim::constant(0);
  int row_bytes_cap = 0;
  int cluster = 1;                      // blocks per cluster along x
  ir::Dim inner = ir::Dim::constant(0); // GEMMs: K
  int tile_k = 0; // GEMMs: the mainloop's k-block depth; 0: the kernel never splits K
  // GEMMs: what one split's partial tile costs (written by the split, read back by the tile's
  // last), in the mainloop's k-blocks of one tile: split-K's rule weighs it against the waves
  // that splitting fills.
  int split_cost_kblocks = 0;
  // GEMMs: tuned caps on S by the class of the bound rows (rows_class); a class not listed
  // takes the rule's own S. Options::max_split_k, where set, overrides them.
  std::map<int, int> max_splits_by_class;
  // GEMMs: the time one k-block of a tile takes on an SM, relative to the other tiles of its
  // mainloop (0: not known). Where a launch and its by_rows variants all know it, a run takes
  // the one whose estimated time at the bound dims is lowest (runtime/launch_geometry.cpp).
  int kblock_time = 0;
  // GEMM variants (KernelLaunch::by_rows) chosen without kblock_time: taken where the bound dims
  // give this many full waves of its tiles (blocks_per_sm x SMs tiles a wave).
  int min_waves = 1;
  // The kernel's first statement waits for the grid launched before it (grid_dependency.cuh) on
  // a target that has the wait: the runtime may launch it while that grid finishes.
  bool waits_prior_grid = false;
};

struct KernelLaunch {
  std::string entry; // the kernel's name
  plan::KernelKind kind;
  LaunchGeometry geometry;
  // GEMM kernels: m x n x inner, for the benchmark's GEMM override.
  ir::Dim rows, cols, inner;
  std::string config; // GEMM kernels: the tile configuration chosen and why
  // GEMM kernels: the tile taken ("128x256x1", ...), the tiles it may take instead (empty where
  // its mainloop has one), and what else determines the kernel: operand type, math, arch, K,
  // output features and the generated epilogue (`kfuse tune` keys its results by it).
  std::string tile;
  std::vector<Sm90Tile> tiles;
  std::string signature;
  std::vector<LaunchParam> params;
  // GEMM kernels whose tile the layer's width chose (not tuned) and whose variants keep the
  // column statistics' tile height, or write none: the same kernel with a wider tile, compiled
  // beside it under its own entry, which a run takes instead where the bound dims give that
  // tile enough of a wave (runtime/launch_geometry.cpp, variant_of). Their params are this
  // launch's, in the same order (only the tensor maps' boxes differ).
  std::vector<KernelLaunch> by_rows;
};

struct Program {
  std::string file_name; // "<pipeline>.cu"
  std::string source;    // #include "name.cuh" lines; the runtime supplies the headers
  std::vector<KernelLaunch> launches;
  // Stored values whose rows are padded to a multiple of this many elements (operands of
  // Hopper GEMMs: select::Selection::row_multiples).
  std::map<ir::ValueId, int> row_multiples;
};

// Renders `selection` (select::select_kernels of `p`, a select::kernel_view) for target `arch`
// (the NVRTC target: "sm_90a", ...): one emitter per kernel, in plan order.
Program emit(const plan::Plan &p, const select::Selection &selection, const std::string &arch);

// select::kernel_view, select::select_kernels and emit in one call, for `target`'s arch and
// precision (its split-K cap is the launches'). On sm_90a tf32 GEMMs use the Hopper mainloop.
// `tunings` replace the heuristic's tile and split-K caps of the GEMM kernels they name; a tuned
// tile that is not among a kernel's candidates is a CodegenError.
Program generate(const plan::Plan &p, const Target &target, const GemmTunings &tunings = {});
// For the default Target: fp32 GEMMs, NVRTC's default arch.
Program generate(const plan::Plan &p);

// Every kernel's launch description and parameters as text (KFUSE_DUMP=launch), values named
// as in the plan.
std::string launch_text(const Program &program, const plan::Plan &plan);

// `source` with every #include of a template replaced by the template's text (once
// each), so `nvcc -c` compiles it with no other file.
std::string inline_templates(const std::string &source);

} // namespace kfuse::codegen
