// The partitioner behind partition() (partition.h states its rules), one class whose steps live
// in the files named for them:
//   partition.cpp            which values are stored and why (classification, gemm_epilogue and
//                            row_tail decisions)
//   partition_kernels.cpp    kernels formed in graph order: GEMM, column and elementwise kernels
//   partition_rows.cpp       row kernels and the passes that join them
//   partition_gemm_rows.cpp  row kernels merged into the epilogue of the GEMM they read
//   partition_row_partials.cpp  row reductions reduced per tile by the GEMM's epilogue
//   partition_finish.cpp     reads, stores, order, names and reasons of the finished plan
// Internal to compiler/plan: nothing outside those files includes it.
#pragma once

#include "compiler/plan/partition.h"

#include <fmt/format.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kfuse::plan::partitioning {

// Op classes as the partitioner sees them (partition.cpp).
bool is_elementwise(const ir::Value &v);
bool is_matrix_elementwise(const ir::Value &v);
bool is_scalar(const ir::TensorType &t);
bool is_view(const ir::Value &v);
bool is_stats(const ir::Value &v);
bool is_row_op(const ir::Value &v);

class Partitioner {
public:
  Partitioner(const ir::Graph &g, ir::Mode mode, bool fuse, int stats_ranks);
  Plan run();

private:
  const ir::Value &val(ir::ValueId id) const { return g_[id]; }
  const std::vector<ir::ValueId> &users(ir::ValueId id) const {
    return users_[static_cast<size_t>(id)];
  }

  // Stored or not, and why (partition.cpp).
  void classify();
  int64_t inline_ops(const ir::Value &v, int64_t own) const;
  std::string site(ir::ValueId id) const;
  std::string not_inline_because(ir::ValueId id) const;
  std::set<ir::ValueId> matrix_leaves(ir::ValueId id) const;
  std::set<ir::ValueId> op_leaves(ir::ValueId id) const;
  bool epilogue_frontier(ir::ValueId cur) const;
  ir::ValueId epilogue_end(ir::ValueId id, std::string &why) const;
  void fuse_gemm_epilogues();
  ir::ValueId tail_end(ir::ValueId norm, std::string &why) const;
  void fuse_row_tails();

  enum class Walk { Skip, Leaf, Descend };

