#include "compiler/plan/execute_plan.h"

#include <algorithm>
#include <fmt/format.h>
#include <set>

namespace kfuse::plan {

using namespace ir;

std::vector<HostTensor> execute_plan(const Plan &p, const DimBindings &dims, TensorMap &tensors) {
  const Graph &g = p.graph;
  Interpreter interp(g, p.mode, dims, tensors);
  std::set<ValueId> stored, partials, updated_states, computed;
  for (size_t i = 0; i < g.values.size(); ++i)
    if (!g.values[i].is_op())
      stored.insert(static_cast<ValueId>(i));

  for (const Kernel &k : p.kernels) {
    auto fail = [&](const std::string &what) {
      throw PlanError(fmt::format("invalid plan for '{}': kernel {} {}", g.name, k.name, what));
    };
    for (ValueId r : k.reads) {
      if (!stored.count(r))
        fail(fmt::format("reads '{}' before any kernel stored it", g[r].name));
      if (g[r].kind == ValueKind::State && updated_states.count(r))
        fail(fmt::format("reads state '{}' after an earlier kernel updated it", g[r].name));
    }
    std::set<ValueId> local;
    for (ValueId id : k.computes) {
      const Value &v = g[id];
      bool from_partials = k.kind == KernelKind::Column &&
                           (v.op == OpKind::ColMean || v.op == OpKind::ColVar);
      for (ValueId a : v.args) {
        if (from_partials) {
          if (a != k.stats_of || !partials.count(a))
            fail(fmt::format("computes '{}' without partials of '{}'", v.name, g[a].name));
        } else if (!local.count(a) && !std::count(k.reads.begin(), k.reads.end(), a)) {
          fail(fmt::format("uses '{}' which it neither computes nor reads", g[a].name));
        }
      }
      if (!interp.computed(id))
        interp.eval(id);
      local.insert(id);
      computed.insert(id);
    }
    for (ValueId s : k.stores) {
      if (!local.count(s))
        fail(fmt::format("stores '{}' which it does not compute", g[s].name));
      stored.insert(s);
    }
    if (k.stats_of >= 0 && k.kind != KernelKind::Column) {
      if (!stored.count(k.stats_of))
        fail(fmt::format("writes partials of '{}' which is not stored", g[k.stats_of].name));
      partials.insert(k.stats_of);
    }
    for (ValueId id : k.computes)
      if (g[id].is_effect())
        updated_states.insert({g[id].args[0], g[id].args[1]});
  }
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].is_op() && !computed.count(static_cast<ValueId>(i)))
      throw PlanError(fmt::format("invalid plan for '{}': no kernel computes '{}'", g.name,
                                  g.values[i].name));
  std::vector<HostTensor> outs;
  for (ValueId o : g.outputs) {
    if (!stored.count(o))
      throw PlanError(fmt::format("invalid plan for '{}': output '{}' is never stored", g.name,
                                  g[o].name));
    outs.push_back(interp.value(o));
  }
  for (const auto &[name, t] : interp.state_updates())
    tensors[name] = t;
  return outs;
}

} // namespace kfuse::plan
