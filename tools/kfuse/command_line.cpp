#include "tools/kfuse/command_line.h"

#include "compiler/target.h"
#include "tools/kfuse/commands.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

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

ir::DimBindings CommandLine::dims_of(const ir::Graph &g, bool all) const {
  for (const auto &[name, value] : dims)
    if (std::find(g.dims.begin(), g.dims.end(), name) == g.dims.end())
      throw UsageError(fmt::format(
          "--dim {}={}: pipeline '{}' has no dim '{}'{}", name, value, g.name, name,
          g.dims.empty() ? "" : fmt::format(" (its dims: {})", fmt::join(g.dims, ", "))));
  if (all)
    for (const std::string &d : g.dims)
      if (!dims.count(d))
        throw UsageError(fmt::format("dim '{}' needs a value: --dim {}=...", d, d));
  return dims;
}

static void add_dim(std::map<std::string, int64_t> &dims, const std::string &binding) {
  auto eq = binding.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError("--dim expects NAME=VALUE, got '" + binding + "'");
  std::string name = binding.substr(0, eq), text = binding.substr(eq + 1);
  bool digits = !text.empty() && text.size() <= 10 &&
                std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  int64_t v = digits ? std::stoll(text) : 0;
  if (!digits || ir::dim_value_problem(name, v))
    throw UsageError(
        fmt::format("--dim {}: '{}' is not an integer in [1, {}]", name, text, ir::kMaxExtent));
  if (!dims.emplace(name, v).second)
    throw UsageError(fmt::format("--dim {} is given twice ({} and {})", name, dims[name], v));
}

void write_stdout(const std::string &text) {
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
    throw std::runtime_error(
        fmt::format("cannot write to standard output: {}", std::strerror(errno ? errno : EIO)));
}

void write_file(const std::string &path, const std::string &text) {
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> f(std::fopen(path.c_str(), "wb"), std::fclose);
  auto fail = [&] {
    throw std::runtime_error(
        fmt::format("cannot write '{}': {}", path, std::strerror(errno ? errno : EIO)));
  };
  if (!f)
    fail();
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), f.get()) != text.size() || std::fflush(f.get()) != 0)
    fail();
  if (std::fclose(f.release()) != 0)
    fail();
}

CommandLine parse_command_line(int argc, char **argv, const std::set<std::string> &valued,
                               const std::set<std::string> &known_flags) {
  CommandLine cl;
  if (argc >= 2)
    cl.command = argv[1];
  bool options_ended = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (!options_ended && a == "--") {
      options_ended = true; // what follows is operands, even where it starts with "-"
      continue;
    }
    if (!options_ended && a == "-o")
      a = "--output";
    if (options_ended || a.rfind("--", 0) != 0) {
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
    bool takes_value = valued.count(name) != 0;
    if (!takes_value) {
      if (!known_flags.count(name))
        throw UsageError("unknown option '--" + name + "'");
      if (inline_value)
        throw UsageError("option '--" + name + "' takes no value");
      if (!cl.flags.insert(name).second)
        throw UsageError("option '--" + name + "' is given twice");
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc)
        throw UsageError("option '--" + name + "' needs a value");
      value = argv[++i];
    }
    // An empty value would read as the option's absence (standard output for --output, the
    // GPU's architecture for --arch, random inputs for --inputs).
    if (value.empty())
      throw UsageError("option '--" + name + "' needs a value, got ''");
    if (name == "dim") {
      add_dim(cl.dims, value);
    } else if (auto [it, added] = cl.options.emplace(name, value); !added) {
      throw UsageError(
          fmt::format("option '--{}' is given twice ('{}' and '{}')", name, it->second, value));
    }
  }
  return cl;
}

Options pipeline_options(const CommandLine &cl) {
  Options o;
  o.mode = parse_mode(cl.option("mode", "train")) == ir::Mode::Train ? Mode::Train : Mode::Eval;
  const std::string precision = cl.option("precision", "fp32");
  const std::optional<Precision> parsed = parse_precision(precision);
  if (!parsed)
    throw UsageError("--precision must be fp32, tf32, bf16 or 3xtf32, got '" + precision + "'");
  o.precision = *parsed;
  o.arch = cl.option("arch", "");
  const std::string splits = cl.option("max-split-k", "0");
  char *end = nullptr;
  const long cap = std::strtol(splits.c_str(), &end, 10);
  if (splits.empty() || *end != '\0' || cap < 0 || cap > 1024)
    throw UsageError("--max-split-k must be 0 (the shape's choice) or a split count from 1 (never "
                     "split K), got '" +
                     splits + "'");
  o.max_split_k = static_cast<int>(cap);
  o.use_tuned = !cl.flag("no-tuned");
  o.batch_stats_ranks = parse_count(cl, "batch-stats-ranks", 0, 0);
  o.backward = cl.flag("backward");
  o.frozen = frozen_names(cl);
  if (!o.frozen.empty() && !o.backward)
    throw UsageError("--frozen names inputs and params the backward computes no gradient for; it "
                     "needs --backward");
  return o;
}

std::vector<std::string> frozen_names(const CommandLine &cl) {
  std::vector<std::string> names;
  if (!cl.options.count("frozen"))
    return names;
  const std::string text = cl.option("frozen", "");
  for (size_t start = 0;;) {
    const size_t comma = text.find(',', start);
    std::string name = text.substr(start, comma == std::string::npos ? comma : comma - start);
    if (name.empty())
      throw UsageError("--frozen takes input and param names separated by commas, got '" + text +
                       "'");
    names.push_back(std::move(name));
    if (comma == std::string::npos)
      return names;
    start = comma + 1;
  }
}

ir::Mode ir_mode(Mode m) { return m == Mode::Train ? ir::Mode::Train : ir::Mode::Eval; }

ir::Mode parse_mode(const std::string &text) {
  if (text == "train")
    return ir::Mode::Train;
  if (text == "eval")
    return ir::Mode::Eval;
  throw UsageError("--mode must be train or eval, got '" + text + "'");
}

int parse_count(const CommandLine &cl, const char *name, int fallback, int minimum) {
  std::string text = cl.option(name, std::to_string(fallback));
  char *end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < minimum || v > 1000000)
    throw UsageError(
        fmt::format("--{} expects an integer in [{}, 1000000], got '{}'", name, minimum, text));
  return static_cast<int>(v);
}

} // namespace kfuse::tool
