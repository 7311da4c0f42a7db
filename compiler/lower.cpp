#include "compiler/lower.h"

#include "compiler/codegen/gpu_support.h"
#include "compiler/dsl/parser.h"
#include "compiler/dump.h"
#include "compiler/ir/printer.h"
#include "compiler/plan/plan_printer.h"
#include "compiler/plan/planner.h"
#include "compiler/select/select.h"

#include <fmt/format.h>

namespace kfuse {

Lowered lower(const dsl::SourceFile &src, const LowerOptions &options) {
  Lowered l;
  l.target = options.target;
  dsl::Diagnostics diags(src);
  l.graph = dsl::parse_kf(src, diags);
  const Dump dump(l.graph.name, ir::mode_name(options.mode));
  if (dump.wants("ir"))
    dump.emit("0-parsed", ".kf", ir::print_kf(l.graph));
  int step = 0;
  // Rewrites the target asks for before planning: precision bf16 rounds the GEMMs' operands
  // (the graph that then defines the pipeline), the Hopper mainloop reads K-major operands, and
  // at tf32 its weights come rounded.
  auto apply = [&](const passes::Pass &pass) {
    l.graph = pass.run(l.graph, options.mode);
    if (options.after_pass)
      options.after_pass(pass, l.graph);
    if (dump.wants("ir"))
      dump.emit(fmt::format("{}-{}", ++step, pass.name), ".kf", ir::print_kf(l.graph));
  };
  if (options.target.precision == Precision::BF16)
    apply({"autocast_bf16", passes::autocast_bf16});
  if (codegen::hopper_gemms(l.graph, options.target.arch, options.target.precision))
    apply({"k_major_operands", passes::k_major_operands});
  if (options.target.precision == Precision::TF32 && options.target.arch == "sm_90a")
    apply({"round_tf32", passes::round_tf32});
  const bool to_cuda = options.until == LowerOptions::Until::Cuda;
  const bool check = options.until == LowerOptions::Until::Check;
  if (auto unsupported = codegen::gpu_unsupported(l.graph, options.target.arch);
      unsupported && (to_cuda || check))
    diags.error(l.graph[unsupported->value].loc, unsupported->message);
  if (check)
    return l;
  l.plan = plan::make_plan(
      l.graph, options.mode,
      [&](const passes::Pass &pass, const ir::Graph &after) {
        if (options.after_pass)
          options.after_pass(pass, after);
        if (dump.wants("ir"))
          dump.emit(fmt::format("{}-{}", ++step, pass.name), ".kf", ir::print_kf(after));
      },
      options.fuse, options.target.batch_stats_ranks);
  if (dump.wants("plan"))
    dump.emit("plan", ".txt", plan::print_plan_text(l.plan, {}));
  if (!to_cuda)
    return l;
  const plan::Plan kernels = select::kernel_view(l.plan);
  auto select_with = [&](const codegen::GemmTunings &tuned) {
    try {
      return select::select_kernels(kernels, options.target, tuned);
    } catch (const select::UnsupportedGemm &e) {
      diags.error(kernels.graph[e.value].loc, e.reason);
    }
  };
  select::Selection specs = select_with({});
  if (options.tunings)
    if (const codegen::GemmTunings tuned = options.tunings(select::gemm_keys(kernels, specs));
        !tuned.empty())
      specs = select_with(tuned);
  l.program = codegen::emit(kernels, specs, options.target.arch);
  if (dump.wants("cuda"))
    dump.emit("cuda", ".cu", l.program.source);
  if (dump.wants("launch"))
    dump.emit("launch", ".txt", codegen::launch_text(l.program, l.plan));
  return l;
}

} // namespace kfuse
