// Runs the real `kfuse check` binary: on the diagnostics goldens (exit code 1 and the exact
// stderr of tests/golden/diagnostics/NAME.expected; regenerate with tests/golden/update.sh)
// and on the examples, and checks its 0-or-1 exit code contract.
#include "compiler/dsl/parser.h"
#include "compiler/ir/printer.h"
#include "tests/support/run_tool.h"

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

using namespace kfuse;
using testing::run_kfuse;
using testing::ToolRun;
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path &p) { return testing::read_text(p.string()); }

std::vector<fs::path> files(const fs::path &dir, const std::string &extension) {
  std::vector<fs::path> paths;
  for (const auto &entry : fs::directory_iterator(dir))
    if (entry.path().extension() == extension)
      paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  return paths;
}

} // namespace

TEST_CASE("golden: kfuse check reports each malformed input exactly as expected") {
  std::vector<fs::path> inputs = files(KFUSE_SOURCE_DIR "/tests/golden/diagnostics", ".kf");
  CHECK(inputs.size() >= 14);
  for (const fs::path &kf : inputs) {
    std::string relative = "tests/golden/diagnostics/" + kf.filename().string();
    INFO(relative);
    fs::path expected = kf;
    expected.replace_extension(".expected");
    REQUIRE(fs::exists(expected));
    ToolRun r = run_kfuse("check " + relative);
    CHECK(r.exit_code == 1);
    CHECK(r.out.empty());
    CHECK(r.err == read_file(expected));
  }
}

TEST_CASE("kfuse check: the examples pass and print every value's type") {
  for (const fs::path &kf : files(KFUSE_SOURCE_DIR "/examples", ".kf")) {
    INFO(kf.string());
    ToolRun r = run_kfuse("check examples/" + kf.filename().string());
    CHECK(r.exit_code == 0);
    CHECK(r.err.empty());
    ir::Graph g = dsl::parse_kf_file(kf.string());
    std::vector<std::string> names = ir::printed_names(g);
    for (size_t i = 0; i < g.values.size(); ++i)
      CHECK(r.out.find("\n" + names[i] + ": " + g.values[i].type.str() + "\n") !=
            std::string::npos);
  }
  ToolRun r = run_kfuse("check examples/gemm_bn_scale_softmax.kf");
  CHECK(r.out.rfind("pipeline gemm_bn_scale_softmax: 8 declarations, 4 ops, 1 output\n", 0) == 0);
  CHECK(r.out.find("\nx: f32[N, 8192]\n") != std::string::npos);
}

TEST_CASE("kfuse check: each example's comment documents the size its benchmark runs at") {
  // bench/examples_torch.py reads the `--dim NAME=VALUE ...` an example's comment gives; every
  // example has one, and it binds the example's dims.
  for (const fs::path &kf : files(KFUSE_SOURCE_DIR "/examples", ".kf")) {
    INFO(kf.string());
    std::ifstream in(kf);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t open = text.find("`--dim ");
    REQUIRE(open != std::string::npos);
    const size_t close = text.find('`', open + 1);
    REQUIRE(close != std::string::npos);
    const std::string dims = text.substr(open + 1, close - open - 1);
    ToolRun r = run_kfuse("check examples/" + kf.filename().string() + " " + dims);
    CHECK(r.exit_code == 0);
    CHECK(r.err.empty());
  }
}

TEST_CASE("kfuse check: --dim binds dims in the printed types") {
  ToolRun r = run_kfuse("check examples/gemm_bn_scale_softmax.kf --dim N=1024");
  CHECK(r.exit_code == 0);
  CHECK(r.out.rfind("pipeline gemm_bn_scale_softmax (N=1024): ", 0) == 0);
  CHECK(r.out.find("\nx: f32[1024, 8192]\n") != std::string::npos);
}

