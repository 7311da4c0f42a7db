#include "compiler/plan/partition.h"

#include "compiler/ir/verifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <stdexcept>

namespace kfuse::plan {

using namespace ir;

namespace {

// A value whose inline tree reaches this many ops is stored: an op of up to four operands
// (col_affine), each such a tree less one, then computes at most kMaxOpsPerKernel ops.
constexpr int64_t kMaxInlineOps = kMaxOpsPerKernel / 4;

bool is_elementwise(const Value &v) {
  OpClass c = op_info(v.op).cls;
  return v.is_op() && (c == OpClass::Binary || c == OpClass::Unary || c == OpClass::Random ||
                       c == OpClass::ColAffine || c == OpClass::Constant);
}

// Matrix values are computed per element, column values once per feature (plan.h).
bool is_matrix_elementwise(const Value &v) { return is_elementwise(v) && !is_column_value(v.type); }

// One element ([1], [1, 1]): read the same by every row and column.
bool is_scalar(const TensorType &t) {
  return std::all_of(t.shape.begin(), t.shape.end(),
                     [](const Dim &d) { return d == Dim::constant(1); });
}

// A view has no kernel: it is the buffer it views (compiler/ir/views.h).
bool is_view(const Value &v) { return v.is_op() && op_info(v.op).cls == OpClass::View; }

bool is_stats(const Value &v) { return v.is_op() && op_info(v.op).cls == OpClass::ColReduce; }

// Ops a row kernel is built around: one block per row reads it (after the inline prologue)
// and writes the row's result: softmax, a normalization, a reduction's one value per row, or
// a pool's windows.
bool is_row_op(const Value &v) {
  OpClass c = op_info(v.op).cls;
  return v.is_op() &&
         (c == OpClass::Row || c == OpClass::RowNorm || c == OpClass::Reduce || c == OpClass::Pool);
}

// For each value, the ops that read it. In the matrix view no op reads a view's argument
// through the view: its readers read that argument themselves (ir::matrix_view).
std::vector<std::vector<ValueId>> readers(const Graph &g) {
  std::vector<std::vector<ValueId>> u = g.users();
  for (std::vector<ValueId> &list : u)
    list.erase(std::remove_if(list.begin(), list.end(), [&](ValueId r) { return is_view(g[r]); }),
               list.end());
  return u;
}

class Partitioner {
public:
  Partitioner(const Graph &g, Mode mode, bool fuse) : g_(g), users_(readers(g)), fuse_(fuse) {
    plan_.graph = g;
    plan_.mode = mode;
    size_t n = g.values.size();
    stored_.assign(n, false);
    stats_dep_.assign(n, false);
    inline_ops_.assign(n, 0);
    kernel_of_.assign(n, -1);
    for (ValueId o : g.outputs)
      is_output_.insert(o);
  }

  Plan run() {
    classify();
    if (fuse_) {
      fuse_gemm_epilogues();
      fuse_row_tails();
    }
    build_kernels();
    separate_state_updates();
    finish();
    return std::move(plan_);
  }

private:
  const Value &val(ValueId id) const { return g_[id]; }
  const std::vector<ValueId> &users(ValueId id) const { return users_[static_cast<size_t>(id)]; }

