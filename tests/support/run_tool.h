// Runs the real `kfuse` binary from the unit tests.
#pragma once

#include <string>

namespace kfuse::testing {

struct ToolRun {
  int exit_code; // -1 when killed by a signal
  std::string out, err;
};

// Runs `kfuse ARGS` (shell syntax: redirections and quoting as in sh) in the source tree, so
// that paths in messages are repository-relative; the tree and the tool are those of
// tests/support/source_tree.h. Standard output goes to `stdout_path` when given (ToolRun::out
// is then empty).
ToolRun run_kfuse(const std::string &args, const std::string &stdout_path = "");

// The whole file at `path` ("" when it cannot be read).
std::string read_text(const std::string &path);

} // namespace kfuse::testing
