// The whole path from .kf text to CUDA source, in one place (Halide's lower_impl): parse and
// verify, the passes, the plan, the generated translation unit. kfuse::Pipeline (which then
// compiles it with NVRTC, rt::PipelineAccess::compile) and every `kfuse` command that lowers
// (plan, emit, compile, run, bench) call it.
//
// KFUSE_DUMP=ir,plan,cuda,launch shows what every lowered pipeline becomes: `ir` the IR as
// parsed and after every pass, `plan` the kernels, `cuda` the generated source, `launch` each
// kernel's launch description; printed to stderr, or written to KFUSE_DUMP_DIR as
// <pipeline>.<mode>.<step>.kf, .plan.txt, .cu and .launch.txt files (compiler/dump.h). `ptx`
// and `sass` are the runtime's, after NVRTC.
#pragma once

#include "compiler/codegen/program.h"
#include "compiler/dsl/source.h"
#include "compiler/executable.h"
#include "compiler/ir/graph.h"
#include "compiler/passes/passes.h"
#include "compiler/plan/plan.h"
#include "compiler/select/spec.h"
#include "compiler/target.h"

#include <cstdint>
#include <functional>
#include <set>
#include <string>

namespace kfuse {

struct LowerOptions {
  ir::Mode mode = ir::Mode::Train;
  // Precision bf16 on f32 tensors: GEMM operands rounded to bf16 (passes::autocast_bf16), the
  // products on the bf16 Hopper mainloop.
  Target target;
  bool fuse = true; // false: the unfused baseline benchmarks compare against
  // Check: stop after parsing and verifying, with what the GPU path does not run reported at its
  // location (`kfuse check`; the target is not checked where target.arch is empty). Plan: stop
  // after the plan, with no CUDA (`kfuse plan` shows plans of pipelines the GPU path does not
  // run yet).
  enum class Until : uint8_t { Check, Plan, Cuda } until = Until::Cuda;
  // Given the GEMM kernels the heuristics selected, the tuned configurations to select instead
  // (runtime/tuning_store.h looks them up); empty, or none returned: the heuristics' choices.
  std::function<codegen::GemmTunings(const std::vector<exec::TunableGemm> &)> tunings = {};
  // lower_training: the inputs and params whose gradients are not wanted (ir::grad's frozen).
  std::set<std::string> frozen = {};
  // Called with the IR after every pass (`kfuse plan --dump-after-each-pass`).
  std::function<void(const passes::Pass &, const ir::Graph &)> after_pass = {};
};

struct Lowered {
  ir::Graph graph;          // as parsed, with autocast_bf16's roundings where asked for
  plan::Plan plan;          // its graph is the IR after every pass
  codegen::Program program; // empty when lowered until the plan
  Target target;            // LowerOptions::target
};

// Throws dsl::DiagnosticError for a .kf error or (lowering to CUDA) what the GPU path does not
// run (codegen::gpu_unsupported), kfuse::Error for a KFUSE_DUMP it cannot honour.
Lowered lower(const dsl::SourceFile &src, const LowerOptions &options);

} // namespace kfuse
