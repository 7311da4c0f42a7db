// Generated pipelines (tests/support/random_pipelines.h) through plan, the proof by
// interpretation (special values included) and CUDA generation, in both modes. The same check
// runs on demand for as long as wanted: tests/fuzz/run.sh SECONDS generated.
#include "compiler/dsl/parser.h"
#include "tests/support/generated_check.h"
#include "tests/support/random_pipelines.h"

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

using namespace kfuse;

TEST_CASE("generated pipelines: 2,000 plan, agree with the interpreter and emit") {
  testing::PipelineShape shape;
  std::map<std::string, int> ops_seen;
  int high_rank = 0, signed_zero_literals = 0, special_only = 0;
  for (uint64_t seed = 1; seed <= 2000; ++seed) {
    testing::SeededChoices choices(seed);
    const std::string text = testing::random_pipeline(choices, shape, "g" + std::to_string(seed));
    dsl::SourceFile source("generated.kf", text);
    dsl::Diagnostics diags(source);
    const ir::Graph g = dsl::parse_kf(source, diags);
    for (const ir::Value &v : g.values) {
      if (v.is_op())
        ++ops_seen[std::string(ir::op_info(v.op).name)];
      high_rank += v.type.rank() > 2;
    }
    signed_zero_literals += text.find("constant(value=-0,") != std::string::npos;
    const int64_t rows = std::vector<int64_t>{1, 2, 3, 7, 16, 64}[seed % 6];
    const testing::CheckResult r = testing::check_generated(text, rows, seed);
    INFO(text);
    INFO(r.detail);
    // Where a statistic of an input with +-inf or +-1e30 is used as a per-feature vector (a
    // scale), the folds' distribution of vectors over sums is not exact (generated_check.h):
    // counted, not failed. Random data must agree everywhere.
    special_only += r.verdict == testing::Verdict::SpecialValues;
    CHECK((r.verdict == testing::Verdict::Ok || r.verdict == testing::Verdict::SpecialValues));
  }
  MESSAGE(special_only, " of 2,000 disagree only on special values");
  CHECK(high_rank > 0);
  CHECK(signed_zero_literals > 0);
  for (const ir::OpInfo &op : ir::all_ops()) {
    INFO(op.name);
    if (testing::drawn_by_generator(op.kind))
      CHECK(ops_seen[std::string(op.name)] > 0);
  }
}

TEST_CASE("generated pipelines: long chains whose row kernels join a GEMM's epilogue plan") {
  // Seeds of the on-demand run's long chains (100 to 2,000 ops) whose row kernels, joining
  // their GEMM's epilogue, computed an inline value the GEMM kernel computed too: the plan
  // listed it twice and the validator refused it as an internal error.
  testing::PipelineShape shape;
  shape.column_views = false;
  shape.min_ops = 100;
  shape.max_ops = 2000;
  for (uint64_t seed : {5728, 5760}) {
    testing::SeededChoices choices(seed);
    const std::string text = testing::random_pipeline(choices, shape, "g" + std::to_string(seed));
    const testing::CheckResult r = testing::check_generated(text, 3, seed);
    INFO("seed ", seed, ": ", r.detail);
    CHECK(r.verdict != testing::Verdict::InternalError);
  }
}
