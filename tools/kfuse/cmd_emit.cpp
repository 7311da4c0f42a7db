// kfuse emit F.kf [--mode train|eval] [-o out.cu] [--standalone]
#include "compiler/codegen/program.h"
#include "compiler/dsl/parser.h"
#include "compiler/plan/planner.h"
#include "runtime/pipeline.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"

namespace kfuse::tool {

int cmd_emit(int argc, char **argv) {
  CommandLine cl =
      parse_command_line(argc, argv, {"mode", "output", "precision", "arch"}, {"standalone"});
  Options options = pipeline_options(cl);
  ir::Graph g = dsl::parse_kf_file(cl.file());
  codegen::Program prog =
      codegen::generate(plan::make_plan(g, ir_mode(options.mode)), rt::gemm_math(options.precision),
                        rt::target_arch(options.arch));
  std::string text = cl.flag("standalone") ? codegen::inline_templates(prog.source) : prog.source;
  std::string out = cl.option("output", "");
  if (out.empty())
    write_stdout(text);
  else
    write_file(out, text);
  return 0;
}

} // namespace kfuse::tool
