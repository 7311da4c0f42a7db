// kfuse emit F.kf [--mode train|eval] [-o out.cu] [--standalone] [--no-tuned] [--batch-stats-ranks
// R] [--backward [--frozen NAME,...]]
// --backward: the translation units of the forward that saves what the backward reads and of the
// backward, one after the other (each compiles alone); with -o out.cu, the backward's goes to
// out.backward.cu.
#include "compiler/build_executable.h"
#include "compiler/codegen/program.h"
#include "compiler/lower.h"
#include "runtime/pipeline.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"

#include <fmt/format.h>

namespace kfuse::tool {

namespace {

// `out.cu` -> `out.backward.cu`; a name without an extension gets `.backward`.
std::string backward_path(const std::string &path) {
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return path + ".backward";
  return path.substr(0, dot) + ".backward" + path.substr(dot);
}

} // namespace

int cmd_emit(int argc, char **argv) {
  CommandLine cl = parse_command_line(
      argc, argv, {"mode", "output", "precision", "arch", "batch-stats-ranks", "frozen"},
      {"standalone", "no-tuned", "backward"});
  const Options options = pipeline_options(cl);
  const LowerOptions lo = lower_options(rt::PipelineAccess::request(options, /*fuse=*/true));
  const dsl::SourceFile src = dsl::SourceFile::read(cl.file());
  auto text_of = [&](const codegen::Program &prog) {
    return cl.flag("standalone") ? codegen::inline_templates(prog.source) : prog.source;
  };
  const std::string out = cl.option("output", "");
  if (!options.backward) {
    const std::string text = text_of(lower(src, lo).program);
    out.empty() ? write_stdout(text) : write_file(out, text);
    return 0;
  }
  const LoweredTraining t = lower_training(src, lo);
  const std::string forward = text_of(t.forward.program), backward = text_of(t.backward.program);
  if (!out.empty()) {
    write_file(out, forward);
    write_file(backward_path(out), backward);
    return 0;
  }
  write_stdout(fmt::format("// The forward that saves what the backward reads ({}).\n{}\n"
                           "// The backward ({}).\n{}",
                           t.sources.forward.name(), forward, t.sources.backward.name(), backward));
  return 0;
}

} // namespace kfuse::tool
