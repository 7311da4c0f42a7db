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

} // namespace kfuse::plan
