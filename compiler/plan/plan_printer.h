// `kfuse plan` output: a plan as readable text, or as JSON (format in docs/PLAN.md).
#pragma once

#include "compiler/ir/interpreter.h"
#include "compiler/plan/plan.h"

#include <string>

namespace kfuse::plan {

// Dims left unbound in `dims` print symbolically ("N*32768 B").
std::string print_plan_text(const Plan &p, const ir::DimBindings &dims);
std::string print_plan_json(const Plan &p, const ir::DimBindings &dims);

// Size in bytes of a tensor type: a number when every dim is bound, else "N*32768".
std::string bytes_text(const ir::TensorType &t, const ir::DimBindings &dims);

// Bytes the plan's kernels move through device memory: every kernel's reads and stores plus
// the state it updates in place (bn_update), column partials excluded, as `kfuse plan`'s
// totals count them. Every dim must be bound (else ir::InterpretError names it).
int64_t bytes_moved(const Plan &p, const ir::DimBindings &dims);

} // namespace kfuse::plan
