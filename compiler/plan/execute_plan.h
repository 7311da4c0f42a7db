// Executes a plan with the reference interpreter, kernel by kernel, as the GPU would.
//
// It checks what makes a partition valid: a kernel reads only declared tensors, values
// stored by earlier kernels, values it computes itself, and column partials an earlier
// kernel wrote; no kernel reads a state after an earlier kernel updated it; every op and
// output is produced. A violation throws PlanError: the planner is wrong, never the user.
#pragma once

#include "kfuse/error.h"

#include "compiler/ir/interpreter.h"
#include "compiler/plan/plan.h"

namespace kfuse::plan {

struct PlanError : kfuse::Error {
  using kfuse::Error::Error;
};

std::vector<ir::HostTensor> execute_plan(const Plan &p, const ir::DimBindings &dims,
                                         ir::TensorMap &tensors);

} // namespace kfuse::plan
