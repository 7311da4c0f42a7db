// Partitioner: kernels formed in graph order, each op placed by its class: GEMM kernels, column
// kernels (statistics, running-stat updates, column values), stored elementwise values.
#include "compiler/plan/partitioner.h"

#include "compiler/ir/op_class.h"
#include "compiler/plan/validate_plan.h"

#include <fmt/format.h>

#include <algorithm>

namespace kfuse::plan::partitioning {

using namespace ir;

int Partitioner::new_kernel(KernelKind kind, ValueId anchor) {
  Kernel k;
  k.kind = kind;
  k.anchor = anchor;
  plan_.kernels.push_back(std::move(k));
  computed_in_.emplace_back();
  return static_cast<int>(plan_.kernels.size() - 1);
}

// Adds `id` alone to kernel `k`'s computes.
void Partitioner::compute(int k, ValueId id) {
  if (computed_in_[static_cast<size_t>(k)].insert(id).second)
    kernel(k).computes.push_back(id);
}

// Adds `id` and the inline values it reads (transitively) to kernel `k`, each once.
void Partitioner::add_tree(int k, ValueId id) {
  std::set<ValueId> &in_kernel = computed_in_[static_cast<size_t>(k)];
  std::vector<ValueId> todo = {id};
  while (!todo.empty()) {
    ValueId cur = todo.back();
    todo.pop_back();
    if (in_kernel.count(cur))
      continue;
    compute(k, cur); // computes are sorted into graph order by finish()
    for (ValueId a : val(cur).args)
      if (!stored_[static_cast<size_t>(a)] && val(a).is_op() && !is_stats(val(a)))
        todo.push_back(a);
  }
}

// The kernel that stores `id` (-1 for declarations).
int Partitioner::producer(ValueId id) const { return kernel_of_[static_cast<size_t>(id)]; }

// Latest column kernel among the statistics `id` depends on, or -1 (a column kernel of its
// own) when none or when the inline tree of `id` reads a value a later kernel stores (a
// reduction over the rows, say): every kernel reads only what kernels built before it store,
// the order row_kernel_for() relies on to join earlier kernels without a cycle.
int Partitioner::column_kernel_for(ValueId id) const {
  int k = -1;
  for (ValueId a : val(id).args) {
    if (is_stats(val(a)) || stats_dep_[static_cast<size_t>(a)])
      k = std::max(k, producer(a));
  }
  for (ValueId leaf : op_leaves(id))
    if (producer(leaf) > k)
      return -1;
  return k;
}

// The column kernel merging partials of matrix `m` into statistic `stat`, creating partials
// where needed. Where the plan exchanges statistics across ranks, m's batch statistics
// (ir::is_batch_statistic) and its rank's own have a column kernel each, both merging the one
// set of partials: the first merges every rank's summaries instead (exchange_stats), the
// second this rank's partials alone. Otherwise one kernel merges all of them.
int Partitioner::column_kernel_of(ValueId m, ValueId stat) {
  const bool exchanged = stats_ranks_ > 0 && is_batch_statistic(val(stat));
  auto it = column_of_.find({m, exchanged});
  if (it != column_of_.end())
    return it->second;
  if (std::find(plan_.partials.begin(), plan_.partials.end(), m) == plan_.partials.end()) {
    int p = producer(m);
    // The kernel that computes m writes its partials as it stores it (a GEMM's epilogue, an
    // elementwise kernel's tiles), rather than a col_partials kernel loading it again.
    const bool writes_partials =
        p >= 0 && kernel(p).stats_of < 0 &&
        (kernel(p).kind == KernelKind::Gemm || (kernel(p).kind == KernelKind::Elementwise &&
                                                kernel(p).stores == std::vector<ValueId>{m}));
    if (writes_partials) {
      kernel(p).stats_of = m;
      kernel(p).rules.push_back("stats_epilogue");
    } else {
      int cp = new_kernel(KernelKind::ColPartials, m);
      kernel(cp).stats_of = m;
    }
    plan_.partials.push_back(m);
  }
  int c = new_kernel(KernelKind::Column, -1);
  kernel(c).stats_of = m;
  kernel(c).exchanged = exchanged;
  kernel(c).rules.push_back("column_finalize");
  column_of_[{m, exchanged}] = c;
  return c;
}

void Partitioner::place(int k, ValueId id) {
  add_tree(k, id);
  if (stored_[static_cast<size_t>(id)]) {
    kernel(k).stores.push_back(id);
    kernel_of_[static_cast<size_t>(id)] = k;
  }
}

void Partitioner::build_kernels() {
  for (size_t i = 0; i < g_.values.size(); ++i) {
    ValueId id = static_cast<ValueId>(i);
    const Value &v = val(id);
    if (!v.is_op() || is_view(v))
      continue;
    OpClass cls = op_info(v.op).cls;
    if (cls == OpClass::Transpose) {
      int k = new_kernel(KernelKind::Transpose, id);
      compute(k, id);
      kernel(k).stores.push_back(id);
      kernel_of_[i] = k;
    } else if (cls == OpClass::Gemm) {
      int k = new_kernel(KernelKind::Gemm, id);
      gemm_kernel_[id] = k;
      compute(k, id);
      if (stored_[i]) {
        kernel(k).stores.push_back(id);
        kernel_of_[i] = k;
      }
    } else if (is_stats(v)) {
      int c = column_kernel_of(v.args[0], id);
      compute(c, id);
      kernel_of_[i] = c;
    } else if (is_row_op(v)) {
      place_row_op(id);
    } else if (v.is_effect() || (stats_dep_[i] && is_column_value(v.type))) {
      int c = column_kernel_for(id);
      if (c < 0)
        c = new_kernel(KernelKind::Column, -1);
      add_tree(c, id);
      kernel_of_[i] = c;
    } else if (stored_[i]) {
      place_elementwise(id);
    }
  }
}

// Stores `id` in kernel `k`, which computes it.
void Partitioner::store_in(int k, ValueId id) {
  stored_[static_cast<size_t>(id)] = true;
  kernel(k).stores.push_back(id);
  kernel_of_[static_cast<size_t>(id)] = k;
}

// A stored elementwise value: the end of a GEMM's epilogue chain, a pass of a row kernel, or
// a kernel of its own.
void Partitioner::place_elementwise(ValueId id) {
  if (place_row_tail(id))
    return;
  auto it = epilogue_of_.find(id);
  if (it != epilogue_of_.end()) {
    int k = gemm_kernel_.at(it->second);
    ValueId late = -1;
    for (ValueId leaf : op_leaves(id))
      if (leaf != it->second && producer(leaf) >= k)
        late = leaf;
    if (late < 0) {
      kernel(k).rules.push_back("gemm_epilogue");
      place(k, id);
      return;
    }
    // A leaf is produced after the GEMM runs: store the product instead.
    because_[it->second] =
        fmt::format("its epilogue would read {}, which a later kernel stores", site(late));
    store_in(k, it->second);
  }
  std::string rule;
  if (int k = row_kernel_joining(id, rule); k >= 0) {
    if (rule == "row_result")
      row_values_.insert(id);
    kernel(k).rules.push_back(rule);
    kernel(k).row_stages.push_back(id);
    place(k, id);
    return;
  }
  place(new_kernel(KernelKind::Elementwise, id), id);
}

} // namespace kfuse::plan::partitioning
