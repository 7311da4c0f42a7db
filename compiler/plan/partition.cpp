#include "compiler/plan/partition.h"

#include "compiler/plan/partitioner.h"

#include "compiler/ir/op_class.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace kfuse::plan {

using namespace ir;

namespace partitioning {

// A value whose inline tree reaches this many ops is stored: an op of up to four operands
// (col_affine), each such a tree less one, then computes at most kMaxOpsPerKernel ops.
constexpr int64_t kMaxInlineOps = kMaxOpsPerKernel / 4;

bool is_elementwise(const Value &v) {
  return v.is_op() && class_traits(op_info(v.op).cls).computed_inline();
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
bool is_row_op(const Value &v) { return v.is_op() && class_traits(op_info(v.op).cls).row_op(); }

// For each value, the ops that read it. In the matrix view no op reads a view's argument
// through the view: its readers read that argument themselves (ir::matrix_view).
std::vector<std::vector<ValueId>> readers(const Graph &g) {
  std::vector<std::vector<ValueId>> u = g.users();
  for (std::vector<ValueId> &list : u)
    list.erase(std::remove_if(list.begin(), list.end(), [&](ValueId r) { return is_view(g[r]); }),
               list.end());
  return u;
}

Partitioner::Partitioner(const Graph &g, Mode mode, bool fuse, int stats_ranks)
    : g_(g), users_(readers(g)), fuse_(fuse), stats_ranks_(stats_ranks) {
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

Plan Partitioner::run() {
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

// Stored-or-not for every value, in graph order (args are decided before their users).
void Partitioner::classify() {
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
int64_t Partitioner::inline_ops(const Value &v, int64_t own) const {
  std::set<ValueId> args(v.args.begin(), v.args.end());
  int64_t n = own;
  for (ValueId a : args)
    n = std::min(n + inline_ops_[static_cast<size_t>(a)], kMaxOpsPerKernel);
  return n;
}

// "op@line" of a value, for the plan's reasons.
std::string Partitioner::site(ValueId id) const {
  const Value &v = val(id);
  return v.origins.empty() ? std::string(op_info(v.op).name) : v.origins.front();
}

// Why matrix value `id` cannot be computed inline by every op that reads it ("" when it
// can). Every reader recomputes it from its stored leaves; readers in one kernel compute it
// once per element (shared_value).
std::string Partitioner::not_inline_because(ValueId id) const {
  for (ValueId u : users(id)) {
    const Value &user = val(u);
    if (is_matrix_elementwise(user))
      continue;
    if (!is_row_op(user) || user.args[0] != id)
      return fmt::format("read by {}, which takes it from memory", site(u));
    if (matrix_leaves(id).empty())
      return fmt::format("the input of {}, whose rows no stored matrix of its shape holds",
                         site(u));
  }
  return "";
}

// The stored matrices of `id`'s shape that the inline tree rooted at `id` loads per element.
// [N, 1] and [1, F] operands broadcast: they are loaded per row or per column, wherever the
// tree is computed, and are not among these.
std::set<ValueId> Partitioner::matrix_leaves(ValueId id) const {
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
std::set<ValueId> Partitioner::op_leaves(ValueId id) const {
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
bool Partitioner::epilogue_frontier(ValueId cur) const {
  if (stats_dep_[static_cast<size_t>(cur)])
    return false;
  for (ValueId u : users(cur))
    if (!is_row_op(val(u)))
      return false;
  return true;
}

// gemm_epilogue: where every use of GEMM product `id` ends, or -1 with the reason in `why`.
ValueId Partitioner::epilogue_end(ValueId id, std::string &why) const {
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

void Partitioner::fuse_gemm_epilogues() {
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
ValueId Partitioner::tail_end(ValueId norm, std::string &why) const {
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
void Partitioner::fuse_row_tails() {
  for (size_t i = 0; i < g_.values.size(); ++i) {
    const ValueId id = static_cast<ValueId>(i);
    const Value &v = val(id);
    if (!v.is_op() || !class_traits(op_info(v.op).cls).normalizes_rows() || is_output_.count(id) ||
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

} // namespace partitioning

Plan partition(const Graph &g, Mode mode, bool fuse, int stats_ranks) {
  const Graph view = matrix_view(g);
  Plan p = partitioning::Partitioner(view, mode, fuse, stats_ranks).run();
  // The plan shows the user's shapes; its kernels are the view's (codegen takes the view again).
  p.graph = g;
  for (Intermediate &i : p.intermediates)
    i.type.shape = g[i.value].type.shape;
  return p;
}

} // namespace kfuse::plan
