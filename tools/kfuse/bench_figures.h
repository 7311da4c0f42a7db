// The host-side figures of `kfuse bench`: a pipeline's GEMMs (shapes, element types, FLOPs),
// the arithmetic they are measured in, the dense datasheet peak of that arithmetic on the
// device, and the minimum bytes a run must move. No GPU is needed to compute any of them.
#pragma once

#include "compiler/ir/graph.h"
#include "compiler/ir/interpreter.h"
#include "compiler/plan/plan.h"
#include "kfuse/kfuse.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kfuse::tool {

struct GemmShape {
  bool trans_b = false; // linear: C = A @ B^T with B [n, k]; matmul: C = A @ B with B [k, n]
  int64_t m = 0, n = 0, k = 0;
  ir::ValueId a = -1, b = -1;
  ir::DType operands = ir::DType::F32; // A's and B's (the DSL makes them agree)
  ir::DType result = ir::DType::F32;   // the product's type in the graph as parsed
  double flop() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  }
  // A + B read and C written once: what a cuBLAS GEMM alone moves.
  int64_t bytes() const;
};

// Every linear and matmul of `g` (as parsed), in graph order, at `dims`.
std::vector<GemmShape> gemm_shapes(const ir::Graph &g, const ir::DimBindings &dims);

// The arithmetic the GEMMs of a benchmark run in: --precision for f32 operands; for bf16/f16
// operands, tensor cores of that type accumulating in fp32 (precision fp32, the default,
// only: tf32 and 3xtf32 say how f32 operands are multiplied and do not apply to half ones).
struct GemmArithmetic {
  Precision precision = Precision::FP32;
  ir::DType operands = ir::DType::F32;

  bool half() const { return operands != ir::DType::F32; }
  // "fp32", "3xtf32", "tf32": the --precision asked for.
  std::string precision_name() const;
  // What the header prints: "precision tf32", or "bf16 operands, fp32 accumulation".
  std::string text() const;
};

// The arithmetic of pipeline `g`'s GEMMs at `precision`. Throws kfuse::Error where GEMMs of
// different operand types share the pipeline (no one peak fits them) and UsageError for
// tf32/3xtf32 with bf16/f16 operands, naming the pipeline and the operand type.
GemmArithmetic gemm_arithmetic(const ir::Graph &g, const std::vector<GemmShape> &gemms,
                               Precision precision);

// A dense datasheet peak of the arithmetic on a device (tflops 0: none built in for it).
struct Peak {
  double tflops = 0;
  std::string assumed; // which peak, e.g. "bf16 tensor core, H100/H200 SXM dense, datasheet"
};

// `device` as cuDeviceGetName reports it. 3xtf32 is fp32-accurate: measured against the fp32
// FMA peak, as its baseline is cuBLAS's fp32 SGEMM.
Peak assumed_peak(const std::string &device, const GemmArithmetic &arithmetic);

// Each declared tensor that something reads, read once; each output written once; each
// state the pipeline updates (the plan's bn_update effects) written once.
int64_t minimum_bytes(const ir::Graph &g, const plan::Plan &p, const ir::DimBindings &dims);

} // namespace kfuse::tool
