// Transpose kernels: one stored matrix written transposed (templates/transpose.cuh).
#include "compiler/codegen/emit.h"
#include "compiler/select/geometry.h"

#include <fmt/format.h>

namespace kfuse::codegen {

using namespace ir;

std::string emit_transpose(EmitContext &cx, const plan::Kernel &k, const KernelWriter &w,
                           const select::TransposeSpec &spec, KernelLaunch &launch) {
  const ValueId in = cx.graph[k.anchor].args[0];
  // A vector [F] is the per-feature row [1, F] (a view between them reads the same buffer).
  const TensorType t = cx.graph[in].type.matrix_view();
  launch.rows = t.rank() == 2 ? t.shape[0] : Dim::constant(1);
  launch.cols = t.shape.back();
  launch.geometry = select::transpose_geometry(launch.rows, launch.cols);
  const std::string m = KernelWriter::extent(launch.rows);
  // The output's rows are the input's columns, each padded where the selection says; the
  // input's rows may be padded too, for the GEMMs that read it besides.
  const std::string ld_in = cx.leading_dim(in, launch.cols),
                    ld_out = cx.leading_dim(k.anchor, launch.rows);
  return fmt::format("extern \"C\" __global__ void __launch_bounds__(kf::TRANSPOSE_THREADS)\n"
                     "{}({}) {{\n  kf::wait_prior_grid();\n  kf::transpose_tile{}({}, {}, {}, {}, "
                     "{}, {});\n}}\n",
                     k.name, w.param_list(), spec.round_tf32 ? "<true>" : "", w.ptr(in), ld_in,
                     w.ptr(k.anchor), ld_out, m, KernelWriter::extent(launch.cols));
}

} // namespace kfuse::codegen
