#include "tests/support/run_tool.h"

#include "tests/support/source_tree.h"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kfuse::testing {

namespace fs = std::filesystem;

namespace {

// `text` as one sh word.
std::string shell_quoted(const std::string &text) {
  std::string out = "'";
  for (char c : text)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

} // namespace

std::string read_text(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

ToolRun run_kfuse(const std::string &args, const std::string &stdout_path) {
  static int counter = 0;
  fs::path base = fs::temp_directory_path() /
                  ("kfuse_tool_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
  fs::path out = base.string() + ".out", err = base.string() + ".err";
  const std::string dir = source_dir(), tool = tool_path();
  REQUIRE_MESSAGE(fs::is_directory(dir), "no source tree at '", dir,
                  "': set KFUSE_SOURCE_DIR to the kfuse repository (tests/README.md)");
  std::string cmd = "cd " + shell_quoted(dir) + " && " + shell_quoted(tool) + " " + args + " >" +
                    shell_quoted(stdout_path.empty() ? out.string() : stdout_path) + " 2>" +
                    shell_quoted(err.string());
  int status = std::system(cmd.c_str());
  ToolRun r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(out), read_text(err)};
  fs::remove(out);
  fs::remove(err);
  return r;
}

} // namespace kfuse::testing
