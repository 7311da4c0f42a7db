// What the GPU path runs: every op the interpreter runs, except the cases below, which
// `kfuse check` and lower() report at their source location before planning (so a file that
// checks also emits):
//   - tensors that are not f32 (the templates load and store float);
//   - softmax / log_softmax and reductions along any axis but the last (row kernels only).
#pragma once

#include "compiler/ir/graph.h"

#include <optional>
#include <string>

namespace kfuse::codegen {

struct GpuUnsupported {
  ir::ValueId value; // the declaration or op at fault, in graph order the first
  std::string message;
};

std::optional<GpuUnsupported> gpu_unsupported(const ir::Graph &g);

} // namespace kfuse::codegen
