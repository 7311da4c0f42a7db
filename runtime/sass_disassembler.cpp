#include "runtime/sass_disassembler.h"

#include "kfuse/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace kfuse::rt {

namespace {

// The path of `tool` in the first of `dirs` that holds it as an executable, or "".
std::string find_tool(const char *tool, const std::vector<std::string> &dirs) {
  for (const std::string &dir : dirs) {
    std::string path = dir + "/" + tool;
    if (::access(path.c_str(), X_OK) == 0)
      return path;
  }
  return "";
}

// `text` in single quotes for /bin/sh.
std::string shell_quoted(const std::string &text) {
  std::string out = "'";
  for (char c : text)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A temporary file holding the CUBIN, removed on every path.
struct CubinFile {
  std::string path;
  explicit CubinFile(const std::string &cubin) {
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kfuse-sass-XXXXXX";
    int fd = ::mkstemp(pattern.data());
    if (fd < 0)
      throw Error(fmt::format("KFUSE_DUMP=sass: cannot create a temporary file {}", pattern));
    ::close(fd);
    path = pattern;
    std::ofstream out(path, std::ios::binary);
    out << cubin;
    if (!out)
      throw Error(fmt::format("KFUSE_DUMP=sass: cannot write the CUBIN to {}", path));
  }
  ~CubinFile() { std::remove(path.c_str()); }
  CubinFile(const CubinFile &) = delete;
  CubinFile &operator=(const CubinFile &) = delete;
};

} // namespace

std::vector<std::string> sass_tool_dirs() {
  std::vector<std::string> dirs;
  const char *path = std::getenv("PATH");
  std::stringstream entries(path ? path : "");
  auto add = [&](const std::string &dir) {
    if (!dir.empty() && std::find(dirs.begin(), dirs.end(), dir) == dirs.end())
      dirs.push_back(dir);
  };
  for (std::string dir; std::getline(entries, dir, ':');)
    add(dir);
  add("/usr/local/cuda/bin");
  return dirs;
}

std::string disassemble_sass(const std::string &cubin, const std::vector<std::string> &dirs) {
  std::string command;
  if (std::string nvdisasm = find_tool("nvdisasm", dirs); !nvdisasm.empty())
    command = shell_quoted(nvdisasm);
  else if (std::string cuobjdump = find_tool("cuobjdump", dirs); !cuobjdump.empty())
    command = shell_quoted(cuobjdump) + " -sass";
  else
    throw Error(fmt::format("KFUSE_DUMP=sass needs the CUDA toolkit's nvdisasm or cuobjdump; "
                            "neither is in {} (put the toolkit's bin/ on PATH)",
                            fmt::join(dirs, ":")));
  CubinFile file(cubin);
  command += " " + shell_quoted(file.path) + " 2>&1";
  FILE *pipe = ::popen(command.c_str(), "r");
  if (!pipe)
    throw Error(fmt::format("KFUSE_DUMP=sass: cannot run {}", command));
  std::string output;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;)
    output.append(buffer, n);
  int status = ::pclose(pipe);
  if (status != 0)
    throw Error(fmt::format("KFUSE_DUMP=sass: `{}` failed (status {}):\n{}", command,
                            WIFEXITED(status) ? WEXITSTATUS(status) : status, output));
  return output;
}

} // namespace kfuse::rt
