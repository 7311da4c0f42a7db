#include "compiler/plan/execute_plan.h"

namespace kfuse::plan {

using namespace ir;

std::vector<HostTensor> execute_plan(const Plan &p, const DimBindings &dims, TensorMap &tensors) {
  validate_plan(p);
  Interpreter interp(p.graph, p.mode, dims, tensors);
  // No kernel computes a view: it is its argument's buffer, interpreted where it is read.
  auto views_of = [&](ValueId id) {
    std::vector<ValueId> chain;
    for (ValueId a = id; p.graph[a].is_op() && op_info(p.graph[a].op).cls == OpClass::View;
         a = p.graph[a].args[0])
      chain.push_back(a);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it)
      if (!interp.computed(*it))
        interp.eval(*it);
  };
  for (const Kernel &k : p.kernels)
    for (ValueId id : k.computes) {
      for (ValueId a : p.graph[id].args)
        views_of(a);
      if (!interp.computed(id))
        interp.eval(id);
    }
  std::vector<HostTensor> outs;
  for (ValueId o : p.graph.outputs) {
    views_of(o);
    outs.push_back(interp.output(o));
  }
  for (const auto &[name, t] : interp.state_updates())
    tensors[name] = t;
  return outs;
}

} // namespace kfuse::plan
