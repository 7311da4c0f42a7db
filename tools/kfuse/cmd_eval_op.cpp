// kfuse eval-op EXPR: the fp64 reference interpreter on one expression, for checking op
// semantics against another implementation (bench/op_parity.py against PyTorch float64).
//
// EXPR is a .kf expression over the inputs `a` and `b` (f32[n], n the number of input
// lines, written as a number so that a pool's output width is one too), e.g. 'leaky_relu(a,
// negative_slope=0.2)' or 'maximum(a, b)'. Each line of stdin holds a value of a, and of b after it
// when EXPR reads b ("nan", "inf" and "-inf" too). Prints one result per line, "%.17g" (exact for a
// double).
#include "compiler/dsl/parser.h"
#include "compiler/ir/interpreter.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

namespace kfuse::tool {

int cmd_eval_op(int argc, char **argv) {
  CommandLine cl = parse_command_line(argc, argv, {}, {});
  if (cl.positional.size() != 1)
    throw UsageError("usage: kfuse eval-op 'EXPR' < values (EXPR over inputs a and b)");
  ir::HostTensor a, b;
  std::string line;
  for (int n = 1; std::getline(std::cin, line); ++n) {
    std::istringstream in(line);
    std::string x, y;
    in >> x >> y;
    if (x.empty())
      continue;
    char *end = nullptr;
    a.data.push_back(std::strtod(x.c_str(), &end));
    if (*end)
      throw UsageError("line " + std::to_string(n) + ": '" + x + "' is not a number");
    b.data.push_back(y.empty() ? 0.0 : std::strtod(y.c_str(), &end));
    if (*end)
      throw UsageError("line " + std::to_string(n) + ": '" + y + "' is not a number");
  }
  if (a.data.empty())
    throw UsageError("no values on stdin");
  int64_t n = static_cast<int64_t>(a.data.size());
  a.shape = b.shape = {n};
  std::string text = fmt::format("pipeline eval_op {{\n  input a: f32[{0}]\n  input b: f32[{0}]\n"
                                 "  return {1}\n}}\n",
                                 n, cl.positional[0]);
  dsl::SourceFile src("eval-op", text);
  dsl::Diagnostics diags(src);
  ir::Graph g = dsl::parse_kf(src, diags);
  ir::TensorMap tensors{{"a", a}, {"b", b}};
  std::vector<ir::HostTensor> out = ir::interpret(g, ir::Mode::Eval, {}, tensors);
  for (double v : out.at(0).data)
    std::printf("%.17g\n", v);
  return 0;
}

} // namespace kfuse::tool
