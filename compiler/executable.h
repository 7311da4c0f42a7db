// The Executable: what the runtime runs, as data. The compiler builds it from the plan and the
// generated program (compiler/build_executable.h); the runtime launches what it says and knows
// no IR, so this header includes none.
//
// It holds the pipeline's interface (every declared tensor's name, kind, dtype and shape as
// extents: constants, dims, products of dims), the kernels (entry, launch geometry, parameters,
// compiled variants), the buffers their parameters point at (declared tensors, outputs, the
// values per-bind kernels store, workspace entries), the workspace layout, the GEMM operands of
// bare-product GEMMs (what a launch hook may run instead) and the run-time constraints the bound
// dims must meet.
#pragma once

#include "compiler/codegen/gemm_tuning.h"
#include "compiler/extent.h"
#include "compiler/target.h"
#include "kfuse/kfuse.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kfuse::exec {

using Dims = std::map<std::string, int64_t>;

// Bytes and name ("f32", "f16", "bf16") of an element type; an invalid DType value throws.
int64_t dtype_bytes(DType t);
const char *dtype_name(DType t);
// "[2, 3]": a concrete shape as messages print it.
std::string shape_text(const std::vector<int64_t> &shape);

// One extent of a declared shape (compiler/extent.h): a constant, a dim, or a product of dims
// times a constant (a view's `B*T`).
using Extent = kfuse::Extent;

struct TensorType {
  DType dtype = DType::F32;
  std::vector<Extent> shape;
  // Each row stored with its length rounded up to a multiple of this many elements: a
  // transposed copy the Hopper GEMM reads through TMA, whose row pitch is a multiple of 16
  // bytes whatever its length (elements() and bytes() count the padding).
  int row_multiple = 1;

  std::string str() const; // "f32[N, 8192]"
  // Both computed in int64; an overflow throws kfuse::Error naming the type.
  size_t elements(const Dims &dims) const;
  size_t bytes(const Dims &dims) const;
};

struct DeclaredTensor {
  enum class Kind : uint8_t { Input, Param, State };
  std::string name;
  Kind kind = Kind::Input;
  TensorType type;
};
const char *kind_name(DeclaredTensor::Kind k); // "input", "param", "state"

// What a caller of the pipeline sees: declared tensors in declaration order, outputs in
// return order, and every dim the shapes name.
struct Interface {
  std::string name;
  std::vector<DeclaredTensor> declared;
  std::vector<TensorType> outputs;
  std::vector<std::string> dims;

  int find(const std::string &declared_name) const; // index into declared, or -1
};

// What a run's pointer table holds, and the kernels point into: slot i of a run is declared
// tensor i, then output i, then per-bind value i; workspace entries lie in the workspace.
struct Buffer {
  enum class Home : uint8_t { Declared, Output, PerBind, Workspace };
  Home home = Home::Declared;
  size_t index = 0; // into Interface::declared, outputs, Executable::per_bind or workspace
  std::string name; // how tensor-map errors name it
};

// Bytes an intermediate takes at the bound dims, each at a 256-byte aligned offset.
struct WorkspaceEntry {
  enum class Kind : uint8_t {
    Value,
    PartialMean,
    PartialM2,
    SplitPartials,
    SplitCounters,
    StatsSummary,      // 3 doubles per column of `type`: this rank's (count, mean, M2)
    GatheredSummaries, // `ranks` of them, all-gathered
  };
  Kind kind = Kind::Value;
  // Value: the stored value (its buffer type). Partials and summaries: the [rows, columns]
  // matrix they summarise, one partial per column per tile_rows rows.
  TensorType type;
  int tile_rows = 0;
  size_t kernel = 0; // SplitPartials / SplitCounters: the GEMM's kernel
  int ranks = 0;     // GatheredSummaries
};

// An all-gather a run makes between two kernels (batch statistics exchanged across ranks,
// Options::batch_stats_ranks): `count` doubles from buffer `send` of every rank into buffer
// `recv` (ranks x count doubles, in rank order), after kernel `after` and before the next.
struct Exchange {
  size_t after = 0;
  size_t send = 0, recv = 0; // into Executable::buffers (workspace entries)
  Extent count = Extent::constant(0);
};

// A 2-D TMA descriptor the launcher encodes for a kernel parameter: the matrix of `rows` x
// `inner` elements of type `element`, row-major with no padding, read in boxes of box_rows x
// box_inner elements with the 128-byte swizzle.
struct TensorMapSpec {
  Extent rows, inner;
  int box_rows = 0, box_inner = 0;
  DType element = DType::F32;
  int row_multiple = 1; // rows padded to a multiple of this many elements (TensorType's)
};

// One kernel argument, in entry-point order.
struct Param {
  enum class Kind : uint8_t {
    Buffer,            // the device pointer of `buffer`
    PartialMean,       // column partials in `buffer` (a workspace entry)
    PartialM2,         //
    Dim,               // the bound extent of `dim`, as int
    SmemFloats,        // row kernels: how many floats of the row fit in dynamic shared memory
    TensorMap,         // a TMA descriptor of `buffer` (kf::sm90::TensorMap, by value)
    Splits,            // GEMMs: the K split count S of the launch, as int
    SplitPartials,     // GEMMs: split-K's partial tiles (`buffer`, a workspace entry; float *)
    SplitCounters,     // GEMMs: split-K's per-tile arrival counters (unsigned *)
    RngSeed,           // kernels with a dropout: the run's RNG seed (unsigned long long, by value)
    RngOffset,         // and its offset (templates/dropout.cuh)
    StatsSummary,      // this rank's per-feature (count, mean, M2) in `buffer` (a workspace entry)
    GatheredSummaries, // every rank's, all-gathered, in `buffer` (a workspace entry)
  };
  Kind kind = Kind::Buffer;
  size_t buffer = 0; // into Executable::buffers
  std::string dim;
  TensorMapSpec map = {};
};

