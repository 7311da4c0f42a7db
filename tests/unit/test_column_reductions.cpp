// Sums and means over the rows of a matrix (dim=0), as the backward graphs' bias and affine
// gradients are written: columns_from_reductions makes them column statistics, which the plan
// computes from the partials of the kernel that stores the matrix and merges in the column
// kernel, and the GPU path accepts them.
#include "compiler/codegen/gpu_support.h"
#include "compiler/codegen/program.h"
#include "compiler/dsl/parser.h"
#include "compiler/ir/printer.h"
#include "compiler/passes/passes.h"
#include "compiler/plan/agreement.h"
#include "compiler/plan/planner.h"
#include "compiler/target.h"
#include "tests/support/kf_text.h"

#include <doctest/doctest.h>

#include <string>

using namespace kfuse;

namespace {

ir::Graph parse_text(const std::string &text) { return testing::parse_kf_text(text, "test.kf"); }

const char *kRowSums = R"(pipeline sums {
  dim N
  input  x: f32[N, 64]
  param  w: f32[32, 64]
  h = linear(x, w)
  r = sum(h, dim=1, keepdim=true)
  return sum(h, dim=0), mean(h, dim=-2, keepdim=true), sum(r, dim=0, keepdim=true)
}
)";

} // namespace

TEST_CASE("column reductions: sum and mean over the rows become column statistics") {
  const ir::Graph g = parse_text(kRowSums);
  const ir::Graph after = passes::columns_from_reductions(g, ir::Mode::Train);
  const std::string text = ir::print_kf(after);
  INFO(text);
  CHECK(text.find("col_sum(h, local=true)") != std::string::npos);
  CHECK(text.find("col_mean(h, local=true)") != std::string::npos);
  CHECK(text.find("reshape(t2, shape=[1, 32])") != std::string::npos);
  CHECK(text.find("col_sum(r, local=true)") != std::string::npos);
  CHECK(text.find("sum(h, dim=1, keepdim=true)") != std::string::npos); // along rows: a row op
  REQUIRE(after.outputs.size() == g.outputs.size());
  for (size_t i = 0; i < g.outputs.size(); ++i)
    CHECK(after[after.outputs[i]].type == g[g.outputs[i]].type);
}

TEST_CASE("column reductions: a mean over the rows of a bf16 matrix stays refused") {
  const ir::Graph g = parse_text("pipeline m {\n  dim N\n  input x: bf16[N, 8]\n"
                                 "  return mean(x, dim=0), sum(x, dim=0)\n}\n");
  const ir::Graph after = passes::columns_from_reductions(g, ir::Mode::Eval);
  const std::string text = ir::print_kf(after);
  CHECK(text.find("mean(x, dim=0, keepdim=false)") != std::string::npos);
  CHECK(text.find("col_sum(x, local=true)") != std::string::npos);
  const auto unsupported = codegen::gpu_unsupported(g);
  REQUIRE(unsupported);
  CHECK(unsupported->message.find("mean over dim=0 of bf16[N, 8]") != std::string::npos);
}

TEST_CASE("column reductions: plans, agrees with the interpreter and emits on the column "
          "kernel") {
  const ir::Graph g = parse_text(kRowSums);
  CHECK_FALSE(codegen::gpu_unsupported(g));
  for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
    INFO("mode ", ir::mode_name(mode));
    for (bool fuse : {true, false}) {
      INFO("fuse ", fuse);
      plan::Plan p;
      REQUIRE_NOTHROW(p = plan::make_plan(g, mode, {}, fuse));
      codegen::Program program;
      REQUIRE_NOTHROW(program = codegen::generate(p, Target{"sm_90a", Precision::FP32}));
      // The sums come from the merged mean times the rows, in double.
      CHECK(program.source.find("mean * static_cast<double>(d_N)") != std::string::npos);
    }
    for (int64_t rows : {1, 3, 130}) {
      const plan::StageError worst = plan::first_failure(
          plan::check_planner(g, mode, {{"N", rows}}, 7, passes::pipeline()), 1e-12);
      INFO("rows ", rows, ", worst stage ", worst.stage);
      CHECK(worst.error <= 1e-12);
    }
  }
}