  // Stored-or-not for every value, in graph order (args are decided before their users).
  void classify() {
    for (size_t i = 0; i < g_.values.size(); ++i) {
      ValueId id = static_cast<ValueId>(i);
      const Value &v = val(id);
      if (!v.is_op()) {
        stored_[i] = true; // declared tensors live in the caller's buffers
        continue;
      }
      if (is_view(v)) { // read by nothing in the matrix view: its readers read what it views
        inline_ops_[i] = inline_ops(v, 0);
        continue;
      }
      // Computed inline from column statistics, so only after their column kernel. The result
      // of any other op (a GEMM, a row op: even [1, F] or [N] per row) is a buffer its kernel
      // stores: readers load it, whatever its arguments depended on.
      if (is_elementwise(v))
        for (ValueId a : v.args)
          stats_dep_[i] = stats_dep_[i] || stats_dep_[static_cast<size_t>(a)] || is_stats(val(a));
      if (v.is_effect())
        continue;
      bool out = is_output_.count(id) != 0;
      const int64_t ops = inline_ops(v, 1);
      auto split = [] {
        return fmt::format("its inline tree reaches {} ops, a quarter of the {} a kernel holds",
                           kMaxInlineOps, kMaxOpsPerKernel);
      };
      if (is_matrix_elementwise(v)) {
        std::string why = !fuse_ ? "unfused plan" : out ? "output" : not_inline_because(id);
        if (why.empty() && ops >= kMaxInlineOps)
          why = split();
        stored_[i] = !why.empty();
        if (stored_[i])
          because_[id] = why;
      } else if (is_elementwise(v) || is_stats(v)) {
        // Column values: inline where read, stored where a kernel needs a buffer.
        bool needs_buffer = out;
        for (ValueId u : users(id))
          needs_buffer =
              needs_buffer || (!is_elementwise(val(u)) && !val(u).is_effect() && !is_stats(val(u)));
        stored_[i] = needs_buffer || stats_dep_[i] || is_stats(v);
        if (!stored_[i] && ops >= kMaxInlineOps) {
          stored_[i] = true;
          because_[id] = split();
        }
      } else {
        stored_[i] = true; // GEMM, row op, stats results: kernels of their own
      }
      inline_ops_[i] = stored_[i] ? 0 : ops;
    }
  }

  // An upper bound on the ops of the inline tree of `v` (`own` for v itself, and each inline
  // argument's count; a value two of them share counts twice), saturating at kMaxOpsPerKernel.
  int64_t inline_ops(const Value &v, int64_t own) const {
    std::set<ValueId> args(v.args.begin(), v.args.end());
    int64_t n = own;
    for (ValueId a : args)
      n = std::min(n + inline_ops_[static_cast<size_t>(a)], kMaxOpsPerKernel);
    return n;
  }

  // "op@line" of a value, for the plan's reasons.
  std::string site(ValueId id) const {
    const Value &v = val(id);
    return v.origins.empty() ? std::string(op_info(v.op).name) : v.origins.front();
  }

  // Why matrix value `id` cannot be computed inline by every op that reads it ("" when it
  // can). Every reader recomputes it from its stored leaves; readers in one kernel compute it
  // once per element (shared_value).
  std::string not_inline_because(ValueId id) const {
    for (ValueId u : users(id)) {
      const Value &user = val(u);
      if (is_matrix_elementwise(user))
        continue;
      if (!is_row_op(user) || user.args[0] != id)
        return fmt::format("read by {}, which takes it from memory", site(u));
      if (matrix_leaves(id).size() != 1)
        return fmt::format("the input of {}, whose prologue loads one stored matrix", site(u));
    }
    return "";
  }

  enum class Walk { Skip, Leaf, Descend };

  // The leaves of the inline tree rooted at `id`: `step` says of each argument whether it
  // is skipped, a leaf, or inline (walked into). Iterative and each value visited once:
  // chains are thousands of ops long and values are shared.
  template <class Step> std::set<ValueId> leaves(ValueId id, Step step) const {
    std::set<ValueId> found, seen;
    std::vector<ValueId> todo = {id};
    while (!todo.empty()) {
      ValueId cur = todo.back();
      todo.pop_back();
      for (ValueId a : val(cur).args) {
        if (!seen.insert(a).second)
          continue;
        Walk w = step(a);
        if (w == Walk::Leaf)
          found.insert(a);
        else if (w == Walk::Descend)
          todo.push_back(a);
      }
    }
    return found;
  }

