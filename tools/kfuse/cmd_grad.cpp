// kfuse grad F.kf [--mode train|eval]: the backward graph of the pipeline (compiler/ir/grad.h) as
// .kf, after a header that says what the forward saves for it (and what the backward rebuilds
// from that instead of a save) and which output is whose gradient. `kfuse
// plan|emit|compile|run|bench --backward` plan, compile and run it beside the forward that saves.
// Exit codes as `kfuse check`.
#include "compiler/dsl/diagnostics.h"
#include "compiler/dsl/parser.h"
#include "compiler/ir/grad.h"
#include "compiler/ir/printer.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"

#include <fmt/format.h>

#include <cstdio>

namespace kfuse::tool {
namespace {

constexpr const char *kUsage =
    "usage: kfuse grad FILE.kf [--mode train|eval] [--frozen NAME,...]\n";

std::string header(const ir::Graph &f, const ir::GradResult &r, ir::Mode mode) {
  std::string out =
      fmt::format("# The backward graph of pipeline '{}' in {} mode.\n"
                  "# Run it in the forward's mode, with the forward's random stream.\n",
                  f.name, ir::mode_name(mode));
  out += "# Gradient inputs, one per forward output:";
  for (const std::string &name : r.grad_inputs)
    out += " " + name;
  out += "\n# Saved by the forward (its further outputs):";
  if (r.saved.empty())
    out += " none";
  for (size_t i = 0; i < r.saved.size(); ++i)
    out += fmt::format("\n#   {} = {}", r.saved_names[i], ir::describe(r.forward, r.saved[i]));
  if (!r.recomputed.empty()) {
    out += "\n# Recomputed by the backward from what is saved, not saved:";
    for (ir::ValueId id : r.recomputed)
      out += fmt::format("\n#   {}", ir::describe(r.forward, id));
  }
  out += "\n# Outputs:";
  for (const auto &[id, index] : r.gradients)
    out += fmt::format("\n#   {}: the gradient of {}", index, ir::describe(f, id));
  return out + "\n";
}

} // namespace

int cmd_grad(int argc, char **argv) {
  try {
    CommandLine cl = parse_command_line(argc, argv, {"mode", "frozen"}, {"help"});
    if (cl.flag("help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    const ir::Mode mode = parse_mode(cl.option("mode", "train"));
    const dsl::SourceFile src = dsl::SourceFile::read(cl.file());
    dsl::Diagnostics diags(src);
    const ir::Graph f = dsl::parse_kf(src, diags);
    const std::vector<std::string> frozen = frozen_names(cl);
    const ir::GradResult r = ir::grad(f, mode, {frozen.begin(), frozen.end()});
    write_stdout(header(f, r, mode) + ir::print_kf(r.backward));
    return 0;
  } catch (const dsl::DiagnosticError &e) {
    std::fputs(e.what(), stderr);
  } catch (const UsageError &e) {
    std::fprintf(stderr, "kfuse grad: error: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kfuse grad: error: %s\n", e.what());
  } catch (...) {
    std::fputs("kfuse grad: error: unknown exception\n", stderr);
  }
  return 1;
}

} // namespace kfuse::tool
