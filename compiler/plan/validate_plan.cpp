#include "compiler/plan/validate_plan.h"

#include "compiler/ir/verifier.h"

#include <algorithm>
#include <fmt/format.h>
#include <functional>
#include <map>
#include <set>

namespace kfuse::plan {

using namespace ir;

namespace {

// The rules of validate_plan.h, checked kernel by kernel in plan order: each check sees the
// buffers that the kernels before it stored, wrote partials of or updated.
class PlanValidator {
public:
  // As the kernels see it: views are the buffers they view, read through and computed by none.
  explicit PlanValidator(const Plan &p) : p_(p), view_(matrix_view(p.graph)), g_(view_) {
    for (size_t i = 0; i < g_.values.size(); ++i)
      if (!g_.values[i].is_op())
        stored_by_[static_cast<ValueId>(i)] = "";
  }

  void run() {
    for (const Kernel &k : p_.kernels) {
      check_reads(k);
      check_computes(k);
      check_stores(k);
      check_partials(k);
      check_row_partials(k);
      check_state_updates(k);
    }
    check_plan();
  }

private:
  [[noreturn]] void fail(const std::string &what) const {
    throw PlanError(fmt::format("internal error: invalid plan for '{}': {}", g_.name, what));
  }
  [[noreturn]] void fail(const Kernel &k, const std::string &what) const {
    fail(fmt::format("kernel {} {}", k.name, what));
  }

  void check_reads(const Kernel &k) const {
    for (ValueId r : k.reads) {
      if (!stored_by_.count(r)) {
        std::string later;
        for (const Kernel &o : p_.kernels)
          if (std::count(o.stores.begin(), o.stores.end(), r))
            later = fmt::format(", which {} stores later", o.name);
        fail(k, fmt::format("reads {} before any kernel stored it{}", describe(g_, r), later));
      }
      if (auto it = updated_by_.find(r); it != updated_by_.end())
        fail(k, fmt::format("reads state '{}' after kernel {} updated it in place", g_[r].name,
                            it->second));
    }
  }

  void check_computes(const Kernel &k) {
    if (std::adjacent_find(k.computes.begin(), k.computes.end(), std::greater_equal<>()) !=
        k.computes.end())
      fail(k, "lists what it computes out of graph order or twice");
    const std::set<ValueId> reads(k.reads.begin(), k.reads.end());
    local_.clear();
    for (ValueId id : k.computes) {
      check_arguments(k, id, reads);
      check_computed_once(k, id);
      local_.insert(id);
      computed_.insert(id);
    }
  }

  // Every argument of `id` is computed before it in kernel `k` or read by it, and has the
  // shape of data codegen can read where `id` is computed.
  void check_arguments(const Kernel &k, ValueId id, const std::set<ValueId> &reads) const {
    const Value &v = g_[id];
    bool from_partials = k.kind == KernelKind::Column && op_info(v.op).cls == OpClass::ColReduce;
    if (k.kind == KernelKind::Row && k.row_partials && op_info(v.op).cls == OpClass::Reduce) {
      if (!row_partials_by_.count(id))
        fail(k, fmt::format("merges {} from partials no kernel before it wrote", describe(g_, id)));
      return;
    }
    // Codegen computes a column value once per feature, reading each argument at the feature
    // index: a matrix value has none (is_column_value). A column kernel runs per feature.
    const bool per_feature = !op_info(v.op).cuda.empty() && is_column_value(v.type);
    if (k.kind == KernelKind::Column && !is_column_value(v.type))
      fail(k, fmt::format("computes matrix value {} in a kernel per feature", describe(g_, id)));
    for (ValueId a : v.args) {
      if (per_feature && !from_partials && !is_column_value(g_[a].type))
        fail(k, fmt::format("computes column value {} from matrix value {}", describe(g_, id),
                            describe(g_, a)));
      if (from_partials) {
        if (a != k.stats_of || !partials_by_.count(a))
          fail(k, fmt::format("computes {} without partials of {}", describe(g_, id),
                              describe(g_, a)));
      } else if (!local_.count(a) && !reads.count(a)) {
        fail(k, fmt::format("uses {} which it neither computes nor reads", describe(g_, a)));
      }
    }
  }

  // GEMMs, row ops and statistics run in one kernel each: a second kernel cannot
  // recompute them from its own loads.
  void check_computed_once(const Kernel &k, ValueId id) {
    const Value &v = g_[id];
    if (!op_info(v.op).cuda.empty() || v.is_effect())
      return;
    if (op_info(v.op).cls == OpClass::Gemm && k.anchor != id)
      fail(k, fmt::format("computes {} inside another kernel's work", describe(g_, id)));
    auto [it, fresh] = computed_by_.emplace(id, k.name);
    if (!fresh)
      fail(k,
           fmt::format("computes {} which kernel {} computes too", describe(g_, id), it->second));
  }

  void check_stores(const Kernel &k) {
    for (ValueId s : k.stores) {
      if (!local_.count(s))
        fail(k, fmt::format("stores {} which it does not compute", describe(g_, s)));
      auto [it, fresh] = stored_by_.emplace(s, k.name);
      if (!fresh)
        fail(k, it->second.empty() ? fmt::format("stores declared tensor '{}'", g_[s].name)
                                   : fmt::format("stores {} which kernel {} already stored",
                                                 describe(g_, s), it->second));
    }
  }

