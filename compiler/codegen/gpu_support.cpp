#include "compiler/codegen/gpu_support.h"

#include "compiler/codegen/class_codegen.h"
#include "compiler/ir/op_class.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/views.h"
#include "compiler/passes/passes.h"

#include <algorithm>
#include <fmt/format.h>

namespace kfuse::codegen {

using namespace ir;

namespace {

// Whether users of values of class `cls` read them at the pitch of their rows: GEMMs as
// operands (a tensor map), transposes (a transpose kernel) and, where the value's kernel does not
// write the column partials itself (an elementwise kernel does), column sums (a column-partials
// kernel).
bool reads_at_pitch(const Graph &g, OpClass cls, const Value &user, size_t arg) {
  if (op_info(user.op).cls == OpClass::Gemm)
    return arg < 2;
  if (user.op == OpKind::Transpose)
    return true;
  return !class_traits(cls).computed_inline() && passes::becomes_column_statistic(g, user);
}

// Whether a kernel writes `v` with rows padded to 16 bytes for the GEMMs reading it
// (select::padded_rows): a transposed copy, or a value of a pointwise op, a GEMM or a row op (an
// elementwise kernel's, a GEMM epilogue's or a row kernel's pass's) that is not returned and that
// only GEMMs (as operands), transposes and column sums read. Select decides, and says where not.
bool written_padded(const Graph &g, ValueId v) {
  const Value &x = g[v];
  if (!x.is_op())
    return false;
  if (x.op == OpKind::Transpose)
    return true;
  const OpClass cls = op_info(x.op).cls;
  if (cls != OpClass::Gemm && !writes_rows_at_pitch(cls))
    return false;
  if (std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end())
    return false;
  for (const Value &user : g.values)
    for (size_t i = 0; i < user.args.size(); ++i)
      if (user.args[i] == v && !reads_at_pitch(g, cls, user, i))
        return false;
  return true;
}

bool padded_operands(const Graph &g, const Value &mm) {
  return written_padded(g, mm.args[0]) && written_padded(g, mm.args[1]);
}

} // namespace

bool writes_rows_at_pitch(OpClass cls) {
  switch (cls) {
  case OpClass::Binary:
  case OpClass::Unary:
  case OpClass::Random:
  case OpClass::ColAffine:
  case OpClass::Row:
  case OpClass::RowNorm:
  case OpClass::NormGrad:
  case OpClass::LossGrad:
    return true;
  case OpClass::Gemm:
  case OpClass::Norm:
  case OpClass::Reduce:
  case OpClass::Pool:
  case OpClass::PoolGrad:
  case OpClass::Loss:
  case OpClass::View:
  case OpClass::ColReduce:
  case OpClass::Transpose:
  case OpClass::Effect:
  case OpClass::Constant:
    return false;
  }
  return false;
}

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
                       "dim a constant multiple of 8 (16-byte rows for TMA); got {} (pad the "
                       "tensor's rows to a multiple of 8 where it is a declared tensor, a "
                       "returned one, or one that kernels other than GEMMs, transposes and "
                       "column sums also read)",
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
      if (auto why = half_gemm_unsupported(g, v, arch, padded_operands(g, v)))
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
