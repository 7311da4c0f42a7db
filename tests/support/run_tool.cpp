#include "tests/support/run_tool.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kfuse::testing {

namespace fs = std::filesystem;

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
  // KFUSE_TOOL in the environment names a kfuse built elsewhere (a build carried to the GPU
  // machine); otherwise the one built beside these tests.
  const char *tool = std::getenv("KFUSE_TOOL");
  std::string cmd = "cd '" KFUSE_SOURCE_DIR "' && '" + std::string(tool ? tool : KFUSE_TOOL) +
                    "' " + args + " >'" + (stdout_path.empty() ? out.string() : stdout_path) +
                    "' 2>'" + err.string() + "'";
  int status = std::system(cmd.c_str());
  ToolRun r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(out), read_text(err)};
  fs::remove(out);
  fs::remove(err);
  return r;
}

} // namespace kfuse::testing