  void check_partials(const Kernel &k) {
    if (k.stats_of < 0)
      return;
    if (k.kind == KernelKind::Column || k.kind == KernelKind::Summary) {
      check_merge(k);
      return;
    }
    // An elementwise kernel may summarize the value it computes without storing it.
    const bool summarizes_own = k.kind == KernelKind::Elementwise && k.anchor == k.stats_of;
    if (!stored_by_.count(k.stats_of) && !summarizes_own)
      fail(k, fmt::format("writes partials of {} which is not stored", describe(g_, k.stats_of)));
    auto [it, fresh] = partials_by_.emplace(k.stats_of, k.name);
    if (!fresh)
      fail(k, fmt::format("writes partials of '{}' which kernel {} already wrote",
                          g_[k.stats_of].name, it->second));
  }

  // A GEMM kernel writing row partials (row_partials_epilogue) computes the value whose rows
  // they reduce and the inputs of the reductions, which are computed by no kernel yet.
  void check_row_partials(const Kernel &k) {
    if (k.kind != KernelKind::Gemm || !k.row_partials)
      return;
    if (!local_.count(k.rows_of))
      fail(k, fmt::format("writes row partials over {} which it does not compute",
                          describe(g_, k.rows_of)));
    for (ValueId st : k.row_stages) {
      const Value &v = g_[st];
      if (!v.is_op() || op_info(v.op).cls != OpClass::Reduce || computed_.count(st) ||
          (!local_.count(v.args[0]) && v.args[0] != k.rows_of))
        fail(k, fmt::format("writes row partials of {}, which is no reduction of what it computes",
                            describe(g_, st)));
      auto [it, fresh] = row_partials_by_.emplace(st, k.name);
      if (!fresh)
        fail(k, fmt::format("writes row partials of {} which kernel {} already wrote",
                            describe(g_, st), it->second));
    }
  }

  // A kernel that merges partials follows their writer; where the plan exchanges statistics,
  // an exchanged Column kernel follows the Summary kernel of its matrix, and only then is there
  // one. Such a plan takes its batch statistics in exchanged kernels and the rest in the others.
  void check_merge(const Kernel &k) {
    const std::string &of = g_[k.stats_of].name;
    if (!partials_by_.count(k.stats_of))
      fail(k, fmt::format("merges partials of '{}' which no kernel before it wrote", of));
    if (k.kind == KernelKind::Summary) {
      if (p_.stats_ranks == 0)
        fail(k, fmt::format("summarizes '{}' in a plan that exchanges no statistics", of));
      summarized_.insert(k.stats_of);
      return;
    }
    if (k.exchanged && p_.stats_ranks == 0)
      fail(k, fmt::format("merges the gathered summaries of '{}' in a plan that exchanges no "
                          "statistics",
                          of));
    if (k.exchanged && !summarized_.count(k.stats_of))
      fail(k, fmt::format("merges the gathered summaries of '{}' which no kernel before it "
                          "summarized",
                          of));
    for (ValueId id : k.computes)
      if (p_.stats_ranks > 0 && g_[id].is_op() && op_info(g_[id].op).cls == OpClass::ColReduce &&
          is_batch_statistic(g_[id]) != k.exchanged)
        fail(k, fmt::format("computes {} from {}", describe(g_, id),
                            k.exchanged ? "every rank's summaries, but it is the rank's own"
                                        : "this rank's partials, but it is a batch statistic"));
  }

  void check_state_updates(const Kernel &k) {
    for (ValueId id : k.computes) {
      if (!g_[id].is_effect())
        continue;
      for (int a : updated_args(g_[id])) {
        ValueId state = g_[id].args[static_cast<size_t>(a)];
        auto [it, fresh] = updated_by_.emplace(state, k.name);
        if (!fresh)
          fail(k, fmt::format("updates state '{}' which kernel {} already updated", g_[state].name,
                              it->second));
      }
    }
  }

  // After the last kernel: intermediates in order, every op computed, every output stored.
  void check_plan() const {
    for (size_t i = 1; i < p_.intermediates.size(); ++i)
      if (p_.intermediates[i - 1].value >= p_.intermediates[i].value)
        fail("its intermediates are not in value order");
    for (size_t i = 0; i < g_.values.size(); ++i)
      if (g_.values[i].is_op() && op_info(g_.values[i].op).cls != OpClass::View &&
          !computed_.count(static_cast<ValueId>(i)))
        fail(fmt::format("no kernel computes {}", describe(g_, static_cast<ValueId>(i))));
    for (ValueId o : g_.outputs)
      if (!stored_by_.count(o))
        fail(fmt::format("output {} is never stored", describe(g_, o)));
  }

  const Plan &p_;
  const Graph view_;
  const Graph &g_;
  std::map<ValueId, std::string> stored_by_, partials_by_, updated_by_; // buffer -> kernel name
  std::map<ValueId, std::string> row_partials_by_; // reduction -> the GEMM writing its partials
  std::set<ValueId> computed_;
  std::set<ValueId> summarized_;               // matrices a Summary kernel summarized
  std::map<ValueId, std::string> computed_by_; // ops no kernel computes inline -> their kernel
  std::set<ValueId> local_;                    // what the kernel being checked computed so far
};

} // namespace

void validate_plan(const Plan &p) { PlanValidator(p).run(); }

} // namespace kfuse::plan
