// Executes a plan with the reference interpreter, kernel by kernel, as the GPU would.
//
// The plan is validated first (validate_plan.h: reads only of stored values, state reads
// see the value on entry, one writer per buffer); a violation throws PlanError.
#pragma once

#include "compiler/ir/interpreter.h"
#include "compiler/plan/plan.h"
#include "compiler/plan/validate_plan.h"

namespace kfuse::plan {

std::vector<ir::HostTensor> execute_plan(const Plan &p, const ir::DimBindings &dims,
                                         ir::TensorMap &tensors);

// A plan that exchanges batch statistics across ranks (Plan::stats_ranks), run by every rank,
// rank r on `dims[r]` and `tensors[r]` (its own batch): kernel by kernel in step, as the GPUs'
// runs meet at each all-gather, where every rank's matrix a Summary kernel summarizes is
// exchanged (ir::Interpreter::exchange). Returns each rank's outputs and writes its state
// updates into its tensors. Throws PlanError where there are not stats_ranks ranks.
std::vector<std::vector<ir::HostTensor>>
execute_plan_ranks(const Plan &p, const std::vector<ir::DimBindings> &dims,
                   std::vector<ir::TensorMap> &tensors);

} // namespace kfuse::plan
