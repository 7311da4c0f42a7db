// kfuse emit F.kf [--mode train|eval] [-o out.cu] [--standalone]
#include "compiler/codegen/program.h"
#include "compiler/lower.h"
#include "runtime/pipeline.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"

namespace kfuse::tool {

int cmd_emit(int argc, char **argv) {
  CommandLine cl =
      parse_command_line(argc, argv, {"mode", "output", "precision", "arch"}, {"standalone"});
  Options options = pipeline_options(cl);
  // Through lower(), so what the GPU path cannot run is reported at its source location.
  codegen::Program prog = lower(dsl::SourceFile::read(cl.file()),
                                {ir_mode(options.mode), rt::gemm_math(options.precision), true,
                                 rt::target_arch(options.arch)})
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
