#include "tools/kfuse/bench_figures.h"

#include "runtime/error.h"
#include "tools/kfuse/command_line.h"

#include <fmt/format.h>

#include <set>

namespace kfuse::tool {
namespace {

int64_t tensor_bytes(const ir::Graph &g, ir::ValueId id, const ir::DimBindings &dims) {
  int64_t b = ir::dtype_bytes(g[id].type.dtype);
  for (int64_t e : ir::concrete_shape(g[id].type, dims))
    b *= e;
  return b;
}

// Dense datasheet peaks in TFLOP/s, one row per board. The H200 is the H100 SXM's chip with
// more memory; both say "H100"/"H200" in their names, the PCIe and NVL boards say so too.
// bf16 and f16 tensor cores have the same peak on every board listed.
struct BoardPeaks {
  const char *board;
  double fp32_fma, tf32, half;
};
constexpr BoardPeaks kH100Pcie{"H100 PCIe", 51.2, 378.0, 756.0};
constexpr BoardPeaks kH100Nvl{"H100 NVL", 60.0, 417.5, 835.0};
constexpr BoardPeaks kH100Sxm{"H100/H200 SXM", 67.0, 495.0, 989.4};

} // namespace

int64_t GemmShape::bytes() const {
  const int64_t ab = ir::dtype_bytes(operands);
  return ab * (m * k + n * k) + ir::dtype_bytes(result) * m * n;
}

std::vector<GemmShape> gemm_shapes(const ir::Graph &g, const ir::DimBindings &dims) {
  std::vector<GemmShape> out;
  for (size_t i = 0; i < g.values.size(); ++i) {
    const ir::Value &v = g.values[i];
    if (!v.is_op() || (v.op != ir::OpKind::Linear && v.op != ir::OpKind::Matmul))
      continue;
    GemmShape s;
    s.trans_b = v.op == ir::OpKind::Linear;
    s.a = v.args.at(0);
    s.b = v.args.at(1);
    s.operands = g[s.a].type.dtype;
    s.result = v.type.dtype;
    // A rank-3/4 operand ([B, T, K]) multiplies as its matrix view: B*T rows.
    std::vector<int64_t> a = ir::concrete_shape(g[s.a].type.matrix_view(), dims);
    std::vector<int64_t> b = ir::concrete_shape(g[s.b].type, dims);
    s.m = a.at(0);
    s.k = a.at(1);
    s.n = s.trans_b ? b.at(0) : b.at(1);
    out.push_back(s);
  }
  return out;
}

std::string GemmArithmetic::precision_name() const {
  switch (precision) {
  case Precision::FP32:
    return "fp32";
  case Precision::FP32x3:
    return "3xtf32";
  case Precision::TF32:
    return "tf32";
  case Precision::BF16:
    return "bf16";
  }
  throw Error("not a kfuse::Precision value");
}

std::string GemmArithmetic::text() const {
  if (precision == Precision::BF16)
    return "precision bf16: f32 tensors, bf16 operands, fp32 accumulation";
  if (half())
    return fmt::format("{} operands, fp32 accumulation", ir::dtype_name(operands));
  return "precision " + precision_name();
}

GemmArithmetic gemm_arithmetic(const ir::Graph &g, const std::vector<GemmShape> &gemms,
                               Precision precision) {
  GemmArithmetic a;
  a.precision = precision;
  std::set<ir::DType> types;
  for (const GemmShape &s : gemms)
    types.insert(s.operands);
  if (types.size() > 1) {
    std::string names;
    for (ir::DType t : types)
      names += fmt::format("{}{}", names.empty() ? "" : " and ", ir::dtype_name(t));
    throw Error(fmt::format("pipeline '{}' has GEMMs of {} operands: no one peak measures them; "
                            "bench them as separate pipelines",
                            g.name, names));
  }
  if (!types.empty())
    a.operands = *types.begin();
  // Precision bf16 rounds f32 operands to bf16 (passes::autocast_bf16): `g`, lowered at that
  // precision, multiplies bf16 operands.
  const bool autocast = precision == Precision::BF16 && a.operands == ir::DType::BF16;
  if (a.half() && precision != Precision::FP32 && !autocast)
    throw UsageError(fmt::format(
        "--precision {}: pipeline '{}' multiplies {} operands, which run on {} tensor cores with "
        "fp32 accumulation whatever the precision; tf32, 3xtf32 and bf16 apply to f32 operands "
        "only: bench it with --precision fp32 (the default)",
        a.precision_name(), g.name, ir::dtype_name(a.operands), ir::dtype_name(a.operands)));
  return a;
}

Peak assumed_peak(const std::string &device, const GemmArithmetic &arithmetic) {
  auto has = [&](const char *s) { return device.find(s) != std::string::npos; };
  const bool tf32 = !arithmetic.half() && arithmetic.precision == Precision::TF32;
  const std::string unit = arithmetic.half()
                               ? fmt::format("{} tensor core", ir::dtype_name(arithmetic.operands))
                           : tf32 ? "tf32 tensor core"
                                  : "fp32 FMA";
  const BoardPeaks *board = nullptr;
  if (has("H100") && has("PCIe"))
    board = &kH100Pcie;
  else if (has("H100") && has("NVL"))
    board = &kH100Nvl;
  else if (has("H100") || has("H200"))
    board = &kH100Sxm;
  if (board == nullptr)
    return {0, fmt::format("unknown: no {} datasheet peak is built in for '{}'", unit, device)};
  const double tflops = arithmetic.half() ? board->half : tf32 ? board->tf32 : board->fp32_fma;
  return {tflops, fmt::format("{}, {} dense, datasheet", unit, board->board)};
}

int64_t minimum_bytes(const ir::Graph &g, const plan::Plan &p, const ir::DimBindings &dims) {
  int64_t total = 0;
  std::vector<std::vector<ir::ValueId>> users = g.users();
  for (size_t i = 0; i < g.values.size(); ++i)
    if (!g.values[i].is_op() && !users[i].empty())
      total += tensor_bytes(g, static_cast<ir::ValueId>(i), dims);
  std::set<ir::ValueId> outputs(g.outputs.begin(), g.outputs.end());
  for (ir::ValueId o : outputs)
    total += tensor_bytes(g, o, dims);
  std::set<ir::ValueId> updated;
  for (const ir::Value &v : p.graph.values)
    if (v.is_effect()) {
      updated.insert(v.args.at(0));
      updated.insert(v.args.at(1));
    }
  for (ir::ValueId s : updated)
    total += tensor_bytes(p.graph, s, dims);
  return total;
}

} // namespace kfuse::tool
