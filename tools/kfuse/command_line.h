// Command-line parsing shared by every `kfuse` subcommand.
#pragma once

#include "compiler/ir/interpreter.h"

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace kfuse::tool {

// A usage error: printed with the command's usage line, exit code 2... except that `check`
// promises 0/1 only, so callers map it as they document.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CommandLine {
  std::string command;
  std::vector<std::string> positional;
  std::map<std::string, std::string> options; // --mode train -> {"mode", "train"}
  std::map<std::string, int64_t> dims;        // --dim N=1024 (repeatable, once per dim)
  std::set<std::string> flags;                // --print, --json, ...

  std::string option(const std::string &name, const std::string &fallback) const;
  bool flag(const std::string &name) const { return flags.count(name) != 0; }
  // The single .kf file argument; throws UsageError when missing or repeated.
  const std::string &file() const;
  // The --dim bindings, every one naming a dim of `g`; with `all`, every dim of `g` bound.
  // Throws UsageError naming the dim otherwise.
  ir::DimBindings dims_of(const ir::Graph &g, bool all) const;
};

// `valued` names the options that take a value (`dim` among them for the commands that take
// --dim); every other --name is a flag. `-o X` is the same as `--output X`; `--` ends the
// options (every later argument is an operand). Throws UsageError on an unknown option, an
// option given twice (--dim once per name), an empty value, and a --dim that is not
// NAME=DIGITS that ir::dim_value_problem accepts.
CommandLine parse_command_line(int argc, char **argv, const std::set<std::string> &valued,
                               const std::set<std::string> &known_flags);

// The integer option --`name` (`fallback` when absent), in [minimum, 1000000]; throws
// UsageError naming the option otherwise.
int parse_count(const CommandLine &cl, const char *name, int fallback, int minimum);

// Writes `text` to standard output, or to the file `path`; throws std::runtime_error naming
// the destination and the reason when a write or the final flush/close fails (a full disk,
// `> /dev/full`), so no command reports success for output that was lost.
void write_stdout(const std::string &text);
void write_file(const std::string &path, const std::string &text);

} // namespace kfuse::tool
