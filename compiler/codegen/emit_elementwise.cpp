// The elementwise kernel: any elementwise expression of stored tensors, over a grid of
// threads that each move spec.vec columns of every matrix it reads.
#include "compiler/codegen/emit.h"
#include "compiler/select/geometry.h"
#include "compiler/select/select.h"
#include "templates/col_stats.cuh"

#include <fmt/format.h>

namespace kfuse::codegen {

using namespace ir;
using plan::Kernel;

std::string emit_elementwise(EmitContext &cx, const Kernel &k, const KernelWriter &w,
                             const select::ElementwiseSpec &spec, KernelLaunch &launch) {
  const Graph &g = cx.graph;
  const ValueId out = k.anchor;
  const bool stores = !k.stores.empty();
  const TensorType &t = g[out].type;
  launch.rows = t.rank() == 2 ? t.shape[0] : Dim::constant(1);
  launch.cols = t.shape.back();
  // Operands apply() reads at (row, col), as matrices: the [rows, cols] ones, and rows
  // broadcast down the columns ([cols] vectors, [1, cols]) with leading dimension 0.
  // map_elements loads them (elementwise.cuh) and hands apply their elements, in[0], in[1],
  // ...; per-row columns ([rows, 1]) and scalars apply loads itself.
  std::set<ValueId> given;
  std::string matrices, from_inputs;
  int inputs = 0;
  for (ValueId m : select::elementwise_matrices(g, k)) {
    const TensorType &mt = g[m].type;
    // A matrix's rows may be another extent than the output's where a view regroups them (an
    // [N, F] input added to a [B, T, F] one): the run checks that the bound dims make them
    // equal (ir::view_rows_problem).
    const bool broadcast = mt.rank() == 1 || mt.shape[0] == Dim::constant(1);
    matrices += fmt::format("    {}if constexpr (I == {}) return kf::Matrix<{}>{{{}, {}}};\n",
                            inputs ? "else " : "", inputs, w.element_type(m), w.ptr(m),
                            broadcast ? "0" : KernelWriter::extent(mt.shape[1]));
    from_inputs += fmt::format("{}const float {} = in[{}];\n", cx.indent, w.var(m), inputs++);
    given.insert(m);
  }
  launch.geometry = select::elementwise_geometry(spec, launch.rows, launch.cols);
  std::string type = k.name + "_element";
  std::string s = cx.functor_head(type, w);
  s += fmt::format("  static constexpr int MATRICES = {};\n", inputs);
  if (inputs > 0)
    s += fmt::format("  template <int I> __device__ auto matrix() const {{\n{}  }}\n", matrices);
  s += fmt::format("  using Out = {};\n", w.element_type(out));
  if (stores)
    s += fmt::format("  __device__ {} *output() const {{ return {}; }}\n", w.element_type(out),
                     w.ptr(out));
  s += fmt::format("  __device__ float apply(int row, int col, const float *in) const {{\n{}{}{}"
                   "{}return {};\n  }}\n}};\n",
                   from_inputs, w.column_statements(cx.indent, nullptr, given),
                   w.element_statements(cx.indent, given), cx.indent, w.var(out));
  // The output's rows may be padded for the GEMMs reading it (Selection::row_multiples); a
  // kernel writing column partials is never selected for that.
  const std::string rows = KernelWriter::extent(launch.rows),
                    cols = KernelWriter::extent(launch.cols);
  if (spec.partials) {
    cx.includes.insert("elementwise_stats.cuh");
    return s + fmt::format("extern \"C\" __global__ void __launch_bounds__(kf::COL_STATS_THREADS)\n"
                           "{0}({1}) {{\n  kf::wait_prior_grid();\n"
                           "  kf::elements_with_partials<{2}>({3}, {4}, {5}{6}, {7}, {8}_pmean, "
                           "{8}_pm2);\n}}\n",
                           k.name, w.param_list(), stores ? "true" : "false", rows, cols, type,
                           w.member_initializer(), kf::COL_STATS_TILE_ROWS, w.ptr(k.stats_of));
  }
  return s + fmt::format(
                 "extern \"C\" __global__ void __launch_bounds__(kf::ELEMENTWISE_THREADS)\n{}({}) "
                 "{{\n  kf::wait_prior_grid();\n  kf::map_elements<{}>({}, {}, {}, {}{});\n}}\n",
                 k.name, w.param_list(), spec.vec, rows, cols, cx.leading_dim(out, launch.cols),
                 type, w.member_initializer());
}

} // namespace kfuse::codegen
