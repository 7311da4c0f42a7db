// A GEMM kernel composed of its building blocks: the generated epilogue functor, the tile
// scheduler, and the mainloop of each tile its spec names (the kernel and its variants).
#include "compiler/codegen/emit.h"
#include "compiler/select/geometry.h"

#include <algorithm>
#include <fmt/format.h>

#include <utility>

namespace kfuse::codegen {

using namespace ir;
using plan::Kernel;
using select::GemmSpec;
using select::GemmTile;
using select::Mainloop;

namespace {

const char *operand_name(select::Operand op) {
  switch (op) {
  case select::Operand::Tf32:
    return "Tf32";
  case select::Operand::Tf32x3:
    return "Tf32x3";
  case select::Operand::Bf16:
    return "Bf16";
  case select::Operand::F16:
    return "F16";
  }
  return "?";
}

// The values of GEMM kernel `k` its epilogue computes: `out` and what it reads back to the
// product, not the row passes over it.
std::set<ValueId> epilogue_values(const EmitContext &cx, const Kernel &k, ValueId out) {
  std::set<ValueId> done;
  cx.collect_tree(k, out, {k.anchor}, done);
  return done;
}

// The epilogue functor: per-column values computed once per column (Column), the matrices it
// reads at (row, col), and apply(), which turns the accumulator into the epilogue's value.
// Returns its source; `column_floats` receives the Column's float count.
std::string functor(EmitContext &cx, const Kernel &k, const KernelWriter &w, ValueId out,
                    const std::string &type, int &column_floats) {
  const Graph &g = cx.graph;
  const char *in = cx.indent;
  // A Column carries the column values apply() reads, computed once per column.
  std::set<ValueId> read_per_element;
  for (ValueId id : epilogue_values(cx, k, out))
    if (!plan::is_column_value(g[id].type))
      read_per_element.insert(g[id].args.begin(), g[id].args.end());
  std::vector<ValueId> cols;
  for (ValueId c : w.column_values())
    if (read_per_element.count(c))
      cols.push_back(c);
  // A map's shift read from memory (eval batchnorm's running mean) joins the Column too: one
  // more float per column, loaded once per tile column. Other vectors read from memory stay
  // per-element loads, which cost no registers (in the Column they can make a GEMM spill).
  std::string loads;
  std::set<ValueId> given = {k.anchor};
  for (ValueId id : k.computes) {
    const Value &v = g[id];
    if (v.op != OpKind::ColAffine || v.args.size() != 4 || given.count(v.args[3]) ||
        plan::computes(k, v.args[3])) // computed: in cols
      continue;
    ValueId s = v.args[3];
    loads += fmt::format("{}const float {} = {};\n", in, w.var(s),
                         w.load(s, g[s].type.shape[0] == Dim::constant(1) ? "0" : "col"));
    cols.push_back(s);
    given.insert(s);
  }
  // Matrices apply() reads at (row, col): the epilogue loads them (gemm_epilogue.cuh) and hands
  // apply their elements, in[0], in[1], ...
  std::string matrices, from_inputs;
  int inputs = 0;
  for (ValueId m : read_per_element) {
    const TensorType &t = g[m].type;
    if (given.count(m) || plan::computes(k, m) || t.rank() != 2 || t.shape[0] == Dim::constant(1) ||
        t.shape[1] == Dim::constant(1))
      continue;
    matrices += fmt::format("    {}if constexpr (I == {}) return kf::Matrix<{}>{{{}, {}}};\n",
                            inputs ? "else " : "", inputs, w.element_type(m), w.ptr(m),
                            KernelWriter::extent(t.shape[1]));
    from_inputs += fmt::format("{}const float {} = in[{}];\n", in, w.var(m), inputs++);
    given.insert(m);
  }
  std::string fields, copy_in, copy_out;
  given.insert(cols.begin(), cols.end());
  for (ValueId c : cols) {
    fields += fmt::format("    float {};\n", w.var(c));
    copy_out += (copy_out.empty() ? "" : ", ") + w.var(c);
    copy_in += fmt::format("{}const float {} = c.{};\n", in, w.var(c), w.var(c));
  }
  // The column values those read (a row epilogue's per-row results are rank 1 as well).
  std::set<ValueId> column_tree;
  for (ValueId c : cols)
    cx.collect_tree(k, c, {}, column_tree);
  std::string s = cx.functor_head(type, w);
  s += fmt::format("  static constexpr int COLUMN_FLOATS = {};\n", cols.size());
  s += fmt::format("  static constexpr int MATRICES = {};\n", inputs);
  if (inputs > 0)
    s += fmt::format("  template <int I> __device__ auto matrix() const {{\n{}  }}\n", matrices);
  s += fmt::format("  struct Column {{\n{}  }};\n", fields);
  s += fmt::format(
      "  __device__ Column column(int col) const {{\n{}{}{}return Column{{{}}};\n  }}\n",
      w.column_statements(in, &column_tree), loads, in, copy_out);
  s += fmt::format(
      "  __device__ float apply(const Column &c, int row, int col, float acc, const float *in) "
      "const {{\n{}{}{}const float {} = acc;\n{}{}return {};\n  }}\n}};\n",
      copy_in, from_inputs, in, w.var(k.anchor), w.tree_statements(in, out, given), in, w.var(out));
  column_floats = static_cast<int>(cols.size());
  return s;
}

// The template configuration a tile names in the source.
std::string mainloop_config(const GemmTile &t) {
  switch (t.mainloop) {
  case Mainloop::Simt:
    return t.bn == 128 ? "kf::SimtWide" : "kf::SimtNarrow";
  case Mainloop::MmaSync:
    return "";
  case Mainloop::Sm90: {
    std::string c =
        fmt::format("kf::Sm90Gemm<kf::sm90::Operand::{}, {}", operand_name(t.operand), t.bn);
    if (t.bm != 128 || t.min_blocks != 1 || t.staged_rows)
      c += fmt::format(", {}, {}", t.bm, t.min_blocks);
    if (t.staged_rows)
      c += ", true";
    return c + ">";
  }
  }
  return "";
}

// The GemmEpilogue's template arguments and initializer: the functor, the store of the product
// (a row epilogue's value only where another kernel reads it or it is returned), the statistics
// partials, split-K's workspace, and the row kernel's passes or the functor's rolled apply.
std::pair<std::string, std::string> epilogue_arguments(const Kernel &k, const KernelWriter &w,
                                                       const GemmSpec &spec,
                                                       const std::string &functor_type,
                                                       const std::string &ldc) {
  std::string stats = "nullptr, nullptr";
  if (k.stats_of >= 0)
    stats = fmt::format("{0}_pmean, {0}_pm2", w.ptr(k.stats_of));
  const bool stored = std::count(k.stores.begin(), k.stores.end(), spec.out) != 0;
  std::string type = fmt::format("{}, {}, {}", functor_type,
                                 stored ? w.element_type(spec.out) : "float",
                                 k.stats_of >= 0 ? "true" : "false"),
              init = fmt::format("{}, {}, {}, {}, split_partials, split_counters",
                                 w.member_initializer(), stored ? w.ptr(spec.out) : "nullptr", ldc,
                                 stats);
  if (!k.row_stages.empty()) {
    type += fmt::format(", {}_rows", k.name);
    init += fmt::format(", {}_rows{}", k.name,
                        k.row_partials ? w.member_initializer({w.ptr(k.rows_of) + "_rowpart"})
                                       : w.member_initializer());
  } else if (spec.rolled_epilogue) {
    type += ", kf::NoRows, kf::Apply::Rolled";
  }
  return {type, init};
}

// The entry point of tile `t`: the problem shape, the tile scheduler (which also fixes the
// column statistics' tile height) with the K split count the launch passes, the epilogue (the
// functor, the store of `out`, the statistics partials, split-K's workspace) and the mainloop.
std::string entry(EmitContext &cx, const Kernel &k, const KernelWriter &w, const GemmSpec &spec,
                  const GemmTile &t, const std::string &functor_type, int column_floats,
                  KernelLaunch &launch) {
  const Graph &g = cx.graph;
  const select::GemmTraits traits = select::gemm_traits(t, column_floats);
  launch.geometry =
      select::gemm_geometry(t, spec, column_floats, launch.rows, launch.cols, launch.inner);
  launch.entry = t.entry;
  launch.config = t.config;
  launch.tile = select::tile_text(t);
  const std::string config = mainloop_config(t), a = w.ptr(spec.a), b = w.ptr(spec.b);
  const std::string tb = spec.trans_b ? "true" : "false";
  // A's leading dimension: K, or where it is read column-major ([K, M]), M.
  const Dim &lda = g[spec.a].type.shape[1];
  const std::string operands =
      fmt::format("(shape, scheduler, {}, {}, {}, {}, epilogue)", a, KernelWriter::extent(lda), b,
                  KernelWriter::extent(g[spec.b].type.shape[1]));
  std::string head, first_params, mainloop;
  launch.params.clear();
  switch (t.mainloop) {
  case Mainloop::Sm90: {
    cx.includes.insert("gemm_sm90.cuh");
    auto map = [&](ValueId v, int box_rows) {
      LaunchParam lp{LaunchParam::Kind::TensorMap, v, {}};
      lp.map = {g[v].type.shape[0], g[v].type.shape[1], box_rows,
                traits.bk,          g[v].type.dtype,    cx.row_multiple(v)};
      return lp;
    };
    launch.params = {map(spec.a, traits.bm), map(spec.b, traits.bn)};
    head = fmt::format(
        "extern \"C\" __global__ void __launch_bounds__({0}::THREADS, {0}::MIN_BLOCKS)", config);
    first_params = fmt::format("const __grid_constant__ kf::sm90::TensorMap {0}_map, "
                               "const __grid_constant__ kf::sm90::TensorMap {1}_map, ",
                               a, b);
    mainloop =
        fmt::format("kf::gemm_sm90<{}>({}_map, {}_map, shape, scheduler, epilogue)", config, a, b);
    break;
  }
  case Mainloop::Simt:
    cx.includes.insert("gemm_simt.cuh");
    head = fmt::format(
        "extern \"C\" __global__ void __launch_bounds__({0}::THREADS, {0}::MIN_BLOCKS)", config);
    mainloop = fmt::format("kf::gemm_simt<{}, {}{}>{}", config, tb, spec.trans_a ? ", true" : "",
                           operands);
    break;
  case Mainloop::MmaSync:
    cx.includes.insert("gemm_tc.cuh");
    head = "extern \"C\" __global__ void "
           "__launch_bounds__(kf::GEMM_TC_THREADS, kf::GEMM_TC_MIN_BLOCKS)";
    mainloop = fmt::format("kf::gemm_tc<{}, {}>{}", tb, t.operand == select::Operand::Tf32 ? 0 : 1,
                           operands);
    break;
  }
  launch.params.push_back({LaunchParam::Kind::Splits, -1, {}});
  launch.params.push_back({LaunchParam::Kind::SplitPartials, spec.out, {}});
  launch.params.push_back({LaunchParam::Kind::SplitCounters, spec.out, {}});
  const std::string n = KernelWriter::extent(launch.cols);
  // The stored value's rows may be padded for the GEMMs reading it (Selection::row_multiples).
  const std::string ld = cx.leading_dim(spec.out, launch.cols);
  const auto [type, init] = epilogue_arguments(
      k, w, spec, functor_type,
      launch.cols.is_symbolic() && ld != n ? fmt::format("static_cast<int>({})", ld) : ld);
  return fmt::format("{}\n{}({}int splits, float *__restrict__ split_partials, "
                     "unsigned *__restrict__ split_counters, {}) {{\n"
                     "  kf::wait_prior_grid();\n"
                     "  const kf::GemmShape shape{{{}, {}, {}}};\n"
                     "  const kf::TileScheduler<{}, {}, {}> scheduler(shape, splits);\n"
                     "  const kf::GemmEpilogue<{}> epilogue{{{}}};\n"
                     "  {};\n}}\n",
                     head, launch.entry, first_params, w.param_list(),
                     KernelWriter::extent(launch.rows), n, KernelWriter::extent(launch.inner),
                     traits.bm, traits.bn, traits.group_m, type, init, mainloop);
}

} // namespace

std::string emit_gemm(EmitContext &cx, const Kernel &k, const KernelWriter &w, const GemmSpec &spec,
                      KernelLaunch &launch) {
  const Graph &g = cx.graph;
  const Value &mm = g[k.anchor];
  launch.rows = mm.type.shape[0];
  launch.cols = mm.type.shape[1];
  launch.inner = g[spec.a].type.shape[spec.trans_a ? 0 : 1];
  launch.tiles = spec.tiles;
  launch.signature = spec.signature;
  const std::string functor_type = k.name + "_functor";
  int column_floats = 0;
  std::string s = functor(cx, k, w, spec.out, functor_type, column_floats);
  if (!k.row_stages.empty())
    s += emit_gemm_rows(cx, k, w, spec.rows, k.name + "_rows");
  // The variants first: the kernel itself is the last entry of its GEMM.
  const KernelLaunch common = launch;
  for (const GemmTile &t : spec.by_rows) {
    KernelLaunch v = common;
    s += entry(cx, k, w, spec, t, functor_type, column_floats, v);
    launch.by_rows.push_back(std::move(v));
  }
  return s + entry(cx, k, w, spec, spec.tile, functor_type, column_floats, launch);
}

} // namespace kfuse::codegen