  // The stored matrices of `id`'s shape that the inline tree rooted at `id` loads per element.
  // [N, 1] and [1, F] operands broadcast: they are loaded per row or per column, wherever the
  // tree is computed, and are not among these.
  std::set<ValueId> matrix_leaves(ValueId id) const {
    std::set<ValueId> found = leaves(id, [&](ValueId a) {
      const Value &arg = val(a);
      if (is_column_value(arg.type))
        return Walk::Skip;
      return stored_[static_cast<size_t>(a)] || !is_matrix_elementwise(arg) ? Walk::Leaf
                                                                            : Walk::Descend;
    });
    for (auto it = found.begin(); it != found.end();)
      it = val(*it).type.shape == val(id).type.shape ? std::next(it) : found.erase(it);
    return found;
  }

  // Every value computed by another kernel that the inline tree rooted at `id` reads.
  std::set<ValueId> op_leaves(ValueId id) const {
    return leaves(id, [&](ValueId a) {
      if (!val(a).is_op())
        return Walk::Skip;
      return stored_[static_cast<size_t>(a)] ? Walk::Leaf : Walk::Descend;
    });
  }

  // Whether elementwise value `cur` of a GEMM product, read by row ops, is computed in the
  // GEMM's epilogue and stored for them rather than recomputed in their kernel's prologue:
  // the epilogue evaluates per-column constants (a folded batchnorm: five loads and a square
  // root) once per column of a tile, a row kernel's prologue once per element. Not where it
  // needs column statistics of the product (they exist only after the GEMM) or has readers
  // other than row ops (they would read it from memory).
  bool epilogue_frontier(ValueId cur) const {
    if (stats_dep_[static_cast<size_t>(cur)])
      return false;
    for (ValueId u : users(cur))
      if (!is_row_op(val(u)))
        return false;
    return true;
  }

  // The one stored value in which every use of `id` ends, through elementwise ops computed
  // inline (a DAG: values used several times are computed once per element), or -1 with the
  // reason in `why`. `other(cur, u, why)` judges a use of `cur` by `u`, which is no such op:
  // true makes `cur` an end, false fails (having set `why`). `storer` stores the end.
  template <class Other>
  ValueId uses_end(ValueId id, Other other, const char *storer, std::string &why) const {
    std::set<ValueId> ends, seen;
    std::vector<ValueId> todo = {id};
    while (!todo.empty()) {
      ValueId cur = todo.back();
      todo.pop_back();
      for (ValueId u : users(cur)) {
        if (!seen.insert(u).second)
          continue;
        if (!is_matrix_elementwise(val(u))) {
          if (!other(cur, u, why))
            return -1;
          ends.insert(cur);
        } else if (stored_[static_cast<size_t>(u)]) {
          ends.insert(u);
        } else {
          todo.push_back(u);
        }
      }
    }
    if (ends.size() != 1) {
      why = fmt::format("its uses end in {} stored values; {} stores one", ends.size(), storer);
      return -1;
    }
    return *ends.begin();
  }

  // gemm_epilogue: where every use of GEMM product `id` ends, or -1 with the reason in `why`.
  ValueId epilogue_end(ValueId id, std::string &why) const {
    auto other = [&](ValueId cur, ValueId u, std::string &reason) {
      if (cur != id && is_row_op(val(u)) && epilogue_frontier(cur))
        return true;
      reason = is_row_op(val(u)) ? fmt::format("read by {}, which needs whole rows: the product "
                                               "crosses a reduction",
                                               site(u))
                                 : fmt::format("read by {}, which takes it from memory", site(u));
      return false;
    };
    return uses_end(id, other, "an epilogue", why);
  }

  void fuse_gemm_epilogues() {
    for (size_t i = 0; i < g_.values.size(); ++i) {
      ValueId id = static_cast<ValueId>(i);
      if (!val(id).is_op() || op_info(val(id).op).cls != OpClass::Gemm)
        continue;
      std::string why = is_output_.count(id) ? "output" : "";
      ValueId end = why.empty() ? epilogue_end(id, why) : -1;
      if (end < 0) {
        because_[id] = why;
        continue;
      }
      // Two GEMMs whose uses end in one value (silu(g) * u): the later one computes it, reading
      // the earlier product, which a kernel before it stores.
      if (auto it = epilogue_of_.find(end); it != epilogue_of_.end()) {
        stored_[static_cast<size_t>(it->second)] = true;
        because_[it->second] = fmt::format("its uses end in the epilogue of {}", site(id));
      }
      stored_[i] = false;
      if (!stored_[static_cast<size_t>(end)]) { // a value the row ops after it read
        stored_[static_cast<size_t>(end)] = true;
        because_[end] =
            fmt::format("computed in the epilogue of {} for the row kernel reading it", site(id));
      }
      epilogue_of_[end] = id;
    }
  }

