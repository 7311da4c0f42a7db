// kfuse run F.kf --dim N=... [--mode] [--precision] [--seed S] [--steps K] [--save DIR]
//               [--no-reference] [--max-split-k S (1: split-K off)] [--no-tuned] [--dropout-seed S]
// Random inputs in each tensor's declared type, checked against the fp64 reference interpreter;
// exits 1 when an error is over the bound (the precision's; 2e-2 where a tensor is bf16/f16) or a
// result is not finite. --no-reference skips the CPU reference (hours at the founding sizes).
// --dropout-seed seeds train-mode dropout (offset 0, advanced by each step; default 0).
// With random inputs, the GPU is looked for first, then the host memory the reference needs is
// estimated and refused above KFUSE_HOST_MEMORY_GB (default: the machine's memory).
//
// kfuse run F.kf --inputs DIR [--steps K] [--save OUT] [--reference]: every input, param and
// state from DIR/<name>.npy (float32 or float16, C order, rounded to the declared type; the dims
// come from the shapes); outputs and updated state back to DIR, or everything to OUT with --save
// (docs/FORMATS.md). Checked against the fp64 reference only with --reference, else for finiteness.
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

} // namespace

int cmd_run(int argc, char **argv) {
  CommandLine cl = parse_command_line(argc, argv,
                                      {"mode", "precision", "arch", "seed", "steps", "save", "dim",
                                       "inputs", "max-split-k", "dropout-seed"},
                                      {"no-reference", "reference", "no-tuned"});
  if (cl.flag("reference") && cl.flag("no-reference"))
    throw UsageError("--reference and --no-reference contradict each other");
  rt::CheckRequest req;
  dsl::SourceFile src = dsl::SourceFile::read(cl.file());
  req.kf_text = src.text();
  req.file_name = cl.file();
  req.options = pipeline_options(cl);
  const Lowered lowered = lower(src, lower_options(rt::PipelineAccess::request(req.options, true)));
  Pipeline pipeline = rt::PipelineAccess::compile(build_executable(lowered));
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
    if (std::all_of(g.dims.begin(), g.dims.end(), [&](const auto &d) { return req.dims.count(d); }))
      ir::check_host_memory("kfuse run", req.dims,
                            ir::fp64_host_bytes(g, req.dims, 3, req.reference));
  }
  rt::CheckResult r = rt::check_against_reference(pipeline, lowered.graph, req);
  double bound = rt::error_bound(req.options.precision, lowered.graph);
  std::printf("%-16s %12s %14s  (bound %.0e, %d step%s, seed %llu%s)\n", "tensor", "max abs err",
              "rel err", bound, req.steps, req.steps == 1 ? "" : "s",
              static_cast<unsigned long long>(req.seed),
              req.reference ? "" : "; no reference: finiteness only");
  for (const rt::CheckEntry &e : r.entries)
    std::printf("%-16s %12.3e %14.3e  %s\n", e.name.c_str(), e.max_abs, e.relative,
                !e.finite             ? "NOT FINITE"
                : e.relative <= bound ? "ok"
                                      : "OVER BOUND");
  for (const std::string &f : r.files)
    std::printf("wrote %s\n", f.c_str());
  bool ok = r.worst <= bound;
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

} // namespace kfuse::tool
