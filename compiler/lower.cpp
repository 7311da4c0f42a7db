#include "compiler/lower.h"

#include "compiler/codegen/gpu_support.h"
#include "compiler/dsl/parser.h"
#include "compiler/ir/printer.h"
#include "compiler/plan/plan_printer.h"
#include "compiler/plan/planner.h"
#include "kfuse/error.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace kfuse {
namespace {

// What KFUSE_DUMP asks for, and where it goes. Read at every lower(): pipelines are compiled
// at program start, and tests set the variable around one compile.
struct Dump {
  std::set<std::string> what;
  std::string dir; // empty: stderr
  std::string prefix;

  Dump(const std::string &pipeline, ir::Mode mode)
      : prefix(fmt::format("{}.{}", pipeline, ir::mode_name(mode))) {
    const char *env = std::getenv("KFUSE_DUMP");
    std::stringstream items(env ? env : "");
    for (std::string item; std::getline(items, item, ',');) {
      if (item != "ir" && item != "plan" && item != "cuda" && item != "launch")
        throw Error(fmt::format(
            "KFUSE_DUMP: '{}' is not one of ir, plan, cuda, launch (ptx and sass dumps do not "
            "exist yet)",
            item));
      what.insert(item);
    }
    const char *d = std::getenv("KFUSE_DUMP_DIR");
    dir = d ? d : "";
  }

  bool wants(const char *item) const { return what.count(item) != 0; }

  void emit(const std::string &step, const std::string &extension, const std::string &text) const {
    if (dir.empty()) {
      std::fprintf(stderr, "// ---- KFUSE_DUMP %s.%s\n%s\n", prefix.c_str(), step.c_str(),
                   text.c_str());
      return;
    }
    std::string path = fmt::format("{}/{}.{}{}", dir, prefix, step, extension);
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out)
      throw Error(fmt::format("KFUSE_DUMP_DIR: cannot write {}", path));
  }
};

} // namespace

Lowered lower(const dsl::SourceFile &src, const LowerOptions &options) {
  Lowered l;
  dsl::Diagnostics diags(src);
  l.graph = dsl::parse_kf(src, diags);
  if (auto unsupported = codegen::gpu_unsupported(l.graph, options.arch))
    diags.error(l.graph[unsupported->value].loc, unsupported->message);
  const Dump dump(l.graph.name, options.mode);
  if (dump.wants("ir"))
    dump.emit("0-parsed", ".kf", ir::print_kf(l.graph));
  int step = 0;
  l.plan = plan::make_plan(
      l.graph, options.mode,
      [&](const passes::Pass &pass, const ir::Graph &after) {
        if (dump.wants("ir"))
          dump.emit(fmt::format("{}-{}", ++step, pass.name), ".kf", ir::print_kf(after));
      },
      options.fuse);
  if (dump.wants("plan"))
    dump.emit("plan", ".txt", plan::print_plan_text(l.plan, {}));
  l.program = codegen::generate(l.plan, options.math, options.arch);
  if (dump.wants("cuda"))
    dump.emit("cuda", ".cu", l.program.source);
  if (dump.wants("launch"))
    dump.emit("launch", ".txt", codegen::launch_text(l.program, l.plan));
  return l;
}

} // namespace kfuse
