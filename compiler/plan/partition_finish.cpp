// Partitioner: the finished plan: what each kernel reads and stores, the kernels' order, names,
// and why each value is stored.
#include "compiler/plan/exchange_stats.h"
#include "compiler/plan/partitioner.h"

#include "compiler/ir/verifier.h"

#include <algorithm>
#include <stdexcept>

namespace kfuse::plan::partitioning {

using namespace ir;

// Column values a column kernel computes are stored when another kernel reads them or
// they are returned; only now, with every kernel built, are all readers known.
void Partitioner::store_column_values() {
  std::vector<std::set<size_t>> read_by(g_.values.size()); // value -> kernels using it
  for (size_t k = 0; k < plan_.kernels.size(); ++k)
    for (ValueId u : plan_.kernels[k].computes)
      for (ValueId a : val(u).args)
        read_by[static_cast<size_t>(a)].insert(k);
  for (size_t c = 0; c < plan_.kernels.size(); ++c) {
    if (plan_.kernels[c].kind != KernelKind::Column)
      continue;
    for (ValueId id : plan_.kernels[c].computes) {
      if (val(id).is_effect() || kernel_of_[static_cast<size_t>(id)] != static_cast<int>(c))
        continue;
      const std::set<size_t> &readers = read_by[static_cast<size_t>(id)];
      bool outside = is_output_.count(id) != 0 || readers.size() > readers.count(c);
      if (outside)
        plan_.kernels[c].stores.push_back(id);
    }
  }
}

// Reads of a state see its value on entry to the pipeline. A column kernel updates running
// statistics in place after its own reads; when another kernel reads one of those states
// too, the update moves to a column kernel of its own, which order_kernels() places after
// every reader (it reads the batch statistics the first column kernel then stores).
void Partitioner::separate_state_updates() {
  size_t count = plan_.kernels.size();
  for (size_t c = 0; c < count; ++c) {
    if (plan_.kernels[c].kind != KernelKind::Column)
      continue;
    std::vector<ValueId> effects;
    for (ValueId id : plan_.kernels[c].computes)
      if (val(id).is_effect() && state_read_elsewhere(id, c))
        effects.push_back(id);
    for (ValueId e : effects) {
      auto &computes = plan_.kernels[c].computes;
      computes.erase(std::find(computes.begin(), computes.end(), e));
      computed_in_[c].erase(e);
      int u = new_kernel(KernelKind::Column, -1);
      kernel(u).rules.push_back("state_update_after_readers");
      compute(u, e);
      kernel_of_[static_cast<size_t>(e)] = u;
    }
  }
}

// Whether an op outside kernel `c` reads a state that effect `e` updates.
bool Partitioner::state_read_elsewhere(ValueId e, size_t c) const {
  for (int a : updated_args(val(e))) {
    ValueId state = val(e).args[static_cast<size_t>(a)];
    for (ValueId u : users(state))
      for (size_t k = 0; k < plan_.kernels.size(); ++k)
        if (k != c && computed_in_[k].count(u))
          return true;
  }
  return false;
}

// Kernels run in an order of their true dependencies: a kernel follows every kernel that
// stores a value it reads or writes partials it merges, and a state update follows every
// other reader of that state. Among ready kernels the one built first goes first, so a
// plan built in dependency order keeps its order.
void Partitioner::order_kernels() {
  std::vector<Kernel> &ks = plan_.kernels;
  size_t n = ks.size();
  std::map<ValueId, size_t> storer, partials_writer;
  std::map<ValueId, std::vector<size_t>> updaters;
  for (size_t k = 0; k < n; ++k) {
    for (ValueId s : ks[k].stores)
      storer[s] = k;
    if (ks[k].stats_of >= 0 && ks[k].kind != KernelKind::Column)
      partials_writer[ks[k].stats_of] = k;
    for (ValueId id : ks[k].computes)
      if (val(id).is_effect())
        for (int a : updated_args(val(id)))
          updaters[val(id).args[static_cast<size_t>(a)]].push_back(k);
  }
  std::vector<std::set<size_t>> after(n); // after[p]: kernels that must follow p
  for (size_t k = 0; k < n; ++k) {
    auto edge = [&](size_t from, size_t to) {
      if (from != to)
        after[from].insert(to);
    };
    for (ValueId r : ks[k].reads) {
      if (auto it = storer.find(r); it != storer.end())
        edge(it->second, k);
      if (auto it = updaters.find(r); it != updaters.end())
        for (size_t u : it->second)
          edge(k, u);
    }
    if (ks[k].kind == KernelKind::Column && ks[k].stats_of >= 0)
      edge(partials_writer.at(ks[k].stats_of), k);
  }
  std::vector<int> pending(n, 0);
  for (size_t p = 0; p < n; ++p)
    for (size_t k : after[p])
      ++pending[k];
  std::set<size_t> ready;
  for (size_t k = 0; k < n; ++k)
    if (pending[k] == 0)
      ready.insert(k);
  std::vector<Kernel> ordered;
  while (!ready.empty()) {
    size_t k = *ready.begin();
    ready.erase(ready.begin());
    ordered.push_back(std::move(ks[k]));
    for (size_t next : after[k])
      if (--pending[next] == 0)
        ready.insert(next);
  }
  if (ordered.size() != n) {
    std::vector<std::string> cycle;
    for (size_t k = 0; k < n; ++k)
      if (pending[k] > 0)
        cycle.push_back("k" + std::to_string(k) + "_" + std::string(kernel_kind_name(ks[k].kind)));
    throw std::logic_error("internal error: the kernels of pipeline '" + g_.name +
                           "' depend on each other in a cycle: " + join(cycle));
  }
  ks = std::move(ordered);
}

// A reduction whose result only later passes of its own row kernel read, and that is not
// returned, stays in registers: it writes nothing.
void Partitioner::keep_row_results_in_registers() {
  std::set<ValueId> read;
  for (const Kernel &k : plan_.kernels)
    read.insert(k.reads.begin(), k.reads.end());
  for (Kernel &k : plan_.kernels) {
    if (k.kind != KernelKind::Row)
      continue;
    k.stores.erase(std::remove_if(k.stores.begin(), k.stores.end(),
                                  [&](ValueId s) {
                                    return op_info(val(s).op).cls == OpClass::Reduce &&
                                           !is_output_.count(s) && !read.count(s);
                                  }),
                   k.stores.end());
  }
}

// Whether kernel `kr` computes a value it does not store for two or more of its own ops: the
// generated code computes it once per element and reads it from a register.
bool Partitioner::computes_shared_value(const Kernel &kr) const {
  for (ValueId id : kr.computes) {
    if (std::count(kr.stores.begin(), kr.stores.end(), id))
      continue;
    int readers = 0;
    for (ValueId u : users(id))
      readers += std::binary_search(kr.computes.begin(), kr.computes.end(), u) ? 1 : 0;
    if (readers > 1 && !is_column_value(val(id).type))
      return true;
  }
  return false;
}

// Kernel::per_bind: an elementwise or transpose kernel of params only. The unfused baseline
// runs every op per run, as PyTorch's eager mode does.
void Partitioner::mark_per_bind() {
  if (!fuse_)
    return;
  for (Kernel &k : plan_.kernels) {
    bool per_bind =
        (k.kind == KernelKind::Elementwise || k.kind == KernelKind::Transpose) && !k.reads.empty();
    for (ValueId r : k.reads)
      per_bind = per_bind && val(r).kind == ValueKind::Param;
    for (ValueId s : k.stores)
      per_bind = per_bind && !is_output_.count(s);
    for (ValueId c : k.computes)
      per_bind = per_bind && op_info(val(c).op).cls != OpClass::Random;
    k.per_bind = per_bind;
  }
}

// Why each stored op value is stored: the rule that decided it, else that it is returned or
// which kernels read it.
void Partitioner::explain_stores() {
  std::map<ValueId, std::vector<std::string>> readers;
  for (const Kernel &k : plan_.kernels)
    for (ValueId r : k.reads)
      readers[r].push_back(k.name);
  for (const Kernel &k : plan_.kernels)
    for (ValueId s : k.stores) {
      auto it = because_.find(s);
      plan_.stored_because[s] = it != because_.end()  ? it->second
                                : is_output_.count(s) ? "output"
                                                      : "read by " + join(readers[s]);
    }
}

std::string Partitioner::join(const std::vector<std::string> &items) {
  std::string s;
  for (const std::string &i : items)
    s += (s.empty() ? "" : ", ") + i;
  return s;
}

// An elementwise kernel that writes the partials of its value and whose value no other kernel
// reads and no caller receives summarizes it without storing it: the math needs only the
// statistics (a row sum of a gradient product, say), so the matrix never goes to memory.
void Partitioner::summarize_only_unread_values() {
  std::set<ValueId> read;
  for (const Kernel &k : plan_.kernels)
    read.insert(k.reads.begin(), k.reads.end());
  for (Kernel &k : plan_.kernels)
    if (k.kind == KernelKind::Elementwise && k.stats_of == k.anchor &&
        k.stores == std::vector<ValueId>{k.anchor} && !read.count(k.anchor) &&
        !is_output_.count(k.anchor)) {
      k.stores.clear();
      stored_[static_cast<size_t>(k.anchor)] = false;
      kernel_of_[static_cast<size_t>(k.anchor)] = -1;
      k.rules.push_back("summarized_only");
      std::sort(k.rules.begin(), k.rules.end());
    }
}

// Kernel `kr`'s computes in graph order, and from them its reads, covers and rules (the
// rewrites of what it computes). A merge of partials reads through them: a column kernel's
// statistics, a row kernel's reductions of row_partials_epilogue.
void Partitioner::describe_kernel(Kernel &kr) const {
  std::sort(kr.computes.begin(), kr.computes.end());
  std::set<ValueId> reads;
  std::set<std::string> covers, rules(kr.rules.begin(), kr.rules.end());
  for (ValueId id : kr.computes) {
    const Value &v = val(id);
    covers.insert(v.origins.begin(), v.origins.end());
    rules.insert(v.rewrites.begin(), v.rewrites.end());
    if (is_stats(v) && kr.kind == KernelKind::Column)
      continue;
    if (kr.row_partials && kr.kind == KernelKind::Row && is_row_op(v))
      continue;
    for (ValueId a : v.args)
      if (!std::binary_search(kr.computes.begin(), kr.computes.end(), a))
        reads.insert(a);
  }
  if (kr.kind == KernelKind::ColPartials)
    reads.insert(kr.stats_of);
  kr.reads.assign(reads.begin(), reads.end());
  kr.covers.assign(covers.begin(), covers.end());
  std::stable_sort(kr.covers.begin(), kr.covers.end(), by_line);
  if (computes_shared_value(kr))
    rules.insert("shared_value");
  kr.rules.assign(rules.begin(), rules.end());
}

void Partitioner::finish() {
  store_column_values();
  std::set<ValueId> stored_anywhere;
  for (Kernel &kr : plan_.kernels)
    describe_kernel(kr);
  summarize_only_unread_values();
  keep_row_results_in_registers();
  // A pass that writes a matrix (softmax, norm, row_epilogue) feeds no other pass: later
  // passes read only the rows and per-row results. Those go last, so every per-row result
  // is ready before the row is written and no register lives across a writing pass.
  for (Kernel &kr : plan_.kernels)
    std::stable_partition(kr.row_stages.begin(), kr.row_stages.end(),
                          [&](ValueId st) { return row_values_.count(st) != 0; });
  order_kernels();
  rows_into_gemm_epilogues();
  row_partials_into_gemm_epilogues();
  for (const Kernel &kr : plan_.kernels)
    stored_anywhere.insert(kr.stores.begin(), kr.stores.end());
  mark_per_bind();
  if (stats_ranks_ > 0)
    exchange_batch_stats(plan_, stats_ranks_);
  for (size_t k = 0; k < plan_.kernels.size(); ++k)
    plan_.kernels[k].name =
        "k" + std::to_string(k) + "_" + std::string(kernel_kind_name(plan_.kernels[k].kind));
  explain_stores();
  // A stored matrix keeps its own type, as PyTorch stores it; a fused plan's per-feature
  // vectors (folded constants no PyTorch op rounds) stay f32 (plan.h).
  for (ValueId s : stored_anywhere)
    if (val(s).is_op() && !is_output_.count(s)) {
      const TensorType &t = val(s).type;
      const bool narrow = !fuse_ || t.rank() >= 2;
      plan_.intermediates.push_back({s, val(s).name, {narrow ? t.dtype : DType::F32, t.shape}});
    }
}

} // namespace kfuse::plan::partitioning
