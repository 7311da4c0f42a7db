// Partitioner: row_partials_epilogue, the reductions of a row kernel over a GEMM's wide product
// reduced per column slice by the GEMM's epilogue and merged by the row kernel.
#include "compiler/plan/partitioner.h"

#include "compiler/ir/op_class.h"

#include <algorithm>

namespace kfuse::plan::partitioning {

using namespace ir;

namespace {

// Reductions whose per-slice partials merge into the row's result in one more step, each
// element costing the epilogue one add or comparison: a sum (mean: a sum over n), an extremum.
bool merges_from_partials(const Value &v) {
  const std::string_view r = op_info(v.op).reducer;
  return op_info(v.op).cls == OpClass::Reduce &&
         (r == "Sum" || r == "Mean" || r == "Max" || r == "Min");
}

// Why the partials of reduction v would cost the epilogue more than the product's round trip
// through memory, "" where they would not: the epilogue runs while the tensor cores wait.
std::string costly_partials(const Value &v) {
  const std::string_view r = op_info(v.op).reducer;
  if (r == "LogSumExp")
    return "exp";
  if (r == "Var" || r == "Std")
    return "Welford's update (a division)";
  return "";
}

} // namespace

// row_partials_epilogue: a row kernel over the matrix a GEMM kernel stores, too wide for one
// tile to hold whole rows (gemm_row_epilogue took those), whose stages are reductions of that
// matrix's rows and per-row values of their results: the GEMM's epilogue writes each
// reduction's partial per (row, column slice) and the row kernel merges them instead of reading
// the matrix, which is then stored only where it is returned or another kernel reads it. The
// partials are written once per tile after split-K's merge (each tile's epilogue runs once).
void Partitioner::row_partials_into_gemm_epilogues() {
  if (!fuse_)
    return;
  std::vector<Kernel> &ks = plan_.kernels;
  std::map<ValueId, size_t> storer;
  std::map<ValueId, int> readers; // value -> how many kernels read it
  index_kernels(storer, readers);
  for (size_t r = 0; r < ks.size(); ++r) {
    std::string why;
    const int g = partials_gemm_for(r, storer, why);
    const ValueId rows = ks[r].rows_of;
    if (g < 0) {
      if (!why.empty() && because_.count(rows))
        because_[rows] += "; its row kernel reads it whole: " + why;
      continue;
    }
    Kernel &gemm = ks[static_cast<size_t>(g)];
    --readers[rows];
    split_row_kernel(gemm, ks[r]);
    because_.erase(rows); // stored, if at all, for what another kernel or the caller reads
    if (!is_output_.count(rows) && readers[rows] == 0) {
      gemm.stores.clear();
      storer.erase(rows);
    }
  }
}

// The GEMM kernel whose epilogue can write the partials of row kernel `r`'s reductions
// (row_partials_epilogue), or -1, with the reason in `why` where only the row kernel's stages
// keep it out.
int Partitioner::partials_gemm_for(size_t r, const std::map<ValueId, size_t> &storer,
                                   std::string &why) const {
  const Kernel &row = plan_.kernels[r];
  if (row.kind != KernelKind::Row || row.row_partials)
    return -1;
  const ValueId rows = row.rows_of;
  auto it = storer.find(rows);
  const TensorType &t = val(rows).type;
  if (it == storer.end() || t.rank() != 2 || t.shape[1].is_symbolic())
    return -1;
  const size_t g = it->second;
  const Kernel &gemm = plan_.kernels[g];
  if (gemm.kind != KernelKind::Gemm || gemm.stats_of >= 0 || !gemm.row_stages.empty() ||
      gemm.stores != std::vector<ValueId>{rows})
    return -1;
  if (std::none_of(row.row_stages.begin(), row.row_stages.end(),
                   [&](ValueId st) { return op_info(val(st).op).cls == OpClass::Reduce; }))
    return -1;
  for (ValueId v : row.reads) // everything the stages read is there when the GEMM runs
    if (auto s = storer.find(v); v != rows && s != storer.end() && s->second > g)
      return -1;
  if (loads_other_matrix(row))
    return -1;
  const std::set<ValueId> stages(row.row_stages.begin(), row.row_stages.end());
  for (ValueId st : row.row_stages) {
    const Value &v = val(st);
    if (!is_row_op(v)) {
      if (v.type.shape == t.shape) {
        why = fmt::format("{} reads the row again with its per-row results", site(st));
        return -1;
      }
      continue; // a per-row value of the results (row_result): computed after the merge
    }
    if (const std::string cost = costly_partials(v); !cost.empty()) {
      why = fmt::format("{} would compute {} of every element in the GEMM's epilogue", site(st),
                        cost);
      return -1;
    }
    if (!merges_from_partials(v)) {
      why = fmt::format("{} needs whole rows", site(st));
      return -1;
    }
    for (ValueId leaf : op_leaves(st))
      if (stages.count(leaf)) {
        why = fmt::format("{} reads the row again after {}", site(st), site(leaf));
        return -1;
      }
  }
  // What moves into the epilogue runs there while the tensor cores wait: transcendental math
  // per element costs more than the product's round trip through memory.
  for (ValueId id : reductions_prologue(row))
    if (op_info(val(id).op).transcendental_calls > 0 && !is_column_value(val(id).type)) {
      why = fmt::format("{} would compute {} of every element in the GEMM's epilogue", site(id),
                        op_info(val(id).op).name);
      return -1;
    }
  return static_cast<int>(g);
}

// The values of row kernel `row` that the trees at `roots` compute, not walking into `stop`.
std::set<ValueId> Partitioner::row_trees(const Kernel &row, std::vector<ValueId> roots,
                                         const std::set<ValueId> &stop) const {
  const std::set<ValueId> in_row(row.computes.begin(), row.computes.end());
  std::set<ValueId> trees;
  while (!roots.empty()) {
    const ValueId cur = roots.back();
    roots.pop_back();
    if (!in_row.count(cur) || stop.count(cur) || !trees.insert(cur).second)
      continue;
    roots.insert(roots.end(), val(cur).args.begin(), val(cur).args.end());
  }
  return trees;
}

// The values of row kernel `row` that its reductions' operands compute: they move to the GEMM's
// epilogue (row_partials_epilogue).
std::set<ValueId> Partitioner::reductions_prologue(const Kernel &row) const {
  std::vector<ValueId> operands;
  for (ValueId st : row.row_stages)
    if (is_row_op(val(st)))
      operands.push_back(val(st).args[0]);
  return row_trees(row, operands, {});
}

// The row kernel's reductions become partials the GEMM's epilogue writes over the value it
// computes: the reductions' inputs (the row kernel's prologue) move to the GEMM kernel; the row
// kernel keeps the reductions, merged from the partials, and the per-row values after them.
void Partitioner::split_row_kernel(Kernel &gemm, Kernel &row) {
  const std::set<ValueId> prologue = reductions_prologue(row);
  std::set<ValueId> reductions;
  std::vector<ValueId> after; // the per-row values of the results
  for (ValueId st : row.row_stages)
    if (is_row_op(val(st)))
      reductions.insert(st);
    else
      after.push_back(st);
  std::set<ValueId> finalize = row_trees(row, after, reductions);
  finalize.insert(reductions.begin(), reductions.end());
  gemm.rows_of = row.rows_of;
  gemm.row_partials = true;
  gemm.row_stages.clear();
  for (ValueId st : row.row_stages)
    if (reductions.count(st))
      gemm.row_stages.push_back(st);
  gemm.computes.insert(gemm.computes.end(), prologue.begin(), prologue.end());
  std::sort(gemm.computes.begin(), gemm.computes.end());
  gemm.computes.erase(std::unique(gemm.computes.begin(), gemm.computes.end()), gemm.computes.end());
  gemm.rules.push_back("row_partials_epilogue");
  // The rewrites of the values that moved leave the row kernel's rules (describe_kernel adds
  // back those of what it still computes, and shared_value where it still applies).
  std::set<std::string> moved = {"shared_value"};
  for (ValueId id : prologue)
    moved.insert(val(id).rewrites.begin(), val(id).rewrites.end());
  row.rules.erase(std::remove_if(row.rules.begin(), row.rules.end(),
                                 [&](const std::string &rule) { return moved.count(rule) != 0; }),
                  row.rules.end());
  row.computes.assign(finalize.begin(), finalize.end());
  row.row_partials = true;
  row.rules.push_back("row_partials_epilogue");
  describe_kernel(gemm);
  describe_kernel(row);
}

} // namespace kfuse::plan::partitioning
