// The plan validator: the static rules every partition must satisfy, checked after
// partitioning in every build (make_plan calls it) and before the interpreter executes a
// plan kernel by kernel (execute_plan).
//
// In kernel order:
//   - a kernel reads only declared tensors and values stored by an earlier kernel;
//   - every value a kernel computes has its arguments computed in the same kernel or read;
//     column statistics come from partials an earlier kernel wrote of that matrix;
//   - a column value (is_column_value) is computed from column values only, and a column
//     kernel computes no matrix value: codegen computes them once per feature;
//   - reads of a state see its value on entry: no kernel reads a state after an earlier
//     kernel updated it in place (the updating kernel itself reads before it writes);
//   - one writer per buffer: a value is stored, partials are written and a state is updated
//     by at most one kernel, and declared tensors are never stored;
//   - every op is computed and every output stored;
//   - each kernel lists what it computes, and the plan its intermediates, in value order.
// A violation is the planner's fault, never the user's: PlanError names the kernels.
#pragma once

#include "kfuse/error.h"

#include "compiler/plan/plan.h"

namespace kfuse::plan {

struct PlanError : kfuse::Error {
  using kfuse::Error::Error;
};

void validate_plan(const Plan &p);

} // namespace kfuse::plan
