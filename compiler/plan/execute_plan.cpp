#include "compiler/plan/execute_plan.h"

namespace kfuse::plan {

using namespace ir;

std::vector<HostTensor> execute_plan(const Plan &p, const DimBindings &dims, TensorMap &tensors) {
  validate_plan(p);
  Interpreter interp(p.graph, p.mode, dims, tensors);
  for (const Kernel &k : p.kernels)
    for (ValueId id : k.computes)
      if (!interp.computed(id))
        interp.eval(id);
  std::vector<HostTensor> outs;
  for (ValueId o : p.graph.outputs)
    outs.push_back(interp.output(o));
  for (const auto &[name, t] : interp.state_updates())
    tensors[name] = t;
  return outs;
}

} // namespace kfuse::plan
