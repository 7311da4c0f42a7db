// Runs the real `kfuse plan` and `kfuse emit` on every target path (the Hopper mainloop at tf32,
// 3xtf32, bf16 operands and bf16 autocast; the mma.sync mainloop) and compares with the golden
// plans and sources of tests/golden/targets/; and `kfuse plan --dump-after-each-pass` with the
// per-pass IR of tests/golden/passes/, each of whose sections parses back to itself.
// Regenerate with tests/golden/update.sh and review the diff.
#include "compiler/dsl/diagnostics.h"
#include "compiler/dsl/parser.h"
#include "compiler/ir/printer.h"
#include "tests/support/run_tool.h"

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>

using namespace kfuse;
using testing::run_kfuse;
using testing::ToolRun;

namespace {

std::string golden(const std::string &relative) {
  std::string text = testing::read_text(KFUSE_SOURCE_DIR "/" + relative);
  REQUIRE_MESSAGE(!text.empty(), "cannot read ", relative);
  return text;
}

// The .kf sections of a --dump-after-each-pass stream, each after its "# IR after NAME" line
// and without the blank line that separates it from the next.
std::vector<std::string> sections(const std::string &dump) {
  std::vector<std::string> out;
  std::istringstream in(dump);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("# IR after ", 0) == 0)
      out.emplace_back();
    else if (!out.empty() && !line.empty())
      out.back() += line + "\n";
  return out;
}

} // namespace

TEST_CASE("golden: plans and sources of every target path match tests/golden/targets") {
  std::istringstream cases(golden("tests/golden/targets.txt"));
  std::string name, precision, arch;
  int checked = 0;
  while (cases >> name >> precision >> arch)
    for (const char *mode : {"train", "eval"}) {
      const std::string stem =
          "tests/golden/targets/" + name + "." + mode + "." + precision + "." + arch;
      INFO(stem, " (regenerate with tests/golden/update.sh and review the diff)");
      const std::string args = "examples/" + name + ".kf --mode " + mode + " --precision " +
                               precision + " --arch " + arch;
      ToolRun plan = run_kfuse("plan " + args + " --json");
      REQUIRE(plan.exit_code == 0);
      CHECK(plan.out == golden(stem + ".json"));
      ToolRun emit = run_kfuse("emit " + args);
      REQUIRE(emit.exit_code == 0);
      CHECK(emit.out == golden(stem + ".cu"));
      ++checked;
    }
  CHECK(checked >= 16);
}

TEST_CASE("golden: the IR after every pass matches tests/golden/passes and parses back") {
  for (const char *name :
       {"gemm_bn_scale_softmax", "gemm_scale_bn", "bert_mlm_transform_tokens_view"})
    for (const char *mode : {"train", "eval"}) {
      const std::string file = std::string("tests/golden/passes/") + name + "." + mode + ".kf";
      INFO(file);
      ToolRun r = run_kfuse(std::string("plan examples/") + name + ".kf --mode " + mode +
                            " --dump-after-each-pass");
      REQUIRE(r.exit_code == 0);
      CHECK(r.err == golden(file));
      const std::vector<std::string> passes = sections(r.err);
      CHECK(passes.size() >= 4);
      for (const std::string &kf : passes) {
        dsl::SourceFile src("pass.kf", kf);
        dsl::Diagnostics diags(src);
        CHECK(ir::print_kf(dsl::parse_kf(src, diags)) == kf);
      }
    }
}
