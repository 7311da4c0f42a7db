// Partitioner: row kernels, and the passes that join one (row_chain, row_tail, row_epilogue,
// row_result).
#include "compiler/plan/partitioner.h"

#include <fmt/format.h>

#include <algorithm>

namespace kfuse::plan::partitioning {

using namespace ir;

// Whether row op `id` runs along the last axis, so that a block per row computes it.
bool Partitioner::along_rows(ValueId id) const {
  const Value &v = val(id);
  int rank = val(v.args[0]).type.rank();
  return !v.attrs.count("dim") || v.attr("dim") == -1 || v.attr("dim") == rank - 1;
}

// The stored matrix whose rows row op `id` reads: its input, or the first stored matrix its
// inline input loads (the prologue loads any others element by element).
ValueId Partitioner::row_source(ValueId id) const {
  ValueId in = val(id).args[0];
  return stored_[static_cast<size_t>(in)] ? in : *matrix_leaves(in).begin();
}

// The row kernel over `rows` that one more pass computing `id` can join: the latest one built,
// if every value the pass reads from other kernels is stored by a kernel built before it (so
// kernels still depend on each other without a cycle). -1 if none.
int Partitioner::row_kernel_for(ValueId rows, ValueId id) const {
  auto it = row_kernel_of_.find(rows);
  if (!fuse_ || it == row_kernel_of_.end() || pass_blocker(it->second, id) >= 0)
    return -1;
  return it->second;
}

// The first value the inline tree of `id` reads that keeps a pass computing `id` out of row
// kernel `k`, or -1: one a kernel built after `k` stores, a rank-1 result of `k` itself (one
// value per row; in a matrix expression a rank-1 operand runs along the features instead, so
// the pass cannot read it from registers), or a row op's operand after its rows that `k`
// itself stores (groupnorm_backward's x: the pass reads it from memory, where other threads of
// the kernel write it with no barrier between).
ValueId Partitioner::pass_blocker(int k, ValueId id) const {
  const std::vector<ValueId> &args = val(id).args;
  auto operand_after_rows = [&](ValueId leaf) {
    return is_row_op(val(id)) && std::find(args.begin() + 1, args.end(), leaf) != args.end();
  };
  for (ValueId leaf : op_leaves(id))
    if (producer(leaf) > k || per_row_as_feature(k, leaf) ||
        (producer(leaf) == k && operand_after_rows(leaf)))
      return leaf;
  return -1;
}

bool Partitioner::per_row_as_feature(int k, ValueId leaf) const {
  return producer(leaf) == k && val(leaf).type.rank() == 1 && !is_scalar(val(leaf).type);
}

// A row op: a pass of the row kernel over the same rows (row_chain: softmax after a
// reduction, a reduction of a value computed from an earlier one), or a row kernel of its
// own. Its per-row results reach later passes in registers.
void Partitioner::place_row_op(ValueId id) {
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
bool Partitioner::place_row_tail(ValueId id) {
  auto it = tail_of_.find(id);
  if (it == tail_of_.end())
    return false;
  const ValueId norm = it->second;
  const int k = stage_kernel_.at(norm);
  if (ValueId leaf = pass_blocker(k, id); leaf >= 0) {
    because_[norm] =
        fmt::format("{} after it reads {}, which {}", site(id), site(leaf),
                    per_row_as_feature(k, leaf) ? "runs along the rows" : "a later kernel stores");
    store_in(k, norm);
    return false;
  }
  kernel(k).rules.push_back("row_tail");
  kernel(k).row_stages.push_back(id);
  place(k, id);
  return true;
}

// The row kernel that computes stored elementwise value `id` as one more pass, or -1:
//   row_epilogue  a matrix whose inline tree loads the kernel's rows, and other matrices of
//                 their shape element by element ([N, 1] results of the kernel's reductions
//                 broadcast along the row);
//   row_result    a per-row value ([N, 1] or [N]) computed from the kernel's per-row results
//                 and scalars only, written once per row.
int Partitioner::row_kernel_joining(ValueId id, std::string &rule) const {
  const TensorType &t = val(id).type;
  std::set<ValueId> full = is_column_value(t) ? std::set<ValueId>{} : matrix_leaves(id);
  for (ValueId rows : full)
    if (row_kernel_of_.count(rows)) {
      rule = "row_epilogue";
      return row_kernel_for(rows, id);
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

} // namespace kfuse::plan::partitioning
