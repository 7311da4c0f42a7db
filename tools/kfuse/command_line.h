// Command-line parsing shared by every `kfuse` subcommand.
#pragma once

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
  std::map<std::string, int64_t> dims;        // --dim N=1024 (repeatable)
  std::set<std::string> flags;                // --print, --json, ...

  std::string option(const std::string &name, const std::string &fallback) const;
  bool flag(const std::string &name) const { return flags.count(name) != 0; }
  // The single .kf file argument; throws UsageError when missing or repeated.
  const std::string &file() const;
};

// `valued` names the options that take a value (besides --dim); every other --name is a flag.
// `-o X` is the same as `--output X`. Throws UsageError on an unknown option.
CommandLine parse_command_line(int argc, char **argv, const std::set<std::string> &valued,
                               const std::set<std::string> &known_flags);

} // namespace kfuse::tool
