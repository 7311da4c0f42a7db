// A plan: the rewritten graph partitioned into an ordered list of GPU kernels.
//
// Every op value of the graph is computed by exactly one kernel, except that column
// expressions (per-feature vectors computed from params, state and constants) are
// evaluated inline by each kernel that uses them. Values that cross kernels are stored
// in buffers: declared tensors, pipeline outputs, or intermediates the pipeline owns.
// Column statistics cross kernels as per-tile partials (count, mean, M2) instead.
#pragma once

#include "compiler/ir/graph.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace kfuse::plan {

enum class KernelKind : uint8_t {
  Gemm,        // a GEMM with an elementwise epilogue, optionally producing column partials
  ColPartials, // column partials of a stored matrix no GEMM or elementwise kernel produced
  Column,      // per feature: merges partials, updates running stats, stores vectors
  Summary,     // per feature: merges partials into this rank's (count, mean, M2), which the run
               // all-gathers from every rank for the exchanged Column kernel after it
               // (Plan::stats_ranks)
  Row,         // a block per row of one stored matrix, passes over the row in order (its
               // row_stages): softmax / log_softmax, layernorm / rmsnorm, reductions along the
               // last axis, elementwise values of the row and of the row's earlier results
  Elementwise, // any elementwise expression of stored tensors, stored once, with its column
               // partials where statistics read it (not stored where only they do)
  Transpose,   // one stored matrix written transposed: a GEMM operand the Hopper mainloop must
               // read K-major (passes::k_major_operands), or a transpose read by anything else
};
std::string_view kernel_kind_name(KernelKind k);

// Output features up to which one GEMM tile holds whole rows (every mainloop's tiles are at
// least this wide), so that a row kernel over a GEMM's product can run in its epilogue.
inline constexpr int64_t kRowEpilogueCols = 128;

struct Kernel {
  std::string name; // stable: "k<index>_<kind>"
  KernelKind kind;
  // The op the kernel is built around: the GEMM, the row op, the stored value of an
  // elementwise kernel; -1 for Column kernels.
  ir::ValueId anchor = -1;
  std::vector<ir::ValueId> computes; // op values evaluated here, in graph order
  std::vector<ir::ValueId> stores;   // values this kernel writes to buffers
  std::vector<ir::ValueId> reads;    // stored values (declared or earlier kernels') it loads
  // Gemm / ColPartials / Elementwise: the matrix whose column partials this kernel writes (an
  // elementwise kernel's own value, stored or not: summarize_only_unread_values).
  // Column: the matrix whose partials it merges into col_mean / col_var (where the plan
  // exchanges statistics, the gathered summaries of every rank instead). Summary: the matrix
  // whose partials it summarizes. -1: none.
  ir::ValueId stats_of = -1;
  // Column, in a plan that exchanges statistics (Plan::stats_ranks): it merges stats_of's batch
  // statistics (ir::is_batch_statistic) from the summaries the run gathered from every rank,
  // after the Summary kernel before it; a Column kernel without it merges this rank's partials
  // into the rank's own statistics (`local`) alone.
  bool exchanged = false;
  // Row: the stored matrix whose rows it reads, and what it evaluates over each row, in order:
  // row ops, then stored elementwise values computed from the row and the results before them.
  // Gemm: the same where its epilogue runs a row kernel's passes (gemm_row_epilogue): rows_of
  // is then the value the epilogue computes, staged in shared memory (and stored only where
  // another kernel reads it or it is returned).
  ir::ValueId rows_of = -1;
  std::vector<ir::ValueId> row_stages;
  // row_partials_epilogue. Gemm: its row_stages are reductions along the rows of rows_of (the
  // value its epilogue computes, read back by no kernel), of which it writes a partial per (row,
  // column slice) instead of reading whole rows. Row: the kernel after it that merges those
  // partials in a fixed order into the reductions' results (its reductions read no matrix),
  // then runs its other stages on them as a row kernel does.
  bool row_partials = false;
  // Reads only params (precision bf16's rounding of a weight): computes the same until a param
  // is bound again, so the runtime launches it once per bind, not per run. Only fused plans
  // have such kernels; one never writes an output or draws.
  bool per_bind = false;
  std::vector<std::string> covers; // user op statements ("batchnorm@12"), by line
  std::vector<std::string> rules;  // rewrites and partition rules that shaped it, sorted
};

// A buffer the pipeline owns (values that are neither declared nor outputs). A matrix (rows
// of features) is stored in the value's own type, as PyTorch and torch.compile store it: a
// bf16 chain hands bf16 between its kernels, each value rounded once where it is stored (a
// GEMM epilogue's column statistics are those of its fp32 values before that rounding, as
// documented in gemm_epilogue.cuh). A fused plan's per-feature vectors (batchnorm's folded
// scale and shift, say: values no PyTorch op rounds) are f32. In the unfused baseline
// (partition with fuse false) every buffer is the value's own type, as in PyTorch's eager mode.
struct Intermediate {
  ir::ValueId value;
  std::string name;
  ir::TensorType type;
};

struct Plan {
  ir::Graph graph; // after all passes
  ir::Mode mode;
  std::vector<Kernel> kernels;
  std::vector<Intermediate> intermediates; // in value order (buffer_type searches them)
  // Every stats_of value, once: its partials buffers are intermediates too.
  std::vector<ir::ValueId> partials;
  // Ranks whose batch statistics a run exchanges (Options::batch_stats_ranks): each exchanged
  // Column kernel (Kernel::exchanged) then follows a Summary kernel of the same matrix and
  // merges the summaries the run gathered from every rank. 0: none.
  int stats_ranks = 0;
  // Why each stored op value is stored ("output", "read by max@11, ..."), for `kfuse plan`.
  std::map<ir::ValueId, std::string> stored_because;
};

// How kernels compute and read a value of the matrix view: a column value has one row of
// features (rank 0 and 1, [1, F], [1, 1]: a vector viewed as [1, F] and back stays one) and is
// computed once per feature and read at the feature index, by every row alike; any other
// value is a matrix value, computed and read per element (row, feature). Broadcasting keeps
// the two apart: an elementwise value with one row reads only values with one row. The
// partitioner, the plan validator and codegen all decide by this.
bool is_column_value(const ir::TensorType &t);

// The type of the buffer that holds stored value `v`: an intermediate's (see Intermediate),
// else the declared or output type.
ir::TensorType buffer_type(const Plan &p, ir::ValueId v);

// Whether kernel `k` computes `v`: a binary search, its computes being in graph order (the
// validator checks it).
bool computes(const Kernel &k, ir::ValueId v);

// The memory kernel `k` writes: the values it stores and the states its effects update in
// place (ir::updated_args); writes() asks for one value.
std::set<ir::ValueId> written(const ir::Graph &g, const Kernel &k);
bool writes(const ir::Graph &g, const Kernel &k, ir::ValueId v);

} // namespace kfuse::plan
