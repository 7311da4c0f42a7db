// What the GPU path runs: every op the interpreter runs, except the cases below, which
// `kfuse check` and lower() report at their source location before planning (so a file that
// checks also emits):
//   - softmax / log_softmax and reductions along any axis but the last (row kernels only);
//   - GEMMs of bf16/f16 operands that the Hopper mainloop (gemm_sm90.cuh, the only one taking
//     2-byte operands) cannot run: an inner dim that is not a constant multiple of 8 (TMA row
//     strides are multiples of 16 bytes) where an operand is not written with padded rows (a
//     declared tensor, a returned value, one that kernels other than GEMMs, transposes and
//     column sums read too), or a target other than sm_90a.
#pragma once

#include "compiler/ir/graph.h"
#include "kfuse/kfuse.h"

#include <optional>
#include <string>

namespace kfuse::codegen {

struct GpuUnsupported {
  ir::ValueId value; // the declaration or op at fault, in graph order the first
  std::string message;
};

// `arch`: the NVRTC target, or empty when not known yet (`kfuse check`): the target is then
// not checked.
std::optional<GpuUnsupported> gpu_unsupported(const ir::Graph &g, const std::string &arch = {});

// Whether `g`'s GEMMs run on the Hopper mainloop, which reads K-major operands only
// (passes::k_major_operands): every GEMM where one multiplies bf16/f16 operands, else those of
// tf32 and 3xtf32 on sm_90a.
bool hopper_gemms(const ir::Graph &g, const std::string &arch, Precision precision);

// Whether the values of class `cls` that a row kernel's or GEMM row epilogue's pass stores over
// the whole row (row_map, a softmax's, a normalization's or a loss gradient's row) are written
// at the leading dimension the selection gives them, so their rows may be padded.
bool writes_rows_at_pitch(ir::OpClass cls);

// Why GEMM `mm` of bf16/f16 operands cannot run for `arch` (empty: any), or nullopt.
// `padded_operands`: both operands are matrices whose rows the kernels writing them pad to 16
// bytes (select::Selection::row_multiples), so any inner dim will do.
std::optional<std::string> half_gemm_unsupported(const ir::Graph &g, const ir::Value &mm,
                                                 const std::string &arch, bool padded_operands);

} // namespace kfuse::codegen
