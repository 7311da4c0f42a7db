// select: a validated plan, the target and the tuned configurations -> one spec per kernel.
//
// Every choice of tile, mainloop, variant, thread count and vector width is made here, with
// its reason, as a pure function of the plan's kernels, the target (arch, GEMM math) and the
// tunings; compiler/codegen renders the result and chooses nothing.
#pragma once

#include "compiler/codegen/program.h"
#include "compiler/executable.h"
#include "compiler/select/spec.h"
#include "compiler/target.h"

#include <fmt/format.h>
#include <string>
#include <vector>

namespace kfuse::select {

// The plan as its kernels see it: every tensor as its [rows, F] matrix (ir::matrix_view).
plan::Plan kernel_view(const plan::Plan &p);

// A GEMM of bf16/f16 operands the Hopper mainloop cannot run (codegen::half_gemm_unsupported),
// found once the plan fixed which kernels write its operands: the planner's rewrites may have
// removed the op whose kernel would have padded one (a dropout in eval mode). lower() reports it
// at the GEMM's location.
struct UnsupportedGemm : codegen::CodegenError {
  // what(): "pipeline 'P': line L: " and the reason, for callers without the source.
  UnsupportedGemm(const ir::Graph &g, ir::ValueId gemm, const std::string &why)
      : codegen::CodegenError(
            fmt::format("pipeline '{}': line {}: {}", g.name, g[gemm].loc.line, why)),
        value(gemm), reason(why) {}
  ir::ValueId value;
  std::string reason;
};

// `p` is a kernel_view: it sees every tensor as [rows, F] (ir::matrix_view). `tunings` replace the
// heuristics' tile and split-K caps of the GEMM kernels they name; a tuned tile a kernel cannot
// take is a CodegenError naming it.
Selection select_kernels(const plan::Plan &p, const Target &target,
                         const codegen::GemmTunings &tunings = {});

// The matrices elementwise kernel `k` reads at (row, col), in the order it first reads them:
// [rows, cols] operands and rows broadcast down the columns, not per-row columns or scalars.
std::vector<ir::ValueId> elementwise_matrices(const ir::Graph &g, const plan::Kernel &k);

// The GEMM kernels of a selection as the tuning store looks them up, before any CUDA exists.
std::vector<exec::TunableGemm> gemm_keys(const plan::Plan &p, const Selection &s);

} // namespace kfuse::select
