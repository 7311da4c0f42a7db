// kfuse plan F.kf [--mode train|eval] [--json] [--dump-after-each-pass] [--dim N=...]
#include "compiler/dsl/parser.h"
#include "compiler/ir/printer.h"
#include "compiler/plan/plan_printer.h"
#include "compiler/plan/planner.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"

#include <cstdio>

namespace kfuse::tool {

int cmd_plan(int argc, char **argv) {
  CommandLine cl = parse_command_line(argc, argv, {"mode"}, {"json", "dump-after-each-pass"});
  ir::Mode mode = parse_mode(cl.option("mode", "train"));
  ir::Graph g = dsl::parse_kf_file(cl.file());
  bool dump = cl.flag("dump-after-each-pass");
  plan::Plan p = plan::make_plan(g, mode, [&](const passes::Pass &pass, const ir::Graph &out) {
    if (dump)
      std::fprintf(stderr, "# IR after %.*s\n%s\n", static_cast<int>(pass.name.size()),
                   pass.name.data(), ir::print_kf(out).c_str());
  });
  std::string text = cl.flag("json") ? plan::print_plan_json(p, cl.dims) : plan::print_plan_text(p, cl.dims);
  std::fputs(text.c_str(), stdout);
  return 0;
}

} // namespace kfuse::tool
