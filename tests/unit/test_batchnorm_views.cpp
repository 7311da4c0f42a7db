// batchnorm over the rows of a [B*T, C] view: its row count is a product of dims, which train
// mode's bn_update carries as `count=B*T` and every evaluator binds as it binds a view's rows.
// Types and errors, the lowered IR, the proof by interpretation at several B and T, and the
// code NVRTC compiles.
#include "compiler/ir/interpreter.h"
#include "compiler/ir/printer.h"
#include "compiler/lower.h"
#include "compiler/passes/passes.h"
#include "compiler/plan/agreement.h"
#include "compiler/plan/planner.h"
#include "kfuse/kfuse.h"
#include "tests/support/kf_text.h"

#include <doctest/doctest.h>

using namespace kfuse;

namespace {

// Token features [B, T, 16] viewed as B*T rows: a projection, batchnorm over the tokens (as
// PyTorch's BatchNorm1d on x.reshape(B*T, C) or on x.transpose(1, 2)), an activation, and the
// result viewed back; the running statistics are read again after the update.
const char *kTokens = R"(pipeline tokens {
  dim B, T
  input x: f32[B, T, 16]
  param w: f32[12, 16]
  param gamma: f32[12]
  param beta: f32[12]
  state rm: f32[12]
  state rv: f32[12]
  rows = reshape(x, shape=[B*T, 16])
  y = silu(batchnorm(linear(rows, w), gamma, beta, rm, rv, momentum=0.25))
  return reshape(y, shape=[B, T, -1]), add(rm, rv)
}
)";

// batchnorm straight on the view of an input (no GEMM before it), without affine parameters,
// over a product with a constant factor (2*T rows).
const char *kDirect = R"(pipeline direct {
  dim T
  input x: f32[2, T, 8]
  state rm: f32[8]
  state rv: f32[8]
  return batchnorm(reshape(x, shape=[2*T, 8]), rm, rv)
}
)";

} // namespace

TEST_CASE("batchnorm views: a [B*T, C] view is accepted, rank 3 is refused pointing to it") {
  ir::Graph g = testing::parse_kf_text(kTokens, "bn.kf");
  CHECK(g[g.outputs[0]].type.str() == "f32[B, T, 12]");
  ir::Graph direct = testing::parse_kf_text(kDirect, "bn.kf");
  CHECK(direct[direct.outputs[0]].type.str() == "f32[2*T, 8]");
  CHECK(testing::kf_error(R"(pipeline p {
  dim B, T
  input x: f32[B, T, 16]
  state rm: f32[16]
  state rv: f32[16]
  return batchnorm(x, rm, rv)
}
)",
                          "bn.kf")
            .rfind("bn.kf:6:20: error: batchnorm of f32[B, T, 16] (rank 3) is not supported: "
                   "PyTorch's batchnorm1d normalizes axis 1 (the channels) of a rank-3 input, and "
                   "kfuse normalizes the last axis of an [N, C] input; to normalize each of the "
                   "16 features over all B*T rows, view the input as [B*T, 16] first: reshape(x, "
                   "shape=[B*T, 16])\n",
                   0) == 0);
}

TEST_CASE("batchnorm views: train mode lowers to bn_update with count=B*T, which parses back") {
  ir::Graph lowered =
      passes::lower_batchnorm(testing::parse_kf_text(kTokens, "bn.kf"), ir::Mode::Train);
  std::string text = ir::print_kf(lowered);
  CAPTURE(text);
  CHECK(text.find("momentum=0.25, count=B*T)") != std::string::npos);
  CHECK(ir::print_kf(testing::parse_kf_text(text, "bn.kf")) == text);
  std::string direct = ir::print_kf(
      passes::lower_batchnorm(testing::parse_kf_text(kDirect, "bn.kf"), ir::Mode::Train));
  CHECK(direct.find("count=2*T)") != std::string::npos);
}

