// kfuse plan F.kf [--mode train|eval] [--json] [--dump-after-each-pass] [--dim N=...]
//                 [--precision P] [--arch sm_XX] [--no-tuned] [--batch-stats-ranks R]: the text
//                 form ends with each GEMM kernel's config at that precision and why (heuristic, or
//                 tuned on this GPU)
// kfuse plan F.kf --backward [...]: the plans of the forward that saves what the backward reads,
// and of the backward (docs/DSL.md, "Gradients"), each after a line naming what it reads and
// writes; with --json, one object {"forward": ..., "backward": ...}.
// kfuse plan F.kf --prove [--dim N=...]: proof by interpretation of the plan of F.kf in both
// modes, on random data at several sizes (every dim bound to 1, 2 and 5, a dim that a view
// equates with a product of others to that product, or the --dim values given; a size the file
// cannot run at is said and skipped), then the CUDA of its fused and unfused plans in both
// modes, emitted as `kfuse emit` would; exits 1 when a pass or the partition disagrees with the
// file, when the file runs at none of the sizes, or when codegen cannot emit a plan (a pipeline
// the GPU path does not run is said, and is no failure). The host memory of the proof is
// estimated first and refused above KFUSE_HOST_MEMORY_GB (default: the machine's memory).
#include "compiler/build_executable.h"
#include "compiler/dsl/diagnostics.h"
#include "compiler/ir/host_memory.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/views.h"
#include "compiler/lower.h"
#include "compiler/plan/agreement.h"
#include "compiler/plan/plan_printer.h"
#include "runtime/pipeline.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"

#include <fmt/format.h>

#include <cstdio>

namespace kfuse::tool {
namespace {

// fp64 interpretation of the same math in another order: rounding differences only.
constexpr double kProofTolerance = 1e-9;

// Codegen for the fused and the unfused plan of `src` in each mode, as `kfuse emit` (and, for the
// unfused baseline, `kfuse bench`) make them: the proof covers the plans that run, so one that
// codegen cannot emit fails it. Appends a line per mode to `out`; false on such a failure.
bool prove_emits(const dsl::SourceFile &src, LowerOptions options, std::string &out) {
  options.tunings = {}; // the heuristics' configs: the proof reads no tuning store
  options.until = LowerOptions::Until::Cuda;
  bool ok = true;
  for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
    options.mode = mode;
    std::string line = "emitted:";
    try {
      for (bool fuse : {true, false}) {
        options.fuse = fuse;
        const Lowered l = lower(src, options);
        line += fmt::format("{} {} {}", fuse ? "" : ",", fuse ? "fused" : "unfused",
                            l.program.launches.size());
      }
      line += " kernels";
    } catch (const dsl::DiagnosticError &e) { // the file, in any mode: said once
      out += fmt::format("{:<18} not emitted: {}", "cuda", e.what());
      return true;
    } catch (const std::exception &e) {
      line = fmt::format("CANNOT EMIT: {}", e.what());
      ok = false;
    }
    out += fmt::format("{:<5} {:<12} {}\n", ir::mode_name(mode), "cuda", line);
  }
  return ok;
}

int prove(const ir::Graph &g, const ir::DimBindings &given, const dsl::SourceFile &src,
          const LowerOptions &emit_options) {
  std::vector<ir::DimBindings> sizes;
  if (!given.empty() || g.dims.empty()) {
    sizes.push_back(given);
  } else {
    for (int64_t n : {1, 2, 5})
      sizes.push_back(ir::view_consistent_dims(g, n));
  }
  // Before any tensor is made. The proof holds the file's tensors, the reference run's copy and
  // a stage's, and every value of one interpretation.
  for (const ir::DimBindings &dims : sizes)
    ir::check_host_memory("kfuse plan --prove", dims, ir::fp64_host_bytes(g, dims, 3, true));
  std::string out;
  bool agree = true;
  int proved = 0;
  uint64_t seed = 1;
  for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval})
    for (const ir::DimBindings &dims : sizes) {
      std::vector<std::string> bound;
      for (const auto &[name, value] : dims)
        bound.push_back(fmt::format("{}={}", name, value));
      std::string file_error;
      const std::vector<plan::StageError> stages =
          plan::check_planner(g, mode, dims, seed++, passes::pipeline(), {}, &file_error);
      // Sizes the file itself cannot run at (a view whose rows the dims make differ) prove
      // nothing: every stage fails the same way there.
      if (!file_error.empty()) {
        out += fmt::format("{:<5} {:<12} not run: {}\n", ir::mode_name(mode), fmt::join(bound, " "),
                           file_error);
        continue;
      }
      plan::StageError worst = plan::first_failure(stages, kProofTolerance);
      bool ok = worst.error <= kProofTolerance;
      agree = agree && ok;
      proved += ok;
      out += fmt::format("{:<5} {:<12} {} (error {:.3g} {} {})\n", ir::mode_name(mode),
                         fmt::join(bound, " "), ok ? "agrees" : "DISAGREES", worst.error,
                         ok ? "worst at" : "at", worst.stage);
    }
  const bool emitted = prove_emits(src, emit_options, out);
  out += !agree        ? "FAILED: the planner changed what the file computes\n"
         : proved == 0 ? "FAILED: the file runs at none of these sizes (--dim gives others)\n"
         : !emitted    ? "FAILED: codegen cannot emit a plan the planner made\n"
                       : "PROVED: every pass and the plan agree with the file\n";
  write_stdout(out);
  return agree && proved > 0 && emitted ? 0 : 1;
}

