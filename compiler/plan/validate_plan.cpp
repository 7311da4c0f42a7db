#include "compiler/plan/validate_plan.h"

#include "compiler/ir/verifier.h"

#include <algorithm>
#include <fmt/format.h>
#include <functional>
#include <map>
#include <set>

namespace kfuse::plan {

using namespace ir;

void validate_plan(const Plan &p) {
  // As the kernels see it: views are the buffers they view, read through and computed by none.
  const Graph view = matrix_view(p.graph);
  const Graph &g = view;
  auto fail = [&](const std::string &what) {
    throw PlanError(fmt::format("internal error: invalid plan for '{}': {}", g.name, what));
  };
  std::map<ValueId, std::string> stored_by, partials_by, updated_by; // buffer -> kernel name
  std::set<ValueId> computed;
  std::map<ValueId, std::string> computed_by; // ops no kernel computes inline -> their kernel
  for (size_t i = 0; i < g.values.size(); ++i)
    if (!g.values[i].is_op())
      stored_by[static_cast<ValueId>(i)] = "";

  for (const Kernel &k : p.kernels) {
    auto kfail = [&](const std::string &what) { fail(fmt::format("kernel {} {}", k.name, what)); };
    std::set<ValueId> reads(k.reads.begin(), k.reads.end());
    for (ValueId r : k.reads) {
      if (!stored_by.count(r)) {
        std::string later;
        for (const Kernel &o : p.kernels)
          if (std::count(o.stores.begin(), o.stores.end(), r))
            later = fmt::format(", which {} stores later", o.name);
        kfail(fmt::format("reads {} before any kernel stored it{}", describe(g, r), later));
      }
      if (auto it = updated_by.find(r); it != updated_by.end())
        kfail(fmt::format("reads state '{}' after kernel {} updated it in place", g[r].name,
                          it->second));
    }
    if (std::adjacent_find(k.computes.begin(), k.computes.end(), std::greater_equal<>()) !=
        k.computes.end())
      kfail("lists what it computes out of graph order or twice");
    std::set<ValueId> local;
    for (ValueId id : k.computes) {
      const Value &v = g[id];
      bool from_partials =
          k.kind == KernelKind::Column && (v.op == OpKind::ColMean || v.op == OpKind::ColVar);
      // Codegen computes a column value once per feature, reading each argument at the feature
      // index: a matrix value has none (is_column_value). A column kernel runs per feature.
      const bool per_feature = !op_info(v.op).cuda.empty() && is_column_value(v.type);
      if (k.kind == KernelKind::Column && !is_column_value(v.type))
        kfail(fmt::format("computes matrix value {} in a kernel per feature", describe(g, id)));
      for (ValueId a : v.args) {
        if (per_feature && !from_partials && !is_column_value(g[a].type))
          kfail(fmt::format("computes column value {} from matrix value {}", describe(g, id),
                            describe(g, a)));
        if (from_partials) {
          if (a != k.stats_of || !partials_by.count(a))
            kfail(
                fmt::format("computes {} without partials of {}", describe(g, id), describe(g, a)));
        } else if (!local.count(a) && !reads.count(a)) {
          kfail(fmt::format("uses {} which it neither computes nor reads", describe(g, a)));
        }
      }
      // GEMMs, row ops and statistics run in one kernel each: a second kernel cannot
      // recompute them from its own loads.
      if (op_info(v.op).cuda.empty() && !v.is_effect()) {
        if (op_info(v.op).cls == OpClass::Gemm && k.anchor != id)
          kfail(fmt::format("computes {} inside another kernel's work", describe(g, id)));
        auto [it, fresh] = computed_by.emplace(id, k.name);
        if (!fresh)
          kfail(
              fmt::format("computes {} which kernel {} computes too", describe(g, id), it->second));
      }
      local.insert(id);
      computed.insert(id);
    }
    for (ValueId s : k.stores) {
      if (!local.count(s))
        kfail(fmt::format("stores {} which it does not compute", describe(g, s)));
      auto [it, fresh] = stored_by.emplace(s, k.name);
      if (!fresh)
        kfail(it->second.empty() ? fmt::format("stores declared tensor '{}'", g[s].name)
                                 : fmt::format("stores {} which kernel {} already stored",
                                               describe(g, s), it->second));
    }
    if (k.stats_of >= 0 && k.kind != KernelKind::Column) {
      if (!stored_by.count(k.stats_of))
        kfail(fmt::format("writes partials of {} which is not stored", describe(g, k.stats_of)));
      auto [it, fresh] = partials_by.emplace(k.stats_of, k.name);
      if (!fresh)
        kfail(fmt::format("writes partials of '{}' which kernel {} already wrote",
                          g[k.stats_of].name, it->second));
    }
    for (ValueId id : k.computes) {
      if (!g[id].is_effect())
        continue;
      for (int a : updated_args(g[id])) {
        ValueId state = g[id].args[static_cast<size_t>(a)];
        auto [it, fresh] = updated_by.emplace(state, k.name);
        if (!fresh)
          kfail(fmt::format("updates state '{}' which kernel {} already updated", g[state].name,
                            it->second));
      }
    }
  }
  for (size_t i = 1; i < p.intermediates.size(); ++i)
    if (p.intermediates[i - 1].value >= p.intermediates[i].value)
      fail("its intermediates are not in value order");
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].is_op() && op_info(g.values[i].op).cls != OpClass::View &&
        !computed.count(static_cast<ValueId>(i)))
      fail(fmt::format("no kernel computes {}", describe(g, static_cast<ValueId>(i))));
  for (ValueId o : g.outputs)
    if (!stored_by.count(o))
      fail(fmt::format("output {} is never stored", describe(g, o)));
}

} // namespace kfuse::plan
