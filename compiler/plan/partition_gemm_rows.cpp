// Partitioner: gemm_row_epilogue, a row kernel merged into the GEMM kernel whose product it reads.
#include "compiler/plan/partitioner.h"

#include <algorithm>

namespace kfuse::plan::partitioning {

using namespace ir;

// gemm_row_epilogue: a row kernel over the matrix a GEMM kernel stores, where one tile holds
// whole rows (at most kRowEpilogueCols features), runs in that GEMM's epilogue: the tile is
// staged in shared memory and lanes of a warp per row run the row kernel's passes over it, so
// the matrix is stored only where it is returned or another kernel reads it. Not where the GEMM
// writes column statistics, nor where the row kernel reads a value a kernel between the two
// stores (train-mode batchnorm's normalization needs the whole batch's statistics first).
void Partitioner::rows_into_gemm_epilogues() {
  if (!fuse_)
    return;
  std::vector<Kernel> &ks = plan_.kernels;
  // Kept up to date as row kernels join GEMMs, and merged kernels removed only at the end (the
  // indices keep the kernels' order), so that a chain of thousands of kernels stays linear.
  std::map<ValueId, size_t> storer;
  std::map<ValueId, int> readers; // value -> how many kernels read it
  index_kernels(storer, readers);
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

// The kernel that stores each value, and how many kernels read each.
void Partitioner::index_kernels(std::map<ValueId, size_t> &storer,
                                std::map<ValueId, int> &readers) const {
  for (size_t k = 0; k < plan_.kernels.size(); ++k) {
    for (ValueId s : plan_.kernels[k].stores)
      storer[s] = k;
    for (ValueId v : plan_.kernels[k].reads)
      ++readers[v];
  }
}

// The GEMM kernel whose epilogue row kernel `r` can run in (gemm_row_epilogue), or -1.
int Partitioner::epilogue_gemm_for(size_t r, const std::map<ValueId, size_t> &storer) const {
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
  if (loads_other_matrix(row))
    return -1;
  // A pass reading the product from memory besides its staged rows (groupnorm_backward(h, h))
  // would read what the epilogue is storing.
  for (ValueId st : row.row_stages)
    if (is_row_op(val(st)) && std::count(val(st).args.begin() + 1, val(st).args.end(), rows))
      return -1;
  return static_cast<int>(g);
}

// Whether a pass of row kernel `row` loads a matrix of its rows' shape besides its rows element
// by element (a row op's input or an elementwise stage reading one): the GEMM's epilogue stages
// only the product's rows. A row op's own operands after its rows (groupnorm_backward's x) are
// read from memory by its template, which the epilogue does too.
bool Partitioner::loads_other_matrix(const Kernel &row) const {
  std::set<ValueId> operands; // read by a row op's template, not by a functor
  for (ValueId st : row.row_stages)
    if (is_row_op(val(st)))
      operands.insert(val(st).args.begin() + 1, val(st).args.end());
  return std::any_of(row.reads.begin(), row.reads.end(), [&](ValueId v) {
    return v != row.rows_of && !operands.count(v) &&
           val(v).type.shape == val(row.rows_of).type.shape;
  });
}

// The row kernel's passes, values, reads and provenance join the GEMM kernel's.
void Partitioner::merge_row_kernel(Kernel &gemm, Kernel row) {
  gemm.rows_of = row.rows_of;
  gemm.row_stages = row.row_stages;
  // An inline value both kernels computed (each recomputes what it reads from stored leaves)
  // is computed once by the merged kernel.
  gemm.computes.insert(gemm.computes.end(), row.computes.begin(), row.computes.end());
  std::sort(gemm.computes.begin(), gemm.computes.end());
  gemm.computes.erase(std::unique(gemm.computes.begin(), gemm.computes.end()), gemm.computes.end());
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

bool Partitioner::by_line(const std::string &a, const std::string &b) {
  return std::stoi(a.substr(a.find('@') + 1)) < std::stoi(b.substr(b.find('@') + 1));
}

} // namespace kfuse::plan::partitioning