// The config each GEMM kernel of `program` (lowered with `lo`, as `kfuse compile` builds it)
// takes and why, or why there is none: a pipeline the GPU path does not run still has a plan.
std::string gemm_configs(const codegen::Program *program, const LowerOptions &lo,
                         const Options &options, const CommandLine &cl) {
  const char *source = !options.use_tuned ? ", --no-tuned: the heuristics'"
                       : lo.tunings       ? ""
                                          : ", the heuristics': no GPU to look tuned ones up for";
  std::string s = fmt::format("\nGEMM configs ({}, {}{}):\n", cl.option("precision", "fp32"),
                              lo.target.arch, source);
  if (!program)
    return s + "  none: the GPU path does not run this pipeline (kfuse compile says why)\n";
  for (const codegen::KernelLaunch &k : program->launches)
    if (!k.signature.empty()) {
      s += fmt::format("  {}: {}\n", k.entry, k.config);
      for (const codegen::KernelLaunch &v : k.by_rows)
        s += fmt::format("  {}: {}\n", v.entry, v.config);
    }
  return s;
}

// `src` lowered for its plan: to CUDA for the text form, which ends with the GEMM configs; the
// plan of a pipeline the GPU path does not run (gpu_runs false) is lowered until the plan only.
Lowered lower_for_plan(const dsl::SourceFile &src, LowerOptions options, bool text,
                       bool &gpu_runs) {
  options.until = text ? LowerOptions::Until::Cuda : LowerOptions::Until::Plan;
  gpu_runs = text;
  try {
    return lower(src, options);
  } catch (const dsl::DiagnosticError &) {
    if (!text)
      throw;
    gpu_runs = false;
    options.until = LowerOptions::Until::Plan; // a .kf error is raised again here
    return lower(src, options);
  }
}

std::string plan_output(const dsl::SourceFile &src, const LowerOptions &options,
                        const Options &pipeline, const CommandLine &cl) {
  const bool text = !cl.flag("json");
  bool gpu_runs = false;
  const Lowered lowered = lower_for_plan(src, options, text, gpu_runs);
  const ir::DimBindings dims = cl.dims_of(lowered.graph, /*all=*/false);
  if (!text)
    return plan::print_plan_json(lowered.plan, dims);
  return plan::print_plan_text(lowered.plan, dims) +
         gemm_configs(gpu_runs ? &lowered.program : nullptr, options, pipeline, cl);
}

// --backward: the plans of the forward that saves for the backward and of the backward
// (compiler/build_executable.h, TrainingSources), each after a line saying what it reads and
// writes; --json: one object holding both.
std::string training_plans(const dsl::SourceFile &src, const LowerOptions &options,
                           const Options &pipeline, const CommandLine &cl) {
  const TrainingSources t = training_sources(src, options.mode, options.frozen);
  const std::string forward = plan_output(t.forward, options, pipeline, cl);
  const std::string backward = plan_output(t.backward, options, pipeline, cl);
  if (cl.flag("json"))
    return fmt::format("{{\n\"forward\": {},\n\"backward\": {}}}\n", forward, backward);
  std::vector<std::string> outputs;
  for (size_t i = 0; i < t.outputs; ++i)
    outputs.push_back(fmt::format("output {}", i));
  std::vector<std::string> reads = t.grad_inputs;
  reads.insert(reads.end(), t.saved.begin(), t.saved.end());
  return fmt::format("# forward ({} mode): {}, then saves {} for the backward\n{}\n"
                     "# backward ({} mode): reads {}; the gradients of {}\n{}",
                     ir::mode_name(options.mode), fmt::join(outputs, ", "),
                     t.saved.empty() ? "nothing" : fmt::format("{}", fmt::join(t.saved, ", ")),
                     forward, ir::mode_name(options.mode), fmt::join(reads, ", "),
                     fmt::join(t.gradients, ", "), backward);
}

} // namespace

int cmd_plan(int argc, char **argv) {
  CommandLine cl = parse_command_line(
      argc, argv, {"mode", "dim", "precision", "arch", "batch-stats-ranks", "frozen"},
      {"json", "dump-after-each-pass", "prove", "no-tuned", "backward"});
  const bool prove_plan = cl.flag("prove");
  if (prove_plan &&
      (cl.options.count("mode") || cl.flag("json") || cl.flag("dump-after-each-pass")))
    throw UsageError("--prove checks both modes and prints its own report: it takes no "
                     "--mode, --json or --dump-after-each-pass");
  if (prove_plan && cl.flag("backward"))
    throw UsageError("--prove checks the file's own plan, not its backward's (kfuse run "
                     "--backward checks the gradients)");
  // Precision bf16 changes the graph (its roundings), not only the GEMMs' math: the plan, and
  // --prove, are of the graph with them.
  const Options pipeline = pipeline_options(cl);
  LowerOptions options = lower_options(rt::PipelineAccess::request(pipeline, true));
  if (cl.flag("dump-after-each-pass"))
    options.after_pass = [](const passes::Pass &pass, const ir::Graph &out) {
      std::fprintf(stderr, "# IR after %.*s\n%s\n", static_cast<int>(pass.name.size()),
                   pass.name.data(), ir::print_kf(out).c_str());
    };
  const dsl::SourceFile src = dsl::SourceFile::read(cl.file());
  if (prove_plan) {
    bool gpu_runs = false;
    const Lowered lowered = lower_for_plan(src, options, /*text=*/false, gpu_runs);
    const ir::Graph &g = lowered.graph;
    return prove(g, cl.dims_of(g, /*all=*/!cl.dims.empty()), src, options);
  }
  write_stdout(cl.flag("backward") ? training_plans(src, options, pipeline, cl)
                                   : plan_output(src, options, pipeline, cl));
  return 0;
}

} // namespace kfuse::tool
