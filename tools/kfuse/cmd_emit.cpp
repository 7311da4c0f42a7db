// kfuse emit F.kf [--mode train|eval] [-o out.cu] [--standalone] [--no-tuned] [--batch-stats-ranks
// R]
#include "compiler/build_executable.h"
#include "compiler/codegen/program.h"
#include "compiler/lower.h"
#include "runtime/pipeline.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"

namespace kfuse::tool {

int cmd_emit(int argc, char **argv) {
  CommandLine cl =
      parse_command_line(argc, argv, {"mode", "output", "precision", "arch", "batch-stats-ranks"},
                         {"standalone", "no-tuned"});
  const Options options = pipeline_options(cl);
  const codegen::Program prog =
      lower(dsl::SourceFile::read(cl.file()),
            lower_options(rt::PipelineAccess::request(options, /*fuse=*/true)))
          .program;
  std::string text = cl.flag("standalone") ? codegen::inline_templates(prog.source) : prog.source;
  std::string out = cl.option("output", "");
  if (out.empty())
    write_stdout(text);
  else
    write_file(out, text);
  return 0;
}

} // namespace kfuse::tool