  // row_tail: where every use of softmax or normalization `norm`'s result ends, a value that
  // reads no other matrix of its size; or -1 with the reason in `why`.
  ValueId tail_end(ValueId norm, std::string &why) const {
    auto other = [&](ValueId, ValueId u, std::string &reason) {
      reason = fmt::format("read by {}, which takes it from memory", site(u));
      return false;
    };
    const ValueId end = uses_end(norm, other, "its pass", why);
    if (end >= 0 && matrix_leaves(end) != std::set<ValueId>{norm}) {
      why = fmt::format("{} reads another matrix of its size", site(end));
      return -1;
    }
    return end;
  }

  // row_tail: a softmax or normalization whose uses end in one stored elementwise value computes
  // that value in its pass (place_elementwise) and is not stored itself.
  void fuse_row_tails() {
    for (size_t i = 0; i < g_.values.size(); ++i) {
      const ValueId id = static_cast<ValueId>(i);
      const Value &v = val(id);
      const OpClass cls = op_info(v.op).cls;
      if (!v.is_op() || (cls != OpClass::RowNorm && cls != OpClass::Row) || is_output_.count(id) ||
          is_column_value(v.type) || !along_rows(id))
        continue;
      std::string why;
      const ValueId end = tail_end(id, why);
      if (end < 0) {
        because_[id] = why;
        continue;
      }
      stored_[i] = false;
      tail_of_[end] = id;
    }
  }

  int new_kernel(KernelKind kind, ValueId anchor) {
    Kernel k;
    k.kind = kind;
    k.anchor = anchor;
    plan_.kernels.push_back(std::move(k));
    computed_in_.emplace_back();
    return static_cast<int>(plan_.kernels.size() - 1);
  }

  Kernel &kernel(int index) { return plan_.kernels.at(static_cast<size_t>(index)); }
  const Kernel &kernel(int index) const { return plan_.kernels.at(static_cast<size_t>(index)); }

  // Adds `id` alone to kernel `k`'s computes.
  void compute(int k, ValueId id) {
    if (computed_in_[static_cast<size_t>(k)].insert(id).second)
      kernel(k).computes.push_back(id);
  }

