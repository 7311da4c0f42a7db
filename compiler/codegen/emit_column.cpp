// The column kernels: per-tile column partials of a matrix, and the per-feature kernel that
// merges them (or computes per-feature values alone) and updates running statistics; where
// statistics are exchanged across ranks, the Summary kernel that merges this rank's partials
// and the Column kernel that merges every rank's summaries.
#include "compiler/codegen/emit.h"
#include "compiler/select/geometry.h"
#include "templates/col_stats.cuh"

#include <algorithm>
#include <fmt/format.h>
#include <optional>

namespace kfuse::codegen {

using namespace ir;
using plan::Kernel;

namespace {

// The per-feature vectors a statistics-merging column kernel reads that no other kernel of the
// plan writes (params, inputs, state it updates itself): loaded before kf::wait_prior_grid(),
// while the kernel that wrote the partials finishes. That kernel is always launched before it
// in the same run and writes none of them, and whatever wrote them before the run completed
// before that kernel's own wait returned (grid_dependency.cuh).
std::set<ValueId> early_loads(const EmitContext &cx, const Kernel &k) {
  const Graph &g = cx.graph;
  std::set<ValueId> out;
  for (ValueId id : k.computes)
    for (ValueId v : g[id].args)
      if (g[v].type.rank() == 1 && !plan::computes(k, v) &&
          std::none_of(cx.plan.kernels.begin(), cx.plan.kernels.end(),
                       [&](const Kernel &o) { return &o != &k && plan::writes(g, o, v); }))
        out.insert(v);
  return out;
}

// A Summary kernel's body after its wait: the team merges this rank's partials, its first lane
// stores the (count, mean, M2) the run all-gathers.
std::string summary_statements(const EmitContext &cx, const Kernel &k, const KernelWriter &w,
                               const std::string &n, const std::string &m) {
  return fmt::format(
      "  double mean, m2;\n  kf::merge_column_m2(col, threadIdx.x % kf::COLUMN_MERGE_LANES, {0}, "
      "kf::ceil_div({1}, {3}), {3}, {1}, {2}_pmean, {2}_pm2, mean, m2);\n"
      "  if (threadIdx.x % kf::COLUMN_MERGE_LANES == 0)\n"
      "    kf::store_summary(col, {0}, {1}, mean, m2, {2}_summary);\n",
      n, m, w.ptr(k.stats_of), cx.partial_rows.at(k.stats_of));
}

// The expression of a column statistic from the merged (double) mean and variance and the rows
// they count; nullopt for an op that is not one.
std::optional<std::string> merged_statistic(OpKind op, const std::string &rows) {
  if (op == OpKind::ColMean)
    return std::string("mean");
  if (op == OpKind::ColVar)
    return std::string("var");
  if (op == OpKind::ColSum)
    return "mean * " + rows;
  return std::nullopt;
}

// A bn_update's statements: the running statistics with momentum and the unbiased variance,
// computed in fp32 from the statistics and rounded once to each state's type. `gathered`: the
// correction counts every rank's rows (total_rows), else the effect's own count.
std::string running_stat_update(const Value &e, const KernelWriter &w,
                                const std::set<ValueId> &early, bool gathered) {
  const Dim &count = e.attrs.at("count").shape.front();
  std::string cnt = gathered ? "static_cast<float>(total_rows)"
                    : count.is_symbolic()
                        ? "static_cast<float>(" + KernelWriter::extent(count) + ")"
                        : float_literal(static_cast<double>(count.value));
  auto at = [&](ValueId v) { return w.operand(v, false, early); };
  ValueId rm = e.args[0], rv = e.args[1];
  return fmt::format(
      "  {{ // bn_update: running stats with momentum, unbiased variance\n"
      "    const float momentum = {0};\n    const float count = {1};\n"
      "    {2};\n    {3};\n  }}\n",
      float_literal(e.attr("momentum")), cnt,
      w.store(rm, "col",
              fmt::format("(1.0f - momentum) * {} + momentum * {}", at(rm), at(e.args[2]))),
      w.store(rv, "col",
              fmt::format("(1.0f - momentum) * {} + momentum * {} * count / (count - 1.0f)", at(rv),
                          at(e.args[3]))));
}

} // namespace

std::string emit_col_partials(EmitContext &cx, const Kernel &k, const KernelWriter &w,
                              KernelLaunch &launch) {
  const Graph &g = cx.graph;
  // The matrix whose columns it summarizes: a rank-3/4 tensor a [B*T, C] view reads as rows.
  const TensorType t = g[k.stats_of].type.matrix_view();
  launch.rows = t.shape[0];
  launch.cols = t.shape[1];
  std::string m = KernelWriter::extent(launch.rows), n = KernelWriter::extent(launch.cols);
  launch.geometry = select::col_partials_geometry(launch.rows, launch.cols);
  // The matrix's rows may be padded for the GEMMs that read it besides (Selection::row_multiples).
  return fmt::format(
      "struct {0}_identity {{\n  __device__ float operator()(int, float x) const {{ return x; "
      "}}\n}};\n"
      "extern \"C\" __global__ void __launch_bounds__(kf::COL_STATS_THREADS)\n{0}({1}) {{\n"
      "  kf::wait_prior_grid();\n  kf::col_partials({2}, {3}, {4}, {6}, {0}_identity{{}}, {5}, "
      "{4}_pmean, {4}_pm2);\n}}\n",
      k.name, w.param_list(), m, n, w.ptr(k.stats_of), kf::COL_STATS_TILE_ROWS,
      cx.leading_dim(k.stats_of, launch.cols));
}

std::string emit_column(EmitContext &cx, const Kernel &k, const KernelWriter &w,
                        const select::ColumnSpec &spec, KernelLaunch &launch) {
  const Graph &g = cx.graph;
  Dim features = Dim::constant(1);
  if (k.stats_of >= 0)
    features = g[k.stats_of].type.matrix_view().shape[1];
  for (ValueId id : k.computes)
    for (ValueId v : g[id].is_effect() ? g[id].args : std::vector<ValueId>{id})
      if (plan::is_column_value(g[v].type) && g[v].type.shape.back() != Dim::constant(1))
        features = g[v].type.shape.back();
  launch.rows = k.stats_of >= 0 ? g[k.stats_of].type.matrix_view().shape[0] : Dim::constant(1);
  launch.cols = features;
  std::string n = KernelWriter::extent(features);
  // A thread per feature; a team of COLUMN_MERGE_LANES where they merge statistics
  // (col_stats.cuh), whose first lane then goes on alone.
  const bool merges = spec.merges;
  launch.geometry = select::column_geometry(spec, features);
  std::string s =
      fmt::format("extern \"C\" __global__ void __launch_bounds__(kf::COLUMN_THREADS)\n{}({}) {{\n"
                  "  const int col = {};\n",
                  k.name, w.param_list(),
                  merges ? "(blockIdx.x * blockDim.x + threadIdx.x) / kf::COLUMN_MERGE_LANES"
                         : "blockIdx.x * blockDim.x + threadIdx.x");
  const char *in = "  ";
  const std::set<ValueId> early = merges ? early_loads(cx, k) : std::set<ValueId>{};
  for (ValueId v : early)
    s += fmt::format("{}const float {} = col < {} ? {} : 0.0f;\n", in, w.var(v), n,
                     w.operand(v, false, {}));
  // Every thread waits, so that this grid completes only after the one before it.
  s += fmt::format("  kf::wait_prior_grid();\n  if (col >= {})\n    return;\n", n);
  if (spec.summary)
    return s + summary_statements(cx, k, w, n, KernelWriter::extent(launch.rows)) + "}\n";
  // The rows the running variance's unbiased correction counts: this run's, or every rank's.
  std::string total_rows = "static_cast<double>(" + KernelWriter::extent(launch.rows) + ")";
  if (merges && spec.ranks > 0) {
    s += fmt::format("{0}double mean, var, total_rows;\n"
                     "{0}kf::merge_ranks(col, {1}, {2}, {3}_gathered, mean, var, total_rows);\n"
                     "{0}if (threadIdx.x % kf::COLUMN_MERGE_LANES != 0)\n{0}  return;\n",
                     in, n, spec.ranks, w.ptr(k.stats_of));
    total_rows = "total_rows";
  } else if (merges) {
    std::string m = KernelWriter::extent(launch.rows);
    const int tile_rows = cx.partial_rows.at(k.stats_of);
    s += fmt::format(
        "{0}double mean, var;\n{0}kf::merge_column(col, threadIdx.x % kf::COLUMN_MERGE_LANES, "
        "{1}, kf::ceil_div({2}, {4}), {4}, {2}, {3}_pmean, {3}_pm2, mean, var);\n"
        "{0}if (threadIdx.x % kf::COLUMN_MERGE_LANES != 0)\n{0}  return;\n",
        in, n, m, w.ptr(k.stats_of), tile_rows);
  }
  if (merges) {
    for (ValueId id : k.computes)
      if (auto merged = merged_statistic(g[id].op, total_rows))
        s += fmt::format("{}const float {} = static_cast<float>({});\n", in, w.var(id), *merged);
  }
  s += w.column_statements(in, nullptr, early);
  // Effects last: every read above saw the running statistics as they were on entry.
  for (ValueId id : k.computes)
    if (g[id].is_effect())
      s += running_stat_update(g[id], w, early, merges && spec.ranks > 0);
  for (ValueId v : k.stores) {
    bool scalar = g[v].type.shape.back() == Dim::constant(1);
    s += fmt::format("{}{}{};\n", in, scalar ? "if (col == 0)\n    " : "",
                     w.store(v, scalar ? "0" : "col", w.var(v)));
  }
  return s + "}\n";
}

} // namespace kfuse::codegen
