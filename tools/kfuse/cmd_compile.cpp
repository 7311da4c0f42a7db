// kfuse compile F.kf [--mode] [--precision] [--arch] [--no-tuned] [--batch-stats-ranks R]
// [--backward (the forward that saves, then the backward)]: NVRTC
// through the disk cache; no GPU needed. Prints the compile time, whether it was a cache hit, each
// kernel's (and each GEMM variant's) resources and each GEMM's config and why (the heuristic's
// reason, or "tuned on <device> at N=...": on a GPU the configs `kfuse tune` stored for it are used
// unless
// --no-tuned).
#include "runtime/pipeline.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"

#include <cstdio>
#include <fmt/format.h>

namespace kfuse::tool {

namespace {

void print_report(const Pipeline &p) {
  const CompileReport &r = p.report();
  size_t variants = 0;
  for (const KernelReport &k : r.kernels)
    variants += k.variant;
  const size_t kernels = r.kernels.size() - variants;
  const std::string with =
      variants == 0 ? "" : fmt::format(" and {} variant{}", variants, variants == 1 ? "" : "s");
  std::printf("%s: %zu kernel%s%s for %s, %.1f ms (%s)\n", p.name().c_str(), kernels,
              kernels == 1 ? "" : "s", with.c_str(), r.arch.c_str(), r.milliseconds,
              r.cache_hit ? "cache hit" : "compiled with NVRTC");
  std::printf("  %-20s %9s %12s %11s %13s %12s\n", "kernel", "registers", "static smem",
              "stack bytes", "spill stores", "spill loads");
  for (const KernelReport &k : r.kernels)
    std::printf("  %-20s %9d %12d %11d %13d %12d\n", k.name.c_str(), k.registers, k.shared_bytes,
                k.stack_bytes, k.spill_stores, k.spill_loads);
  for (const KernelReport &k : r.kernels)
    if (!k.config.empty())
      std::printf("  %s: %s\n", k.name.c_str(), k.config.c_str());
  for (const KernelReport &k : r.kernels)
    if (!k.unused.empty())
      std::printf("  %s: not used: %s\n", k.name.c_str(), k.unused.c_str());
  std::printf("cache key %s\n", r.cache_key.c_str());
}

} // namespace

int cmd_compile(int argc, char **argv) {
  CommandLine cl =
      parse_command_line(argc, argv, {"mode", "precision", "arch", "batch-stats-ranks", "frozen"},
                         {"no-tuned", "backward"});
  Pipeline p = Pipeline::from_file(cl.file(), pipeline_options(cl));
  print_report(p); // with --backward, the forward that saves what the backward reads
  if (cl.flag("backward"))
    print_report(rt::PipelineAccess::backward(p));
  return 0;
}

} // namespace kfuse::tool
