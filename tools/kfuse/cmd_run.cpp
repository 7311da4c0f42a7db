// kfuse run F.kf --dim N=... [--mode] [--precision] [--seed S] [--steps K] [--save DIR]
//               [--no-reference] [--max-split-k S (1: split-K off)] [--no-tuned] [--dropout-seed S]
//               [--backward [--frozen NAME,...]]
// Random inputs in each tensor's declared type, checked against the fp64 reference interpreter;
// exits 1 when an error is over the bound (the precision's; 2e-2 where a tensor is bf16/f16) or a
// result is not finite. --no-reference skips the CPU reference (hours at the founding sizes).
// --dropout-seed seeds train-mode dropout (offset 0, advanced by each step; default 0).
// --backward: after the last step, the backward (Options::backward) on random output gradients,
// every gradient ("grad <name>") checked against the fp64 interpreter's backward graph, within the
// same bound or no more than 1.5x as far from its exact values (no rounding at its casts) as the
// interpreter's own result (rt::CheckEntry::within).
// With random inputs, the GPU is looked for first, then the host memory the reference needs is
// estimated and refused above KFUSE_HOST_MEMORY_GB (default: the machine's memory).
//
// kfuse run F.kf --inputs DIR [--steps K] [--save OUT] [--reference]: every input, param and
// state from DIR/<name>.npy (float32 or float16, int64 for an i64 tensor; C order, rounded to
// the declared type; the dims come from the shapes); outputs and updated state back to DIR, or
// everything to OUT with --save (docs/FORMATS.md). Checked against the fp64 reference only with
// --reference, else for finiteness.
#include "compiler/build_executable.h"
#include "compiler/dsl/source.h"
#include "compiler/ir/host_memory.h"
#include "compiler/lower.h"
#include "runtime/driver.h"
#include "runtime/pipeline.h"
#include "tools/check/reference_check.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <limits>
#include <optional>

namespace kfuse::tool {

namespace {

int positive(const CommandLine &cl, const std::string &name, int fallback) {
  std::string text = cl.option(name, std::to_string(fallback));
  char *end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end || v < 1 || v > 1000000)
    throw UsageError("--" + name + " must be a positive integer, got '" + text + "'");
  return static_cast<int>(v);
}

uint64_t unsigned64(const CommandLine &cl, const std::string &name) {
  std::string text = cl.option(name, "0");
  char *end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] == '-' || *end || errno == ERANGE)
    throw UsageError("--" + name + " must be an integer in [0, 2^64), got '" + text + "'");
  return v;
}

// The fp64 reference's host memory at the request's dims (each dim bound), the backward graph's
// (--backward) too, within KFUSE_HOST_MEMORY_GB.
void require_host_memory(const ir::Graph &g, const ir::Graph *backward,
                         const rt::CheckRequest &req) {
  if (!std::all_of(g.dims.begin(), g.dims.end(), [&](const auto &d) { return req.dims.count(d); }))
    return;
  const int64_t bytes = ir::fp64_host_bytes(g, req.dims, 3, req.reference);
  const int64_t more = backward ? ir::fp64_host_bytes(*backward, req.dims, 3, req.reference) : 0;
  const int64_t most = std::numeric_limits<int64_t>::max(); // where both saturate
  ir::check_host_memory("kfuse run", req.dims, more > most - bytes ? most : bytes + more);
}

} // namespace

int cmd_run(int argc, char **argv) {
  CommandLine cl = parse_command_line(argc, argv,
                                      {"mode", "precision", "arch", "seed", "steps", "save", "dim",
                                       "inputs", "max-split-k", "dropout-seed", "frozen"},
                                      {"no-reference", "reference", "no-tuned", "backward"});
  if (cl.flag("reference") && cl.flag("no-reference"))
    throw UsageError("--reference and --no-reference contradict each other");
  if (cl.flag("backward") && (cl.options.count("inputs") || cl.options.count("save")))
    throw UsageError("--backward runs on random inputs and output gradients: it takes no "
                     "--inputs or --save");
  rt::CheckRequest req;
  dsl::SourceFile src = dsl::SourceFile::read(cl.file());
  req.kf_text = src.text();
  req.file_name = cl.file();
  req.options = pipeline_options(cl);
  const LowerOptions lo = lower_options(rt::PipelineAccess::request(req.options, true));
  // --backward: the forward that saves is the reference's forward, the backward graph its
  // backward's; one lowering each, compiled into one pipeline.
  std::optional<LoweredTraining> training;
  std::optional<Lowered> plain;
  if (req.options.backward)
    training = lower_training(src, lo);
  else
    plain = lower(src, lo);
  const Lowered &lowered = training ? training->forward : *plain;
  Pipeline pipeline = training ? rt::PipelineAccess::compile_training(build_training(*training))
                               : rt::PipelineAccess::compile(build_executable(lowered));
  if (training)
    req.backward = {&training->backward.graph, training->sources.grad_inputs,
                    training->sources.saved};
  const ir::Graph &g = lowered.graph;
  req.dims = cl.dims_of(g, /*all=*/false);
  req.seed = static_cast<uint64_t>(positive(cl, "seed", 1));
  req.steps = positive(cl, "steps", 1);
  req.rng = {unsigned64(cl, "dropout-seed"), 0};
  req.save_dir = cl.option("save", "");
  req.inputs_dir = cl.option("inputs", "");
  req.reference = req.inputs_dir.empty() ? !cl.flag("no-reference") : cl.flag("reference");
  if (req.inputs_dir.empty()) { // (--inputs checks the user's files first: no GPU needed)
    // Random inputs cost host work in proportion to the sizes: first the GPU, then the memory.
    rt::Driver::get().require();
    require_host_memory(g, training ? &training->backward.graph : nullptr, req);
  }
  rt::CheckResult r = rt::check_against_reference(pipeline, lowered.graph, req);
  double bound = rt::error_bound(req.options.precision, lowered.graph);
  if (training)
    bound = std::max(bound, rt::error_bound(req.options.precision, training->backward.graph));
  std::printf("%-16s %12s %14s  (bound %.0e, %d step%s, seed %llu%s)\n", "tensor", "max abs err",
              "rel err", bound, req.steps, req.steps == 1 ? "" : "s",
              static_cast<unsigned long long>(req.seed),
              req.reference ? "" : "; no reference: finiteness only");
  bool ok = true;
  for (const rt::CheckEntry &e : r.entries) {
    const bool within = e.within(bound);
    const std::string status =
        !e.finite             ? "NOT FINITE"
        : e.relative <= bound ? "ok"
        : e.within_given_saved(bound)
            ? fmt::format("ok: {:.3e} on the values the GPU's forward saved",
                          e.given_saved_relative)
        : e.within_summed(bound)
            ? fmt::format("ok: {:.3e} of its terms' magnitudes on the values the GPU's forward "
                          "saved (a sum that cancels)",
                          e.summed_relative)
        : e.reference_relative < 0
            ? "OVER BOUND"
            : fmt::format("{}: {:.3e} on the values the GPU's forward saved, {:.3e} from the "
                          "exact values, the reference {:.3e} (its casts' rounding)",
                          within ? "ok" : "OVER BOUND", e.given_saved_relative, e.exact_relative,
                          e.reference_relative);
    std::printf("%-16s %12.3e %14.3e  %s\n", e.name.c_str(), e.max_abs, e.relative, status.c_str());
    ok = ok && within;
  }
  for (const std::string &f : r.files)
    std::printf("wrote %s\n", f.c_str());
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

} // namespace kfuse::tool
