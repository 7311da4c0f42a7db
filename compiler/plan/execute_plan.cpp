#include "compiler/plan/execute_plan.h"

#include "compiler/ir/views.h"

#include <fmt/format.h>

#include <memory>

namespace kfuse::plan {

using namespace ir;

namespace {

// No kernel computes a view: it is its argument's buffer, interpreted where it is read.
void interpret_views_of(const Plan &p, Interpreter &interp, ValueId id) {
  std::vector<ValueId> chain;
  for (ValueId a = id; p.graph[a].is_op() && op_info(p.graph[a].op).cls == OpClass::View;
       a = p.graph[a].args[0])
    chain.push_back(a);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    if (!interp.computed(*it))
      interp.eval(*it);
}

void run_kernel(const Plan &p, const Kernel &k, Interpreter &interp) {
  for (ValueId id : k.computes) {
    for (ValueId a : p.graph[id].args)
      interpret_views_of(p, interp, a);
    if (!interp.computed(id))
      interp.eval(id);
  }
}

std::vector<HostTensor> finish(const Plan &p, Interpreter &interp, TensorMap &tensors) {
  std::vector<HostTensor> outs;
  for (ValueId o : p.graph.outputs) {
    interpret_views_of(p, interp, o);
    outs.push_back(interp.output(o));
  }
  for (const auto &[name, t] : interp.state_updates())
    tensors[name] = t;
  return outs;
}

// Matrix `m` of every rank, as its [rows, features] matrix view, rows in rank order.
HostTensor every_rank(const std::vector<std::unique_ptr<Interpreter>> &ranks, ValueId m) {
  HostTensor whole;
  for (const std::unique_ptr<Interpreter> &r : ranks) {
    const HostTensor &own = r->value(m);
    const int64_t features = own.shape.back();
    if (whole.shape.empty())
      whole.shape = {0, features};
    whole.shape[0] += own.numel() / features;
    whole.data.insert(whole.data.end(), own.data.begin(), own.data.end());
  }
  return whole;
}

} // namespace

std::vector<HostTensor> execute_plan(const Plan &p, const DimBindings &dims, TensorMap &tensors) {
  validate_plan(p);
  Interpreter interp(p.graph, p.mode, dims, tensors);
  for (const Kernel &k : p.kernels)
    run_kernel(p, k, interp);
  return finish(p, interp, tensors);
}

std::vector<std::vector<HostTensor>> execute_plan_ranks(const Plan &p,
                                                        const std::vector<DimBindings> &dims,
                                                        std::vector<TensorMap> &tensors) {
  validate_plan(p);
  if (p.stats_ranks < 1 || dims.size() != static_cast<size_t>(p.stats_ranks) ||
      tensors.size() != dims.size())
    throw PlanError(fmt::format("plan '{}' exchanges statistics across {} ranks, but is run "
                                "with the dims of {} and the tensors of {}",
                                p.graph.name, p.stats_ranks, dims.size(), tensors.size()));
  std::vector<std::unique_ptr<Interpreter>> ranks;
  for (size_t r = 0; r < dims.size(); ++r)
    ranks.push_back(std::make_unique<Interpreter>(p.graph, p.mode, dims[r], tensors[r]));
  for (const Kernel &k : p.kernels) {
    if (k.kind == KernelKind::Summary) { // the all-gather after it
      const ValueId m = view_source(p.graph, k.stats_of);
      const HostTensor whole = every_rank(ranks, m);
      for (std::unique_ptr<Interpreter> &r : ranks)
        r->exchange(m, whole);
    }
    for (std::unique_ptr<Interpreter> &r : ranks)
      run_kernel(p, k, *r);
  }
  std::vector<std::vector<HostTensor>> outs;
  for (size_t r = 0; r < ranks.size(); ++r)
    outs.push_back(finish(p, *ranks[r], tensors[r]));
  return outs;
}

} // namespace kfuse::plan