TEST_CASE("batchnorm views: the interpreter counts B*T rows: the update unbiases by B*T/(B*T-1)") {
  ir::Graph g = testing::parse_kf_text(kDirect, "bn.kf");
  const int64_t t = 3, rows = 2 * t, cols = 8;
  ir::DimBindings dims{{"T", t}};
  ir::TensorMap tensors = ir::random_tensors(g, dims, 5);
  const ir::TensorMap entry = tensors;
  ir::interpret(g, ir::Mode::Train, dims, tensors);
  const std::vector<double> &x = entry.at("x").data;
  for (int64_t j = 0; j < cols; ++j) {
    double mean = 0, m2 = 0;
    for (int64_t i = 0; i < rows; ++i)
      mean += x[i * cols + j] / rows;
    for (int64_t i = 0; i < rows; ++i)
      m2 += (x[i * cols + j] - mean) * (x[i * cols + j] - mean);
    CHECK(tensors.at("rv").data[j] ==
          doctest::Approx(0.9 * entry.at("rv").data[j] + 0.1 * m2 / (rows - 1)).epsilon(1e-13));
  }
}

TEST_CASE("batchnorm views: every pass and the plan agree with the interpreter, B and T at "
          "several values, both modes") {
  for (const char *text : {kTokens, kDirect})
    for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval})
      for (auto [b, t] : {std::pair{1, 2}, std::pair{2, 1}, std::pair{3, 7}, std::pair{5, 13}}) {
        ir::Graph g = testing::parse_kf_text(text, "bn.kf");
        ir::DimBindings dims{{"B", b}, {"T", t}};
        if (!std::count(g.dims.begin(), g.dims.end(), "B"))
          dims.erase("B");
        auto worst =
            plan::first_failure(plan::check_planner(g, mode, dims, 17, passes::pipeline()), 1e-12);
        INFO(g.name, " ", ir::mode_name(mode), " B=", b, " T=", t, " worst stage ", worst.stage);
        CHECK(worst.error <= 1e-12);
      }
}

TEST_CASE("batchnorm views: the column kernel's count is the product of the bound dims") {
  LowerOptions lo;
  lo.target.arch = "sm_90a";
  Lowered l = lower(dsl::SourceFile("tokens.kf", kTokens), lo);
  CHECK(l.program.source.find("const float count = static_cast<float>((d_B * d_T));") !=
        std::string::npos);
  Options o;
  o.arch = "sm_90a";
  for (const char *text : {kTokens, kDirect})
    for (Mode mode : {Mode::Train, Mode::Eval}) {
      o.mode = mode;
      CHECK_NOTHROW(Pipeline::from_string(text, "bn.kf", o));
    }
}

TEST_CASE("batchnorm views: statistics of an input's view summarize its B*T rows, not its B") {
  // kDirect's partials are of x itself (the view has no buffer): a [2, T, 8] tensor whose matrix
  // is [2*T, 8]; the column-partials and column kernels run over that matrix.
  LowerOptions lo;
  lo.target.arch = "sm_90a";
  lo.mode = ir::Mode::Train;
  Lowered l = lower(dsl::SourceFile("direct.kf", kDirect), lo);
  bool partials = false, column = false;
  for (const codegen::KernelLaunch &k : l.program.launches) {
    if (k.kind == plan::KernelKind::ColPartials) {
      partials = true;
      CHECK(k.rows.str() == "2*T");
      CHECK(k.cols == ir::Dim::constant(8));
      CHECK(k.geometry.rows.str() == "2*T");
    }
    if (k.kind == plan::KernelKind::Column) {
      column = true;
      CHECK(k.rows.str() == "2*T");
      CHECK(k.cols == ir::Dim::constant(8));
    }
  }
  CHECK(partials);
  CHECK(column);
  CHECK(l.program.source.find("kf::col_partials((2 * d_T), 8,") != std::string::npos);
}

TEST_CASE("batchnorm views: a train-mode run over one row names the product it counts") {
  Options o;
  o.arch = "sm_90a";
  o.mode = Mode::Train;
  Pipeline p = Pipeline::from_string(kTokens, "tokens.kf", o);
  alignas(256) static float memory[2048];
  float *next = memory;
  for (const char *name : {"gamma", "beta", "rm", "rv"})
    p.bind(name, Tensor{next += 64, {12}});
  p.bind("w", Tensor{memory + 512, {12, 16}});
  Tensor x{memory + 768, {1, 1, 16}}, y{memory + 1024, {1, 1, 12}}, stats{memory + 1280, {12}};
  CHECK_THROWS_WITH_AS(p.run({{"x", x}}, {y, stats}),
                       doctest::Contains("pipeline 'tokens': batchnorm in train mode needs more "
                                         "than 1 row, got B*T=1"),
                       Error);
}