  // Adds `id` and the inline values it reads (transitively) to kernel `k`, each once.
  void add_tree(int k, ValueId id) {
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
  int producer(ValueId id) const { return kernel_of_[static_cast<size_t>(id)]; }

  // Latest column kernel among the statistics `id` depends on, or -1 (a column kernel of its
  // own) when none or when the inline tree of `id` reads a value a later kernel stores (a
  // reduction over the rows, say): every kernel reads only what kernels built before it store,
  // the order row_kernel_for() relies on to join earlier kernels without a cycle.
  int column_kernel_for(ValueId id) const {
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

  // The column kernel merging partials of matrix `m`, creating partials where needed.
  int column_kernel_of(ValueId m) {
    auto it = column_of_.find(m);
    if (it != column_of_.end())
      return it->second;
    int p = producer(m);
    if (p >= 0 && kernel(p).kind == KernelKind::Gemm && kernel(p).stats_of < 0) {
      kernel(p).stats_of = m;
      kernel(p).rules.push_back("stats_epilogue");
    } else {
      int cp = new_kernel(KernelKind::ColPartials, m);
      kernel(cp).stats_of = m;
    }
    int c = new_kernel(KernelKind::Column, -1);
    kernel(c).stats_of = m;
    kernel(c).rules.push_back("column_finalize");
    plan_.partials.push_back(m);
    column_of_[m] = c;
    return c;
  }

  void place(int k, ValueId id) {
    add_tree(k, id);
    if (stored_[static_cast<size_t>(id)]) {
      kernel(k).stores.push_back(id);
      kernel_of_[static_cast<size_t>(id)] = k;
    }
  }

  void build_kernels() {
    for (size_t i = 0; i < g_.values.size(); ++i) {
      ValueId id = static_cast<ValueId>(i);
      const Value &v = val(id);
      if (!v.is_op() || is_view(v))
        continue;
      OpClass cls = op_info(v.op).cls;
      if (cls == OpClass::Gemm) {
        int k = new_kernel(KernelKind::Gemm, id);
        gemm_kernel_[id] = k;
        compute(k, id);
        if (stored_[i]) {
          kernel(k).stores.push_back(id);
          kernel_of_[i] = k;
        }
      } else if (is_stats(v)) {
        int c = column_kernel_of(v.args[0]);
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

  // Whether row op `id` runs along the last axis, so that a block per row computes it.
  bool along_rows(ValueId id) const {
    const Value &v = val(id);
    int rank = val(v.args[0]).type.rank();
    return !v.attrs.count("dim") || v.attr("dim") == -1 || v.attr("dim") == rank - 1;
  }

  // The stored matrix whose rows row op `id` reads: its input, or the one stored matrix its
  // inline input loads (not_inline_because() keeps it at one).
  ValueId row_source(ValueId id) const {
    ValueId in = val(id).args[0];
    return stored_[static_cast<size_t>(in)] ? in : *matrix_leaves(in).begin();
  }

  // The row kernel over `rows` that one more pass computing `id` can join: the latest one built,
  // if every value the pass reads from other kernels is stored by a kernel built before it (so
  // kernels still depend on each other without a cycle). -1 if none.
  int row_kernel_for(ValueId rows, ValueId id) const {
    auto it = row_kernel_of_.find(rows);
    if (!fuse_ || it == row_kernel_of_.end() || pass_blocker(it->second, id) >= 0)
      return -1;
    return it->second;
  }

  // The first value the inline tree of `id` reads that keeps a pass computing `id` out of row
  // kernel `k`, or -1: one a kernel built after `k` stores, or a rank-1 result of `k` itself (one
  // value per row; in a matrix expression a rank-1 operand runs along the features instead, so
  // the pass cannot read it from registers).
  ValueId pass_blocker(int k, ValueId id) const {
    for (ValueId leaf : op_leaves(id))
      if (producer(leaf) > k || per_row_as_feature(k, leaf))
        return leaf;
    return -1;
  }

  bool per_row_as_feature(int k, ValueId leaf) const {
    return producer(leaf) == k && val(leaf).type.rank() == 1 && !is_scalar(val(leaf).type);
  }

  // Stores `id` in kernel `k`, which computes it.
  void store_in(int k, ValueId id) {
    stored_[static_cast<size_t>(id)] = true;
    kernel(k).stores.push_back(id);
    kernel_of_[static_cast<size_t>(id)] = k;
  }

  // A row op: a pass of the row kernel over the same rows (row_chain: softmax after a
  // reduction, a reduction of a value computed from an earlier one), or a row kernel of its
  // own. Its per-row results reach later passes in registers.
  void place_row_op(ValueId id) {
    ValueId rows = row_source(id);
    int k = along_rows(id) ? row_kernel_for(rows, id) : -1;
    if (k >= 0) {
      kernel(k).rules.push_back("row_chain");
    } else {
      k = new_kernel(KernelKind::Row, id);
      kernel(k).rules.push_back("row_prologue");
      kernel(k).rows_of = rows;
      if (along_rows(id))
        row_kernel_of_[rows] = k;
    }
    kernel(k).row_stages.push_back(id);
    if (op_info(val(id).op).cls == OpClass::Reduce && along_rows(id))
      row_values_.insert(id);
    stage_kernel_[id] = k;
    place(k, id);
  }

  // row_tail's value joins the kernel of its normalization, unless it reads a value a later
  // kernel stores, or a per-row result of that kernel as a feature vector: the normalization
  // is then stored and the value placed as any other.
  bool place_row_tail(ValueId id) {
    auto it = tail_of_.find(id);
    if (it == tail_of_.end())
      return false;
    const ValueId norm = it->second;
    const int k = stage_kernel_.at(norm);
    if (ValueId leaf = pass_blocker(k, id); leaf >= 0) {
      because_[norm] = fmt::format("{} after it reads {}, which {}", site(id), site(leaf),
                                   per_row_as_feature(k, leaf) ? "runs along the rows"
                                                               : "a later kernel stores");
      store_in(k, norm);
      return false;
    }
    kernel(k).rules.push_back("row_tail");
    kernel(k).row_stages.push_back(id);
    place(k, id);
    return true;
  }

  // The row kernel that computes stored elementwise value `id` as one more pass, or -1:
  //   row_epilogue  a matrix whose inline tree loads the kernel's rows and no other matrix
  //                 ([N, 1] results of the kernel's reductions broadcast along the row);
  //   row_result    a per-row value ([N, 1] or [N]) computed from the kernel's per-row results
  //                 and scalars only, written once per row.
  int row_kernel_joining(ValueId id, std::string &rule) const {
    const TensorType &t = val(id).type;
    std::set<ValueId> full = is_column_value(t) ? std::set<ValueId>{} : matrix_leaves(id);
    if (full.size() == 1 && row_kernel_of_.count(*full.begin())) {
      rule = "row_epilogue";
      return row_kernel_for(*full.begin(), id);
    }
    int k = -1;
    bool scalar_only = true;
    std::set<ValueId> all = leaves(id, [&](ValueId a) {
      return val(a).is_op() && !stored_[static_cast<size_t>(a)] ? Walk::Descend : Walk::Leaf;
    });
    for (ValueId leaf : all) {
      int p = producer(leaf);
      bool scalar = is_scalar(val(leaf).type);
      if (!scalar && row_values_.count(leaf) && (k < 0 || k == p))
        k = p;
      else if (!scalar)
        scalar_only = false;
    }
    for (ValueId leaf : all)
      scalar_only = scalar_only && producer(leaf) <= k; // built before it: no cycle
    if (k < 0 || !scalar_only || t.rank() == 0 || (t.rank() == 2 && t.shape[1] != Dim::constant(1)))
      return -1;
    const TensorType &rows = val(kernel(k).rows_of).type;
    if (rows.rank() != 2 || t.shape[0] != rows.shape[0] || !row_kernel_of_.count(kernel(k).rows_of))
      return -1;
    rule = "row_result";
    return k;
  }

  // A stored elementwise value: the end of a GEMM's epilogue chain, a pass of a row kernel, or
  // a kernel of its own.
  void place_elementwise(ValueId id) {
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

  // Column values a column kernel computes are stored when another kernel reads them or
  // they are returned; only now, with every kernel built, are all readers known.
  void store_column_values() {
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
  void separate_state_updates() {
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
  bool state_read_elsewhere(ValueId e, size_t c) const {
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
  void order_kernels() {
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
          cycle.push_back("k" + std::to_string(k) + "_" +
                          std::string(kernel_kind_name(ks[k].kind)));
      throw std::logic_error("internal error: the kernels of pipeline '" + g_.name +
                             "' depend on each other in a cycle: " + join(cycle));
    }
    ks = std::move(ordered);
  }

  // gemm_row_epilogue: a row kernel over the matrix a GEMM kernel stores, where one tile holds
  // whole rows (at most kRowEpilogueCols features), runs in that GEMM's epilogue: the tile is
  // staged in shared memory and lanes of a warp per row run the row kernel's passes over it, so
  // the matrix is stored only where it is returned or another kernel reads it. Not where the GEMM
  // writes column statistics, nor where the row kernel reads a value a kernel between the two
  // stores (train-mode batchnorm's normalization needs the whole batch's statistics first).
  void rows_into_gemm_epilogues() {
    if (!fuse_)
      return;
    std::vector<Kernel> &ks = plan_.kernels;
    // Kept up to date as row kernels join GEMMs, and merged kernels removed only at the end (the
    // indices keep the kernels' order), so that a chain of thousands of kernels stays linear.
    std::map<ValueId, size_t> storer;
    std::map<ValueId, int> readers; // value -> how many kernels read it
    for (size_t k = 0; k < ks.size(); ++k) {
      for (ValueId s : ks[k].stores)
        storer[s] = k;
      for (ValueId v : ks[k].reads)
        ++readers[v];
    }
    std::vector<bool> merged(ks.size(), false);
    for (size_t r = 0; r < ks.size(); ++r) {
      const int g = epilogue_gemm_for(r, storer);
      if (g < 0)
        continue;
      Kernel row = std::move(ks[r]);
      merged[r] = true;
      Kernel &gemm = ks[static_cast<size_t>(g)];
      for (ValueId v : row.reads)
        --readers[v];
      if (!is_output_.count(row.rows_of) && readers[row.rows_of] == 0) {
        gemm.stores.clear();
        storer.erase(row.rows_of);
      }
      for (ValueId s : row.stores)
        storer[s] = static_cast<size_t>(g);
      for (ValueId v : row.reads)
        if (v != row.rows_of && !std::count(gemm.reads.begin(), gemm.reads.end(), v))
          ++readers[v];
      merge_row_kernel(gemm, std::move(row));
    }
    size_t kept = 0;
    for (size_t k = 0; k < ks.size(); ++k) {
      if (merged[k])
        continue;
      if (kept != k)
        ks[kept] = std::move(ks[k]);
      ++kept;
    }
    ks.resize(kept);
  }

  // The GEMM kernel whose epilogue row kernel `r` can run in (gemm_row_epilogue), or -1.
  int epilogue_gemm_for(size_t r, const std::map<ValueId, size_t> &storer) const {
    const Kernel &row = plan_.kernels[r];
    if (row.kind != KernelKind::Row)
      return -1;
    const ValueId rows = row.rows_of;
    auto it = storer.find(rows);
    const TensorType &t = val(rows).type;
    if (it == storer.end() || t.rank() != 2 || t.shape[1].is_symbolic() ||
        t.shape[1].value > kRowEpilogueCols)
      return -1;
    const size_t g = it->second;
    const Kernel &gemm = plan_.kernels[g];
    if (gemm.kind != KernelKind::Gemm || gemm.stats_of >= 0 || !gemm.row_stages.empty() ||
        gemm.stores != std::vector<ValueId>{rows})
      return -1;
    for (ValueId v : row.reads) // everything the row kernel reads is there when the GEMM runs
      if (auto s = storer.find(v); v != rows && s != storer.end() && s->second > g)
        return -1;
    return static_cast<int>(g);
  }

  // The row kernel's passes, values, reads and provenance join the GEMM kernel's.
  static void merge_row_kernel(Kernel &gemm, Kernel row) {
    gemm.rows_of = row.rows_of;
    gemm.row_stages = row.row_stages;
    // An inline value both kernels computed (each recomputes what it reads from stored leaves)
    // is computed once by the merged kernel.
    gemm.computes.insert(gemm.computes.end(), row.computes.begin(), row.computes.end());
    std::sort(gemm.computes.begin(), gemm.computes.end());
    gemm.computes.erase(std::unique(gemm.computes.begin(), gemm.computes.end()),
                        gemm.computes.end());
    gemm.stores.insert(gemm.stores.end(), row.stores.begin(), row.stores.end());
    std::set<ValueId> reads(gemm.reads.begin(), gemm.reads.end());
    for (ValueId v : row.reads)
      if (v != row.rows_of)
        reads.insert(v);
    gemm.reads.assign(reads.begin(), reads.end());
    gemm.covers.insert(gemm.covers.end(), row.covers.begin(), row.covers.end());
    std::stable_sort(gemm.covers.begin(), gemm.covers.end(), by_line);
    std::set<std::string> rules(gemm.rules.begin(), gemm.rules.end());
    rules.insert(row.rules.begin(), row.rules.end());
    rules.insert("gemm_row_epilogue");
    gemm.rules.assign(rules.begin(), rules.end());
  }

  static bool by_line(const std::string &a, const std::string &b) {
    return std::stoi(a.substr(a.find('@') + 1)) < std::stoi(b.substr(b.find('@') + 1));
  }

  // A reduction whose result only later passes of its own row kernel read, and that is not
  // returned, stays in registers: it writes nothing.
  void keep_row_results_in_registers() {
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
  bool computes_shared_value(const Kernel &kr) const {
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

  // Kernel::per_bind: an elementwise kernel of params only. The unfused baseline runs every op
  // per run, as PyTorch's eager mode does.
  void mark_per_bind() {
    if (!fuse_)
      return;
    for (Kernel &k : plan_.kernels) {
      bool per_bind = k.kind == KernelKind::Elementwise && !k.reads.empty();
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
  void explain_stores() {
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

  static std::string join(const std::vector<std::string> &items) {
    std::string s;
    for (const std::string &i : items)
      s += (s.empty() ? "" : ", ") + i;
    return s;
  }

  void finish() {
    store_column_values();
    std::set<ValueId> stored_anywhere;
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      Kernel &kr = plan_.kernels[k];
      std::sort(kr.computes.begin(), kr.computes.end());
      std::set<ValueId> reads;
      std::set<std::string> covers, rules(kr.rules.begin(), kr.rules.end());
      for (ValueId id : kr.computes) {
        const Value &v = val(id);
        covers.insert(v.origins.begin(), v.origins.end());
        rules.insert(v.rewrites.begin(), v.rewrites.end());
        if (is_stats(v) && kr.kind == KernelKind::Column)
          continue; // read through the partials
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
    keep_row_results_in_registers();
    // A pass that writes a matrix (softmax, norm, row_epilogue) feeds no other pass: later
    // passes read only the rows and per-row results. Those go last, so every per-row result
    // is ready before the row is written and no register lives across a writing pass.
    for (Kernel &kr : plan_.kernels)
      std::stable_partition(kr.row_stages.begin(), kr.row_stages.end(),
                            [&](ValueId st) { return row_values_.count(st) != 0; });
    order_kernels();
    rows_into_gemm_epilogues();
    for (const Kernel &kr : plan_.kernels)
      stored_anywhere.insert(kr.stores.begin(), kr.stores.end());
    mark_per_bind();
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

  const Graph &g_;
  std::vector<std::vector<ValueId>> users_;
  bool fuse_;
  Plan plan_;
  std::set<ValueId> is_output_;
  std::vector<bool> stored_;
  std::vector<bool> stats_dep_;
  std::vector<int64_t> inline_ops_; // inline_ops() of each value not stored, 0 where stored
  std::vector<int> kernel_of_;
  std::map<ValueId, ValueId> epilogue_of_; // chain end -> GEMM
  std::map<ValueId, std::string> because_; // stored value -> why, where the rule decided
  std::map<ValueId, int> gemm_kernel_;
  std::map<ValueId, int> column_of_;
  std::map<ValueId, int> row_kernel_of_; // stored matrix -> the latest row kernel over its rows
  std::map<ValueId, int> stage_kernel_;  // row op -> the row kernel whose pass computes it
  std::map<ValueId, ValueId> tail_of_;   // row_tail's stored value -> its normalization
  std::set<ValueId> row_values_; // per-row results of row kernels: reductions and row_result
  std::vector<std::set<ValueId>> computed_in_; // per kernel: the values in its computes
};

} // namespace

Plan partition(const Graph &g, Mode mode, bool fuse) {
  const Graph view = matrix_view(g);
  Plan p = Partitioner(view, mode, fuse).run();
  // The plan shows the user's shapes; its kernels are the view's (codegen takes the view again).
  p.graph = g;
  for (Intermediate &i : p.intermediates)
    i.type.shape = g[i.value].type.shape;
  return p;
}

} // namespace kfuse::plan
