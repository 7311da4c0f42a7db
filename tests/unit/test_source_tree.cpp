// Tests find their data and the kfuse tool at run time (tests/support/source_tree.h): through
// KFUSE_SOURCE_DIR, else from the test binary's own folder, so a build carried to another
// machine with its source tree runs there, from any directory.
#include "tests/support/run_tool.h"
#include "tests/support/source_tree.h"

#include <doctest/doctest.h>

#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

extern char **environ;

namespace fs = std::filesystem;
using kfuse::testing::run_kfuse;
using kfuse::testing::ToolRun;

namespace {

// Sets an environment variable for one scope (unsets it with an empty value).
class ScopedVariable {
public:
  ScopedVariable(const char *name, const std::string &value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    if (value.empty())
      ::unsetenv(name);
    else
      ::setenv(name, value.c_str(), 1);
  }
  ~ScopedVariable() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedVariable(const ScopedVariable &) = delete;
  ScopedVariable &operator=(const ScopedVariable &) = delete;

private:
  const char *name_;
  std::optional<std::string> old_;
};

// A fresh folder, removed with everything in it.
struct TempTree {
  fs::path root;
  explicit TempTree(const fs::path &under) {
    std::string pattern = (under / "kfuse-carried-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    root = pattern;
  }
  ~TempTree() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

// A pipeline that exists only in the tree a test makes: the tool can read it only from there.
const char *const kOnlyHere = "pipeline only_here {\n  dim N\n  input x: f32[N, 4]\n"
                              "  return relu(x)\n}\n";

const char *const kCarriedHelper = "source tree: a carried test binary runs the tool (helper)";

} // namespace

TEST_CASE("source tree: KFUSE_SOURCE_DIR at run time names the tree the tests run kfuse in") {
  TempTree tree(fs::temp_directory_path());
  std::ofstream(tree.root / "only_here.kf") << kOnlyHere;
  ScopedVariable source("KFUSE_SOURCE_DIR", tree.root.string());
  CHECK(kfuse::testing::source_dir() == tree.root.string());
  CHECK(kfuse::testing::source_path("only_here.kf") == (tree.root / "only_here.kf").string());
  ToolRun r = run_kfuse("check only_here.kf");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.rfind("pipeline only_here: ", 0) == 0);
}

// Run by the test below in a carried copy of this binary (skipped otherwise).
// clang-format off
TEST_CASE(kCarriedHelper * doctest::skip()) {
  // clang-format on
  const char *done = std::getenv("KFUSE_TEST_CARRIED_DONE");
  if (!done)
    return;
  CHECK(fs::exists(kfuse::testing::source_path("only_here.kf")));
  ToolRun r = run_kfuse("check only_here.kf");
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.rfind("pipeline only_here: ", 0) == 0);
  // Tells the parent this test case really ran (a filter that matched nothing would exit 0).
  std::ofstream(done) << "ok";
}

TEST_CASE("source tree: a test binary carried with its tree finds it and its kfuse from any "
          "directory, without the variables") {
  // The carried copy: the binaries where they were relative to the tree (hard links, in this
  // build folder so that they can be linked), the tree a folder holding one pipeline.
  const fs::path self = fs::read_symlink("/proc/self/exe");
  TempTree tree(self.parent_path());
  const fs::path from_binary = KFUSE_SOURCE_FROM_BINARY; // the path the build recorded
  fs::path bin = tree.root;
  for (const fs::path &part : from_binary)
    if (part == "..")
      bin /= "up"; // deep enough that the tree lies inside the copy
  const fs::path carried_tree = (bin / from_binary).lexically_normal();
  fs::create_directories(bin);
  fs::create_directories(carried_tree);
  for (const fs::path &binary : {self, fs::path(kfuse::testing::tool_path())}) {
    std::error_code ec;
    fs::create_hard_link(binary, bin / binary.filename(), ec);
    if (ec)
      fs::copy_file(binary, bin / binary.filename());
  }
  std::ofstream(carried_tree / "only_here.kf") << kOnlyHere;

  // Only the variables this test sets: no KFUSE_SOURCE_DIR or KFUSE_TOOL.
  const fs::path done = tree.root / "done";
  std::vector<std::string> env;
  for (char **e = environ; *e; ++e)
    if (std::string v = *e; v.rfind("KFUSE_SOURCE_DIR=", 0) != 0 && v.rfind("KFUSE_TOOL=", 0) != 0)
      env.push_back(v);
  env.push_back("KFUSE_TEST_CARRIED_DONE=" + done.string());
  std::vector<char *> envp;
  for (std::string &v : env)
    envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string program = (bin / self.filename()).string();
  std::string filter = std::string("--test-case=") + kCarriedHelper;
  std::string no_skip = "--no-skip", minimal = "--minimal";
  char *argv[] = {program.data(), filter.data(), no_skip.data(), minimal.data(), nullptr};
  // From another directory than the tree (the root): nothing may depend on the working one.
  pid_t pid = 0;
  const fs::path cwd = fs::current_path();
  fs::current_path("/");
  const int spawned = ::posix_spawn(&pid, program.c_str(), nullptr, nullptr, argv, envp.data());
  fs::current_path(cwd);
  REQUIRE(spawned == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(fs::exists(done));
}
