// kfuse tune F.kf --dim N=... [--mode train|eval] [--precision fp32|3xtf32|tf32|bf16]
//                 [--arch sm_XX] [--iters 20] [--warmup 3] [--seed 1]
// kfuse tune --show
//
// Tunes every GEMM kernel of the pipeline on this GPU (runtime/gemm_tuner.h: each candidate tile
// and split-K cap timed over the whole pipeline, as `kfuse bench` times) and prints every
// candidate's time; the winners go to the tuning store (runtime/tuning_store.h), which later
// compiles on this device read (Options::use_tuned, --no-tuned). --show lists the store.
#include "compiler/build_executable.h"
#include "compiler/dsl/source.h"
#include "compiler/lower.h"
#include "runtime/gemm_tuner.h"
#include "runtime/pipeline.h"
#include "runtime/tuning_store.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace kfuse::tool {
namespace {

constexpr const char *kUsage =
    "usage: kfuse tune FILE.kf --dim NAME=VALUE... [--mode train|eval] [--precision "
    "fp32|3xtf32|tf32|bf16]\n"
    "                  [--arch sm_XX] [--iters 20] [--warmup 3] [--seed 1]\n"
    "       kfuse tune --show\n";

std::string percent(double ms, double heuristic_ms) {
  return fmt::format("{:+.1f}%", (ms / heuristic_ms - 1) * 100);
}

int show(const CommandLine &cl) {
  if (!cl.positional.empty() || !cl.options.empty() || !cl.dims.empty() || cl.flags.size() != 1)
    throw UsageError(fmt::format("--show takes no file or other option\n{}", kUsage));
  const rt::TuningStore store = rt::TuningStore::from_environment();
  const std::vector<rt::TuningEntry> entries = store.entries();
  std::string out = fmt::format("{} tuned GEMM kernel{} in {}\n", entries.size(),
                                entries.size() == 1 ? "" : "s", store.directory());
  for (const rt::TuningEntry &e : entries) {
    out += fmt::format("{} {} on {} (signature {})\n", e.pipeline, e.kernel, e.device, e.signature);
    if (e.tile)
      out += fmt::format("  tile {:<10} tuned at N={}: {:.4f} ms, heuristic {:.4f} ms ({}), {}\n",
                         e.tile->tile, e.tile->at.rows, e.tile->at.ms, e.tile->at.heuristic_ms,
                         percent(e.tile->at.ms, e.tile->at.heuristic_ms), e.tile->at.date);
    for (const rt::TunedSplit &s : e.splits)
      out +=
          fmt::format("  split-K {:<7} for N in class {} with tile {}, tuned at N={}: {:.4f} "
                      "ms, heuristic {:.4f} ms ({}), {}\n",
                      s.max_splits == 0 ? std::string("rule") : fmt::format("<= {}", s.max_splits),
                      s.rows_class, s.tile, s.at.rows, s.at.ms, s.at.heuristic_ms,
                      percent(s.at.ms, s.at.heuristic_ms), s.at.date);
  }
  write_stdout(out);
  return 0;
}

} // namespace

int cmd_tune(int argc, char **argv) {
  CommandLine cl = parse_command_line(
      argc, argv, {"mode", "precision", "arch", "iters", "warmup", "seed", "dim"}, {"show"});
  if (cl.flag("show"))
    return show(cl);
  Options options = pipeline_options(cl);
  rt::TuningRequest request;
  request.iters = parse_count(cl, "iters", request.iters, 1);
  request.warmup = parse_count(cl, "warmup", request.warmup, 0);
  request.seed = static_cast<uint64_t>(parse_count(cl, "seed", 1, 0));
  const dsl::SourceFile src = dsl::SourceFile::read(cl.file());
  // The dims' usage errors before any GPU work.
  const Lowered parsed = lower(src, [&] {
    LowerOptions lo = lower_options(rt::PipelineAccess::request(options, true));
    lo.until = LowerOptions::Until::Plan;
    return lo;
  }());
  const ir::DimBindings dims = cl.dims_of(parsed.graph, /*all=*/true);
  request.dims.insert(dims.begin(), dims.end());
  const rt::TuningRun run = rt::tune_gemms(src.text(), src.name(), options, request);

  std::string out = fmt::format(
      "{}: {} GEMM kernel{} tuned on {}, {} mode, {} + {} runs each\n", parsed.graph.name,
      run.kernels.size(), run.kernels.size() == 1 ? "" : "s", run.device.text(),
      ir::mode_name(ir_mode(options.mode)), request.warmup, request.iters);
  for (const rt::TunedKernel &k : run.kernels) {
    out += fmt::format("{} ({}, N={}):\n  {:<10} {:>9} {:>3} {:>10} {:>9}\n", k.entry, k.shape,
                       k.rows, "tile", "split-K", "S", "median ms", "vs heur.");
    const double heuristic_ms = k.candidates[k.heuristic].ms;
    for (size_t i = 0; i < k.candidates.size(); ++i) {
      const rt::TunedCandidate &c = k.candidates[i];
      out += fmt::format("  {:<10} {:>9} {:>3} {:>10.4f} {:>9}{}{}{}\n", c.tile,
                         c.cap == 0 ? std::string("rule") : fmt::format("<= {}", c.cap), c.splits,
                         c.ms, percent(c.ms, heuristic_ms), c.ran.empty() ? "" : "  " + c.ran,
                         i == k.heuristic ? "  (heuristic)" : "",
                         i == k.stored    ? "  <- stored"
                         : i == k.fastest ? "  <- fastest, within the noise of the heuristic's"
                                          : "");
    }
  }
  out += fmt::format("pipeline: {:.4f} ms with the heuristics' configs, {:.4f} ms tuned ({})\n"
                     "{} compile{} (NVRTC or the disk cache), {} timing{}, {:.1f} s; stored in "
                     "{}\n",
                     run.heuristic_ms, run.tuned_ms, percent(run.tuned_ms, run.heuristic_ms),
                     run.compiles, run.compiles == 1 ? "" : "s", run.timings,
                     run.timings == 1 ? "" : "s", run.seconds, run.directory);
  write_stdout(out);
  return 0;
}

} // namespace kfuse::tool
