// The elementwise ops after a softmax or a normalization run in its pass (row_tail): layernorm,
// rmsnorm, groupnorm, softmax and log_softmax followed by activations, per-feature and per-row
// operands, a per-row result of an earlier pass, a value used twice and a train-mode dropout, in
// a row kernel (the resident row) and in a narrow GEMM's epilogue (the streamed row), against
// the fp64 reference with odd row counts and several steps.
#include "compiler/dsl/parser.h"
#include "compiler/ir/ops.h"
#include "compiler/plan/planner.h"
#include "tests/support/gpu_cases.h"

#include <algorithm>
#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace kfuse;

namespace {

// `features` wide: above 128 the row ops are a row kernel of their own, at most 128 they run in
// the GEMM's epilogue. Every softmax's and normalization's result is read only by its tail.
std::string tails(const char *dtype, int features) {
  return fmt::format(R"(pipeline tails_{0}_{1} {{
  dim N
  input  x: {0}[N, 72]
  input  s: f32[N, 1]
  param  w: {0}[{1}, 72]
  param  g: f32[{1}]
  param  b: f32[{1}]
  param  c: f32[{1}]
  h = linear(x, w)
  m = mean(h, dim=1, keepdim=true)
  t = mul(add(sub(layernorm(h, g, b, eps=1e-5), m), c), s)
  return dropout(mul(t, sigmoid(t)), p=0.25), gelu(mul(rmsnorm(h, g, eps=1e-6), 2.0), approximate="tanh"), silu(groupnorm(h, g, b, groups={2}, eps=1e-5)), mul(softmax(h, dim=1), c), exp(mul(log_softmax(h, dim=-1), 0.5))
}}
)",
                     dtype, features, features % 4 == 0 ? 4 : 1);
}

// Softmaxes and normalizations a kernel of `p` stores.
size_t stored_row_ops(const plan::Plan &p) {
  size_t n = 0;
  for (const plan::Kernel &k : p.kernels)
    for (ir::ValueId s : k.stores) {
      const ir::OpClass cls = ir::op_info(p.graph[s].op).cls;
      n += cls == ir::OpClass::RowNorm || cls == ir::OpClass::Row ? 1 : 0;
    }
  return n;
}

} // namespace

TEST_CASE("gpu: the ops after a softmax or a normalization run in its pass, in a row kernel and "
          "in a GEMM's epilogue") {
  uint64_t seed = 1300;
  for (const char *dtype : {"f32", "bf16"})
    for (int features : {37, 128, 300}) {
      const std::string text = tails(dtype, features);
      CAPTURE(text);
      dsl::SourceFile src("tails.kf", text);
      dsl::Diagnostics diags(src);
      for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
        plan::Plan p = plan::make_plan(dsl::parse_kf(src, diags), mode);
        // The five row ops are passes of one kernel, each storing its tail's value only:
        // the GEMM's (at most 128 features) or a row kernel after it, which reads h.
        CHECK(p.kernels.size() == (features <= 128 ? 1u : 2u));
        CHECK(std::count(p.kernels.back().rules.begin(), p.kernels.back().rules.end(),
                         "row_tail") == 1);
        CHECK(stored_row_ops(p) == 0);
        CHECK(p.intermediates.size() == (features <= 128 ? 0u : 1u));
      }
      for (int64_t n : {1, 33, 517})
        testing::expect_match(text, "tails.kf", Mode::Eval, n, ++seed);
      testing::expect_match(text, "tails.kf", Mode::Train, 65, ++seed, 3);
    }
}
