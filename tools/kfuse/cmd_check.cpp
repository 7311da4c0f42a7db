// kfuse check F.kf [--print] [--dim N=...]: lower() until the check (parse and verify, report
// what the GPU path does not run at its location), print every value's type and, with --print,
// the canonical IR. Exits 0 on success and 1 on any error, usage errors
// included: scripts may rely on exactly these two codes.
#include "compiler/dsl/diagnostics.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "compiler/lower.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"

#include <fmt/format.h>

#include <cstdio>

namespace kfuse::tool {
namespace {

constexpr const char *kUsage = "usage: kfuse check FILE.kf [--print] [--dim NAME=VALUE]...\n";

// `t` with the dims bound on the command line replaced by their values.
ir::TensorType bind(ir::TensorType t, const std::map<std::string, int64_t> &dims) {
  for (ir::Dim &d : t.shape)
    if (auto it = dims.find(d.sym); d.is_symbolic() && it != dims.end())
      d = ir::Dim::constant(it->second);
  return t;
}

std::string report(const ir::Graph &g, const ir::DimBindings &dims) {
  std::vector<std::string> names = ir::printed_names(g);
  size_t ops = 0;
  for (const ir::Value &v : g.values)
    ops += v.is_op();
  std::vector<std::string> bound;
  for (const auto &[name, value] : dims)
    bound.push_back(fmt::format("{}={}", name, value));
  std::string out =
      fmt::format("pipeline {}{}: {} declarations, {} ops, {} output{}\n", g.name,
                  bound.empty() ? "" : fmt::format(" ({})", fmt::join(bound, ", ")),
                  g.values.size() - ops, ops, g.outputs.size(), g.outputs.size() == 1 ? "" : "s");
  for (size_t i = 0; i < g.values.size(); ++i) {
    const ir::Value &v = g.values[i];
    if (!v.is_effect()) {
      out += fmt::format("{}: {}\n", names[i], bind(v.type, dims).str());
      continue;
    }
    std::vector<std::string> states;
    for (int a : ir::updated_args(v))
      states.push_back(names.at(static_cast<size_t>(v.args[static_cast<size_t>(a)])));
    out += fmt::format("{}: effect, updates {}\n", ir::op_info(v.op).name, fmt::join(states, ", "));
  }
  return out;
}

} // namespace

int cmd_check(int argc, char **argv) {
  try {
    CommandLine cl = parse_command_line(argc, argv, {"dim"}, {"print", "help"});
    if (cl.flag("help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    LowerOptions options;
    options.until = LowerOptions::Until::Check;
    const ir::Graph g = lower(dsl::SourceFile::read(cl.file()), options).graph;
    std::string out = report(g, cl.dims_of(g, /*all=*/false));
    if (cl.flag("print"))
      out += "\n" + ir::print_kf(g);
    write_stdout(out);
    return 0;
  } catch (const dsl::DiagnosticError &e) {
    std::fputs(e.what(), stderr);
  } catch (const UsageError &e) {
    // The command line, not the file, is wrong: exit 2, as every kfuse command does for it.
    std::fprintf(stderr, "kfuse check: error: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "kfuse check: error: %s\n", e.what());
  } catch (...) {
    std::fputs("kfuse check: error: unknown exception\n", stderr);
  }
  return 1;
}

} // namespace kfuse::tool
