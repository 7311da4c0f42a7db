// A wide layer's row reductions as partials of its GEMM's epilogue (row_partials_epilogue): the
// GEMM writes one partial per (row, column tile) and reduction, a row kernel merges them, and
// the product is never stored unless it is returned. Against the fp64 reference on every
// mainloop and operand type, outputs poisoned first, features that end in a partial tile, one
// row up to many (split-K where the rows are few), and the product both unstored and returned.
#include "compiler/dsl/parser.h"
#include "compiler/plan/planner.h"
#include "tests/support/gpu_cases.h"

#include <algorithm>
#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace kfuse;

namespace {

// Every reduction that has partials, over the product and over elementwise values of it, and
// reductions of a [N, 1] result after them; `returned` also returns h. Well-conditioned at tf32
// and bf16: sums of |h| (a sum of random signs cancels), the spread of h.
std::string wide(const char *dtype, int in, int out, bool returned) {
  return fmt::format(R"(pipeline wide_{0}_{1}_{2} {{
  dim N
  input  x: {0}[N, {1}]
  param  weight: {0}[{2}, {1}]
  param  bias: {0}[{2}]
  h = linear(x, weight, bias)
  s = sum(abs(h), dim=1, keepdim=true)
  e = logsumexp(sigmoid(h), dim=1)
  d = mean(div(abs(h), 2), dim=-1, keepdim=true)
  m = logsumexp(logsumexp(mean(max(s, dim=1, keepdim=true), dim=1, keepdim=true), dim=1, keepdim=true), dim=1, keepdim=true)
  return s, e, d, m, logsumexp(h, dim=1), amax(h, dim=1), min(h, dim=1, keepdim=true), var(h, dim=1), std(h, dim=1, correction=0, keepdim=true){3}
}}
)",
                     dtype, in, out, returned ? ", h" : "");
}

} // namespace

TEST_CASE("gpu: a wide layer's row reductions are merged from its GEMM epilogue's partials, every "
          "mainloop and type") {
  uint64_t seed = 4100;
  struct Case {
    const char *dtype;
    Precision precision;
    int in; // 132 takes the sm90 mainloop for tf32, 130 the mma.sync one
  };
  for (const Case &c : {Case{"f32", Precision::FP32, 132}, Case{"f32", Precision::TF32, 132},
                        Case{"f32", Precision::TF32, 130}, Case{"bf16", Precision::FP32, 136}})
    for (int out : {129, 1000, 4100, 16385})
      for (bool returned : {false, true}) {
        const std::string text = wide(c.dtype, c.in, out, returned);
        CAPTURE(text);
        CAPTURE(static_cast<int>(c.precision));
        dsl::SourceFile src("wide.kf", text);
        dsl::Diagnostics diags(src);
        plan::Plan p = plan::make_plan(dsl::parse_kf(src, diags), ir::Mode::Eval);
        REQUIRE(p.kernels.size() == 2u);
        CHECK(p.kernels[0].row_partials);
        CHECK(p.kernels[1].row_partials);
        CHECK(std::count(p.kernels[0].rules.begin(), p.kernels[0].rules.end(),
                         "row_partials_epilogue") == 1);
        CHECK(p.kernels[0].stores.size() == (returned ? 1u : 0u));
        // 1 and 2 rows split K over the SMs; 33 and 1217 end in partial tiles of rows.
        for (int64_t n : {1, 2, 33, 64})
          testing::expect_match(text, "wide.kf", Mode::Eval, n, ++seed, 1, c.precision);
        if (out <= 4100)
          testing::expect_match(text, "wide.kf", Mode::Train, 1217, ++seed, 2, c.precision);
      }
}
