// A plan: the rewritten graph partitioned into an ordered list of GPU kernels.
//
// Every op value of the graph is computed by exactly one kernel, except that column
// expressions (per-feature vectors computed from params, state and constants) are
// evaluated inline by each kernel that uses them. Values that cross kernels are stored
// in buffers: declared tensors, pipeline outputs, or intermediates the pipeline owns.
// Column statistics cross kernels as per-tile partials (count, mean, M2) instead.
#pragma once

#include "compiler/ir/graph.h"

#include <string>
#include <vector>

namespace kfuse::plan {

enum class KernelKind : uint8_t {
  Gemm,        // a GEMM with an elementwise epilogue, optionally producing column partials
  ColPartials, // column partials of a stored matrix not produced by a GEMM
  Column,      // per feature: merges partials, updates running stats, stores vectors
  Row,         // a block per row, elementwise prologue on load: softmax / log_softmax,
               // layernorm / rmsnorm, a reduction along the last axis (stores [N, 1] or [N])
  Elementwise, // any elementwise expression of stored tensors, stored once
};
std::string_view kernel_kind_name(KernelKind k);

struct Kernel {
  std::string name; // stable: "k<index>_<kind>"
  KernelKind kind;
  // The op the kernel is built around: the GEMM, the row op, the stored value of an
  // elementwise kernel; -1 for Column kernels.
  ir::ValueId anchor = -1;
  std::vector<ir::ValueId> computes; // op values evaluated here, in graph order
  std::vector<ir::ValueId> stores;   // values this kernel writes to buffers
  std::vector<ir::ValueId> reads;    // stored values (declared or earlier kernels') it loads
  // Gemm / ColPartials: the stored matrix whose column partials this kernel writes.
  // Column: the matrix whose partials it merges into col_mean / col_var. -1: none.
  ir::ValueId stats_of = -1;
  std::vector<std::string> covers; // user op statements ("batchnorm@12"), by line
  std::vector<std::string> rules;  // rewrites and partition rules that shaped it, sorted
};

// A buffer the pipeline owns (values that are neither declared nor outputs). In a fused plan
// its type is f32 whatever the value's element type: kernels hold values in fp32 and hand them
// on unrounded, as one fused kernel would; only declared outputs and states are rounded. In
// the unfused baseline (partition with fuse false) it is the value's own type, so a bf16 chain
// stores and reloads bf16 between its ops, as PyTorch's eager mode does.
struct Intermediate {
  ir::ValueId value;
  std::string name;
  ir::TensorType type;
};

struct Plan {
  ir::Graph graph; // after all passes
  ir::Mode mode;
  std::vector<Kernel> kernels;
  std::vector<Intermediate> intermediates;
  // Every stats_of value, once: its partials buffers are intermediates too.
  std::vector<ir::ValueId> partials;
};

// The type of the buffer that holds stored value `v`: an intermediate's (see Intermediate),
// else the declared or output type.
ir::TensorType buffer_type(const Plan &p, ir::ValueId v);

} // namespace kfuse::plan
