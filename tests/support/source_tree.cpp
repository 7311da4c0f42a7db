#include "tests/support/source_tree.h"

#include <cstdlib>
#include <filesystem>

namespace kfuse::testing {
namespace {

namespace fs = std::filesystem;

// The folder of the running test binary (a hard link or copy counts where it was started from).
fs::path binary_folder() { return fs::read_symlink("/proc/self/exe").parent_path(); }

std::string variable(const char *name) {
  const char *value = std::getenv(name);
  return value ? value : "";
}

} // namespace

std::string source_dir() {
  if (std::string dir = variable("KFUSE_SOURCE_DIR"); !dir.empty())
    return dir;
  std::string dir = (binary_folder() / KFUSE_SOURCE_FROM_BINARY).lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  return dir;
}

std::string source_path(const std::string &relative) { return source_dir() + "/" + relative; }

std::string tool_path() {
  if (std::string tool = variable("KFUSE_TOOL"); !tool.empty())
    return tool;
  return (binary_folder() / KFUSE_TOOL_NAME).string();
}

} // namespace kfuse::testing
