// The whole path from .kf text to CUDA source, in one place (Halide's lower_impl): parse and
// verify, the passes, the plan, the generated translation unit. kfuse::Pipeline (which then
// compiles it with NVRTC) and `kfuse bench` call it.
//
// KFUSE_DUMP=ir,plan,cuda shows what every lowered pipeline becomes: `ir` the IR as parsed and
// after every pass, `plan` the kernels, `cuda` the generated source; printed to stderr, or
// written to KFUSE_DUMP_DIR as <pipeline>.<mode>.<step>.kf, .plan.txt and .cu files.
#pragma once

#include "compiler/codegen/program.h"
#include "compiler/dsl/source.h"
#include "compiler/ir/graph.h"
#include "compiler/plan/plan.h"

namespace kfuse {

struct LowerOptions {
  ir::Mode mode = ir::Mode::Train;
  codegen::GemmMath math = codegen::GemmMath::Fp32;
  bool fuse = true;      // false: the unfused baseline benchmarks compare against
  std::string arch = {}; // the NVRTC target: "sm_90a" gives tf32 GEMMs the Hopper mainloop
};

struct Lowered {
  ir::Graph graph; // as parsed
  plan::Plan plan; // its graph is the IR after every pass
  codegen::Program program;
};

// Throws dsl::DiagnosticError for a .kf error or what the GPU path does not run
// (codegen::gpu_unsupported), kfuse::Error for a KFUSE_DUMP it cannot honour.
Lowered lower(const dsl::SourceFile &src, const LowerOptions &options);

} // namespace kfuse
