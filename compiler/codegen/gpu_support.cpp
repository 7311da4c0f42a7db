#include "compiler/codegen/gpu_support.h"

#include "compiler/codegen/class_codegen.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/views.h"
#include "compiler/passes/passes.h"

#include <fmt/format.h>

namespace kfuse::codegen {

using namespace ir;

namespace {

// Both operands of GEMM `mm` are transposes: kernels write them, with padded rows where only
// Hopper GEMMs read them (select decides, and says where not).
bool transposes(const Graph &g, const Value &mm) {
  auto transpose = [&](ValueId v) { return g[v].is_op() && g[v].op == OpKind::Transpose; };
  return transpose(mm.args[0]) && transpose(mm.args[1]);
}

} // namespace

bool hopper_gemms(const Graph &g, const std::string &arch, Precision precision) {
  for (const Value &v : g.values)
    if (v.is_op() && op_info(v.op).cls == OpClass::Gemm &&
        g[v.args[0]].type.dtype != ir::DType::F32)
      return true;
  return arch == "sm_90a" && precision != Precision::FP32;
}

std::optional<std::string> half_gemm_unsupported(const Graph &g, const Value &mm,
                                                 const std::string &arch, bool padded_operands) {
  const TensorType &a = g[mm.args[0]].type;
  std::string_view dtype = dtype_name(a.dtype);
  const Dim &k = a.shape.back();
  if (!padded_operands && (k.is_symbolic() || k.value % 8 != 0))
    return fmt::format("linear of {} operands runs on the Hopper GEMM, which needs the inner "
                       "dim a constant multiple of 8 (16-byte rows for TMA); got {}",
                       dtype, a.str());
  if (!arch.empty() && arch != "sm_90a")
    return fmt::format("linear of {} operands runs on the Hopper GEMM, which needs --arch "
                       "sm_90a; got {}",
                       dtype, arch);
  return std::nullopt;
}

// Kernels read a view as the buffer it views, in that buffer's shape. A vector [F] and the
// matrix [1, F] are the same per-feature operand of a pointwise op, but a GEMM or a row kernel
// needs the matrix it reads, and one viewed across ranks 1 and 2 is refused.
std::optional<std::string> vector_view_unsupported(const Graph &g, const Value &v) {
  if (class_codegen(op_info(v.op).cls).reads_vector_views)
    return std::nullopt;
  for (ValueId a : v.args) {
    const TensorType &seen = g[a].type, &stored = g[view_source(g, a)].type;
    if ((seen.rank() == 1) != (stored.rank() == 1))
      return fmt::format("{} of {}, a view of {}, is not supported on the GPU: a view between a "
                         "vector and a matrix is an operand of pointwise ops only",
                         op_info(v.op).name, seen.str(), stored.str());
  }
  return std::nullopt;
}

std::optional<GpuUnsupported> gpu_unsupported(const Graph &g, const std::string &arch) {
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value &v = g.values[i];
    ValueId id = static_cast<ValueId>(i);
    if (!v.is_op())
      continue;
    OpClass cls = op_info(v.op).cls;
    if (auto why = vector_view_unsupported(g, v))
      return GpuUnsupported{id, *why};
    if (cls == OpClass::Gemm && g[v.args[0]].type.dtype != ir::DType::F32)
      if (auto why = half_gemm_unsupported(g, v, arch, transposes(g, v)))
        return GpuUnsupported{id, *why};
    // The planner computes these as column statistics (compiler/passes/columns_from_reductions).
    if (!v.attrs.count("dim") || passes::becomes_column_statistic(g, v))
      continue;
    int rank = g[v.args[0]].type.rank();
    double d = v.attr("dim");
    if (class_codegen(cls).last_axis_only && !(d == -1 || d == rank - 1))
      return GpuUnsupported{
          id, fmt::format("{} over dim={} of {} is not supported on the GPU (only the last axis, "
                          "dim={} or dim=-1)",
                          op_info(v.op).name, format_number(d), g[v.args[0]].type.str(), rank - 1)};
  }
  return std::nullopt;
}

} // namespace kfuse::codegen
