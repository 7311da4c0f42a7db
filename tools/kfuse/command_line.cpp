#include "tools/kfuse/command_line.h"

#include "tools/kfuse/commands.h"

#include <cerrno>
#include <cstdlib>

namespace kfuse::tool {

std::string CommandLine::option(const std::string &name, const std::string &fallback) const {
  auto it = options.find(name);
  return it == options.end() ? fallback : it->second;
}

const std::string &CommandLine::file() const {
  if (positional.size() != 1)
    throw UsageError(positional.empty() ? "missing the .kf file argument"
                                        : "expected one .kf file, got " +
                                              std::to_string(positional.size()) + " arguments");
  return positional[0];
}

static int64_t parse_dim_value(const std::string &binding) {
  auto eq = binding.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError("--dim expects NAME=VALUE, got '" + binding + "'");
  std::string text = binding.substr(eq + 1);
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v <= 0)
    throw UsageError("--dim " + binding.substr(0, eq) + ": '" + text +
                     "' is not a positive integer");
  return v;
}

CommandLine parse_command_line(int argc, char **argv, const std::set<std::string> &valued,
                               const std::set<std::string> &known_flags) {
  CommandLine cl;
  if (argc >= 2)
    cl.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-o")
      a = "--output";
    if (a.rfind("--", 0) != 0 || a == "--") {
      cl.positional.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    bool takes_value = name == "dim" || valued.count(name);
    if (!takes_value) {
      if (!known_flags.count(name))
        throw UsageError("unknown option '--" + name + "'");
      if (inline_value)
        throw UsageError("option '--" + name + "' takes no value");
      cl.flags.insert(name);
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc)
        throw UsageError("option '--" + name + "' needs a value");
      value = argv[++i];
    }
    if (name == "dim") {
      cl.dims[value.substr(0, value.find('='))] = parse_dim_value(value);
    } else {
      cl.options[name] = value;
    }
  }
  return cl;
}

Options pipeline_options(const CommandLine &cl) {
  Options o;
  o.mode = parse_mode(cl.option("mode", "train")) == ir::Mode::Train ? Mode::Train : Mode::Eval;
  std::string precision = cl.option("precision", "fp32");
  if (precision == "fp32")
    o.precision = Precision::FP32;
  else if (precision == "tf32")
    o.precision = Precision::TF32;
  else if (precision == "bf16")
    o.precision = Precision::BF16;
  else if (precision == "3xtf32")
    o.precision = Precision::FP32x3;
  else
    throw UsageError("--precision must be fp32, tf32, bf16 or 3xtf32, got '" + precision + "'");
  o.arch = cl.option("arch", "");
  return o;
}

ir::Mode ir_mode(Mode m) { return m == Mode::Train ? ir::Mode::Train : ir::Mode::Eval; }

ir::Mode parse_mode(const std::string &text) {
  if (text == "train")
    return ir::Mode::Train;
  if (text == "eval")
    return ir::Mode::Eval;
  throw UsageError("--mode must be train or eval, got '" + text + "'");
}

} // namespace kfuse::tool