TEST_CASE("kfuse check --print: the canonical IR, which checks again") {
  ToolRun r = run_kfuse("check examples/gemm_scale_bn.kf --print");
  REQUIRE(r.exit_code == 0);
  std::string ir_text = r.out.substr(r.out.find("\npipeline ") + 1);
  CHECK(ir_text == ir::print_kf(dsl::parse_kf_file(KFUSE_SOURCE_DIR "/examples/gemm_scale_bn.kf")));
  fs::path copy =
      fs::temp_directory_path() / ("kfuse_check_print_" + std::to_string(getpid()) + ".kf");
  std::ofstream(copy) << ir_text;
  ToolRun again = run_kfuse("check --print '" + copy.string() + "'");
  fs::remove(copy);
  CHECK(again.exit_code == 0);
  CHECK(again.out.substr(again.out.find("\npipeline ") + 1) == ir_text);
}

TEST_CASE("kfuse check: an effect is listed with the states it updates") {
  fs::path kf =
      fs::temp_directory_path() / ("kfuse_check_effect_" + std::to_string(getpid()) + ".kf");
  std::ofstream(kf) << "pipeline lowered {\n"
                       "  dim N\n"
                       "  input x: f32[N, 16]\n"
                       "  state rm: f32[16]\n"
                       "  state rv: f32[16]\n"
                       "  m = col_mean(x)\n"
                       "  v = col_var(x)\n"
                       "  bn_update(rm, rv, m, v, momentum=0.1, count=N)\n"
                       "  return col_affine(x, rsqrt(v), m)\n"
                       "}\n";
  ToolRun r = run_kfuse("check '" + kf.string() + "'");
  fs::remove(kf);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "pipeline lowered: 3 declarations, 5 ops, 1 output\n"
                 "x: f32[N, 16]\n"
                 "rm: f32[16]\n"
                 "rv: f32[16]\n"
                 "m: f32[16]\n"
                 "v: f32[16]\n"
                 "bn_update: effect, updates rm, rv\n"
                 "t1: f32[16]\n"
                 "t2: f32[N, 16]\n");
}

TEST_CASE("kfuse check: usage errors exit 2, unreadable files 1, each with a message") {
  struct Case {
    std::string args, err;
    int exit_code = 2;
  };
  std::vector<Case> cases = {
      {"check", "kfuse check: error: missing the .kf file argument\n"
                "usage: kfuse check FILE.kf [--print] [--dim NAME=VALUE]...\n"},
      {"check a.kf b.kf", "kfuse check: error: expected one .kf file, got 2 arguments\n"
                          "usage: kfuse check FILE.kf [--print] [--dim NAME=VALUE]...\n"},
      {"check examples/gemm_scale_bn.kf --frobnicate",
       "kfuse check: error: unknown option '--frobnicate'\n"
       "usage: kfuse check FILE.kf [--print] [--dim NAME=VALUE]...\n"},
      {"check examples/gemm_scale_bn.kf --dim N=0",
       "kfuse check: error: --dim N: '0' is not an integer in [1, 2147483647]\n"
       "usage: kfuse check FILE.kf [--print] [--dim NAME=VALUE]...\n"},
      {"check examples/gemm_scale_bn.kf --dim M=4",
       "kfuse check: error: --dim M=4: pipeline 'gemm_scale_bn' has no dim 'M' (its dims: N)\n"
       "usage: kfuse check FILE.kf [--print] [--dim NAME=VALUE]...\n"},
      {"check no/such/file.kf", "error: cannot read 'no/such/file.kf': No such file or directory\n",
       1},
      {"check examples", "error: cannot read 'examples': Is a directory\n", 1},
  };
  for (const Case &c : cases) {
    INFO(c.args);
    ToolRun r = run_kfuse(c.args);
    CHECK(r.exit_code == c.exit_code);
    CHECK(r.out.empty());
    CHECK(r.err == c.err);
  }
  ToolRun help = run_kfuse("check --help");
  CHECK(help.exit_code == 0);
  CHECK(help.out == "usage: kfuse check FILE.kf [--print] [--dim NAME=VALUE]...\n");
}