  // The leaves of the inline tree rooted at `id`: `step` says of each argument whether it
  // is skipped, a leaf, or inline (walked into). Iterative and each value visited once:
  // chains are thousands of ops long and values are shared.
  template <class Step> std::set<ir::ValueId> leaves(ir::ValueId id, Step step) const {
    std::set<ir::ValueId> found, seen;
    std::vector<ir::ValueId> todo = {id};
    while (!todo.empty()) {
      ir::ValueId cur = todo.back();
      todo.pop_back();
      for (ir::ValueId a : val(cur).args) {
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

  // The one stored value in which every use of `id` ends, through elementwise ops computed
  // inline (a DAG: values used several times are computed once per element), or -1 with the
  // reason in `why`. `other(cur, u, why)` judges a use of `cur` by `u`, which is no such op:
  // true makes `cur` an end, false fails (having set `why`). `storer` stores the end.
  template <class Other>
  ir::ValueId uses_end(ir::ValueId id, Other other, const char *storer, std::string &why) const {
    std::set<ir::ValueId> ends, seen;
    std::vector<ir::ValueId> todo = {id};
    while (!todo.empty()) {
      ir::ValueId cur = todo.back();
      todo.pop_back();
      for (ir::ValueId u : users(cur)) {
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

  // Kernels formed in graph order (partition_kernels.cpp).
  int new_kernel(KernelKind kind, ir::ValueId anchor);
  Kernel &kernel(int index) { return plan_.kernels.at(static_cast<size_t>(index)); }
  const Kernel &kernel(int index) const { return plan_.kernels.at(static_cast<size_t>(index)); }
  void compute(int k, ir::ValueId id);
  void add_tree(int k, ir::ValueId id);
  int producer(ir::ValueId id) const;
  int column_kernel_for(ir::ValueId id) const;
  int column_kernel_of(ir::ValueId m, ir::ValueId stat);
  void place(int k, ir::ValueId id);
  void build_kernels();
  void store_in(int k, ir::ValueId id);
  void place_elementwise(ir::ValueId id);

  // Row kernels (partition_rows.cpp).
  bool along_rows(ir::ValueId id) const;
  ir::ValueId row_source(ir::ValueId id) const;
  int row_kernel_for(ir::ValueId rows, ir::ValueId id) const;
  ir::ValueId pass_blocker(int k, ir::ValueId id) const;
  bool per_row_as_feature(int k, ir::ValueId leaf) const;
  void place_row_op(ir::ValueId id);
  bool place_row_tail(ir::ValueId id);
  int row_kernel_joining(ir::ValueId id, std::string &rule) const;

  // Row kernels in GEMM epilogues (partition_gemm_rows.cpp).
  void rows_into_gemm_epilogues();
  int epilogue_gemm_for(size_t r, const std::map<ir::ValueId, size_t> &storer) const;
  bool loads_other_matrix(const Kernel &row) const;
  void index_kernels(std::map<ir::ValueId, size_t> &storer,
                     std::map<ir::ValueId, int> &readers) const;
  static void merge_row_kernel(Kernel &gemm, Kernel row);
  static bool by_line(const std::string &a, const std::string &b);

  // Row reductions as partials of GEMM epilogues (partition_row_partials.cpp).
  void row_partials_into_gemm_epilogues();
  int partials_gemm_for(size_t r, const std::map<ir::ValueId, size_t> &storer,
                        std::string &why) const;
  std::set<ir::ValueId> row_trees(const Kernel &row, std::vector<ir::ValueId> roots,
                                  const std::set<ir::ValueId> &stop) const;
  std::set<ir::ValueId> reductions_prologue(const Kernel &row) const;
  void split_row_kernel(Kernel &gemm, Kernel &row);

  // The finished plan (partition_finish.cpp).
  void store_column_values();
  void separate_state_updates();
  bool state_read_elsewhere(ir::ValueId e, size_t c) const;
  void order_kernels();
  void keep_row_results_in_registers();
  bool computes_shared_value(const Kernel &kr) const;
  void mark_per_bind();
  void summarize_only_unread_values();
  void describe_kernel(Kernel &kr) const;
  void explain_stores();
  static std::string join(const std::vector<std::string> &items);
  void finish();

  const ir::Graph &g_;
  std::vector<std::vector<ir::ValueId>> users_;
  bool fuse_;
  int stats_ranks_; // Options::batch_stats_ranks (0: none)
  Plan plan_;
  std::set<ir::ValueId> is_output_;
  std::vector<bool> stored_;
  std::vector<bool> stats_dep_;
  std::vector<int64_t> inline_ops_; // inline_ops() of each value not stored, 0 where stored
  std::vector<int> kernel_of_;
  std::map<ir::ValueId, ir::ValueId> epilogue_of_; // chain end -> GEMM
  std::map<ir::ValueId, std::string> because_;     // stored value -> why, where the rule decided
  std::map<ir::ValueId, int> gemm_kernel_;
  std::map<std::pair<ir::ValueId, bool>, int> column_of_; // (matrix, exchanged) -> kernel
  std::map<ir::ValueId, int> row_kernel_of_; // stored matrix -> the latest row kernel over its rows
  std::map<ir::ValueId, int> stage_kernel_;  // row op -> the row kernel whose pass computes it
  std::map<ir::ValueId, ir::ValueId> tail_of_; // row_tail's stored value -> its normalization
  std::set<ir::ValueId> row_values_; // per-row results of row kernels: reductions and row_result
  std::vector<std::set<ir::ValueId>> computed_in_; // per kernel: the values in its computes
};

} // namespace kfuse::plan::partitioning