// How a kernel launches, from its template's traits (the formulas: compiler/codegen/program.h,
// LaunchGeometry, which this mirrors with IR-free extents).
struct Geometry {
  enum class Grid : uint8_t { Tiles2D, Tiles, Persistent, Elements };
  Grid grid = Grid::Tiles;
  Extent rows = Extent::constant(1), cols = Extent::constant(1);
  int tile_rows = 1, tile_cols = 1;
  int blocks_per_sm = 1;
  int block_threads = 0;
  int smem_bytes = 0;
  Extent row_length = Extent::constant(0);
  int row_bytes_cap = 0;
  int cluster = 1;
  Extent inner = Extent::constant(0);
  int tile_k = 0;
  int split_cost_kblocks = 0;
  std::map<int, int> max_splits_by_class;
  int kblock_time = 0;
  int min_waves = 1;
  bool waits_prior_grid = false;
};

// A bare-product GEMM (the unfused baseline's): C = A @ B^T when trans_b, else A @ B, row-major,
// m x n x k the kernel's rows, cols and inner. A launch hook may run it instead of the kernel.
struct BareGemm {
  bool trans_b = false;
  size_t a = 0, b = 0, c = 0; // into Executable::buffers
  DType operands = DType::F32, result = DType::F32;
};

struct Kernel {
  std::string entry;
  bool gemm = false;
  bool per_bind = false; // launched once per bind (precision bf16's rounded weights), not per run
  Geometry geometry;
  std::vector<Param> params;
  // GEMMs: m x n x inner, the configuration chosen and why, the tile taken ("128x256x1"), the
  // tiles it may take instead, and what the tuning store keys it by.
  Extent rows, cols, inner;
  std::string config, tile, signature;
  std::vector<codegen::Sm90Tile> tiles;
  // The same kernel compiled with other tiles, which a run takes by the bound dims
  // (runtime/launch_geometry.h, variant_of); their params are this kernel's, in the same order.
  std::vector<Kernel> variants;
  std::optional<BareGemm> bare_gemm;
};

// A condition the bound dims must meet that the shapes alone do not say.
struct Constraint {
  enum class Kind : uint8_t {
    RowsFitInt,  // the product of `extents` (a rank-3/4 tensor's leading axes) <= INT_MAX
    EqualRows,   // extents[0] == extents[1] (the rows on both sides of a view)
    Divides,     // `divisor` divides extents[0] (groupnorm's groups, the channels)
    MoreThanOne, // extents[0] > 1 (train-mode batchnorm's rows)
  };
  Kind kind = Kind::RowsFitInt;
  std::vector<Extent> extents;
  double divisor = 0;
  std::string subject; // what the message names: the tensor, the view, the op
  std::string note;    // appended to the message: " (line 7)"
};

// The message of a constraint the bound dims break (every dim of `c` bound), or nullopt.
std::optional<std::string> violation(const Constraint &c, const Dims &dims);

struct Executable {
  Interface interface;
  Mode mode = Mode::Train;
  Target target; // what the source was generated for: NVRTC compiles it for target.arch
  std::string file_name, source; // the translation unit NVRTC compiles
  std::string plan_text;
  std::vector<Kernel> kernels; // in launch order
  std::vector<Buffer> buffers;
  std::vector<WorkspaceEntry> workspace;
  std::vector<TensorType> per_bind;   // the values per-bind kernels store
  std::vector<size_t> output_buffers; // output i is copied from this buffer where it is not its own
  std::vector<Constraint> constraints;
  std::vector<Exchange> exchanges; // in launch order

  size_t slots() const {
    return interface.declared.size() + interface.outputs.size() + per_bind.size();
  }
  size_t slot(const Buffer &b) const; // Declared, Output or PerBind
};

// A GEMM kernel as the tuning store keys it, and the tiles it may take.
struct TunableGemm {
  std::string entry, signature, tile;
  std::vector<codegen::Sm90Tile> tiles;
};

// What the runtime asks of the compiler for a pipeline: the .kf text lowered all the way.
struct Request {
  Mode mode = Mode::Train;
  Target target;
  bool fuse = true; // false: the unfused baseline benchmarks compare against
  // The tuned configurations to make the GEMM kernels with; empty: the heuristics'.
  std::function<codegen::GemmTunings(const std::vector<TunableGemm> &)> tunings = {};
  // compile_training: the inputs and params whose gradients are not wanted (Options::frozen).
  std::set<std::string> frozen = {};
};

// The text of a .kf file; throws as the parser's reading does (a missing, unreadable or
// oversized file).
std::string read_kf_file(const std::string &path);

// Throws dsl::DiagnosticError (a kfuse::Error) for a .kf error, as lower() does.
Executable compile_executable(const std::string &kf_text, const std::string &file_name,
                              const Request &request);

// A pipeline and its reverse mode (Options::backward) as two executables: the forward, which
// returns the values the backward reads after its own outputs, and the backward, run in the
// forward's mode at the forward run's dropout stream. The names say which tensor is which: the
// runtime knows no IR.
struct Training {
  Executable forward, backward;
  size_t outputs = 0; // the pipeline's own outputs; forward's output outputs + i is saved[i]
  std::vector<std::string> grad_inputs; // backward inputs: the gradient of output i
  std::vector<std::string> saved;       // backward inputs: the forward's further outputs
  std::vector<std::string> gradients;   // backward output i: the gradient of this input or param
};

// Throws as compile_executable does, and ir::GradError (a kfuse::Error) naming an op whose
// gradient has no rule.
Training compile_training(const std::string &kf_text, const std::string &file_name,
                          const Request &request);

} // namespace kfuse::exec
