// Which matrices kernels store with rows padded to 16 bytes (Selection::row_multiples), so that
// a Hopper GEMM reading them runs on TMA whatever its inner dim, and how the plan says so.
#pragma once

#include "compiler/plan/plan.h"

#include <functional>
#include <set>
#include <string>
#include <vector>

namespace kfuse::select {

// The matrices of `p` whose writers pad their rows to 16 bytes: transposed copies, and the
// matrices of 2-byte elements whose rows are no 16-byte multiple that an elementwise kernel, a
// GEMM's epilogue or a row kernel's pass stores (each of those emitters takes the stored value's
// leading dimension). Each is not returned, at least one Hopper GEMM reads it as an operand, and
// every kernel reading it takes the pitch: a GEMM reading it as an operand only, where
// `hopper_candidate` holds and its other operand is padded too (the tensor map's pitch); a
// transpose of it; the column partials of it. The pitch then never reaches a kernel that assumes
// packed rows, nor the caller.
std::set<ir::ValueId> padded_rows(const plan::Plan &p,
                                  const std::function<bool(const ir::Value &)> &hopper_candidate);

// Whether kernel `k` reads `v` only as an operand of its GEMM.
bool reads_as_operand_only(const ir::Graph &g, const plan::Kernel &k, ir::ValueId v);

// For the GEMM configs: which kernels write GEMM operands `a` and `b` (in `padded`) with padded
// rows, and which other kernels read them at that pitch.
std::string padding_text(const plan::Plan &p, const std::vector<std::string> &names,
                         const std::set<ir::ValueId> &padded, ir::ValueId a, ir::ValueId b);

} // namespace kfuse::select
