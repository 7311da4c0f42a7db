// Tensors of rank 3 and 4: the leading axes are rows. Types, the interpreter, the planner (which
// works on the [rows, F] matrix view), generated code and the runtime's shape binding.
#include "compiler/codegen/program.h"
#include "compiler/dsl/parser.h"
#include "compiler/ir/interpreter.h"
#include "compiler/lower.h"
#include "compiler/plan/agreement.h"
#include "compiler/plan/planner.h"
#include "kfuse/kfuse.h"

#include <doctest/doctest.h>

using namespace kfuse;

namespace {

ir::Graph parse_text(const std::string &text) {
  dsl::SourceFile src("rank.kf", text);
  dsl::Diagnostics diags(src);
  return dsl::parse_kf(src, diags);
}

std::string example(const std::string &name) {
  return dsl::SourceFile::read(std::string(KFUSE_SOURCE_DIR) + "/examples/" + name).text();
}

// Rows of [B, T, F] activations with a per-row statistic broadcast back, a per-feature vector
// and a scalar, in rank 3 and rank 4.
const char *kRows = R"(pipeline rows {
  dim B, T, H
  input x: f32[B, T, 8]
  input y: f32[B, H, T, 8]
  param w: f32[6, 8]
  param b: f32[6]
  param g: f32[6]
  param s: f32[1, 1, 6]
  h = linear(x, w, b)
  h = mul(sub(h, max(h, dim=2, keepdim=true)), s)
  k = add(y, mean(y, dim=-1, keepdim=true))
  return rmsnorm(h, g), softmax(h, dim=-1), logsumexp(k, dim=3, keepdim=true)
}
)";

} // namespace

TEST_CASE("rank: types keep the user's shape, the matrix view flattens the rows") {
  ir::Graph g = parse_text(kRows);
  CHECK(g[g.outputs[0]].type.str() == "f32[B, T, 6]");
  CHECK(g[g.outputs[2]].type.str() == "f32[B, H, T, 1]");
  CHECK(g[g.outputs[0]].type.matrix_view().str() == "f32[B*T, 6]");
  CHECK(g[g.outputs[2]].type.matrix_view().str() == "f32[B*H*T, 1]");
  ir::Dim rows = ir::Dim::product({ir::Dim::constant(4), ir::Dim::symbol("T")});
  CHECK(rows.str() == "4*T");
  CHECK(rows.evaluate({{"T", 5}}) == 20);
  CHECK(ir::Dim::product({ir::Dim::constant(2), ir::Dim::constant(3)}) == ir::Dim::constant(6));
  CHECK(ir::Dim::product({ir::Dim::constant(1), ir::Dim::symbol("T")}) == ir::Dim::symbol("T"));
}

TEST_CASE("rank: the interpreter computes a [B, T, K] linear row by row as a [B*T, K] one") {
  ir::Graph g3 = parse_text(R"(pipeline p {
  dim B, T
  input x: f32[B, T, 3]
  param w: f32[2, 3]
  return linear(x, w)
}
)");
  ir::Graph g2 = parse_text(R"(pipeline p {
  dim N
  input x: f32[N, 3]
  param w: f32[2, 3]
  return linear(x, w)
}
)");
  ir::TensorMap t3 = ir::random_tensors(g3, {{"B", 2}, {"T", 3}}, 7);
  ir::TensorMap t2 = t3;
  t2.at("x").shape = {6, 3};
  std::vector<ir::HostTensor> out3 = ir::interpret(g3, ir::Mode::Eval, {{"B", 2}, {"T", 3}}, t3);
  std::vector<ir::HostTensor> out2 = ir::interpret(g2, ir::Mode::Eval, {{"N", 6}}, t2);
  CHECK(out3[0].shape == std::vector<int64_t>{2, 3, 2});
  CHECK(out3[0].data == out2[0].data);
}

TEST_CASE("rank: every pass and the plan agree with the interpreter on rank-3/4 pipelines") {
  struct Case {
    std::string text;
    ir::DimBindings dims;
  };
  const Case cases[] = {
      {kRows, {{"B", 3}, {"T", 5}, {"H", 2}}},
      {kRows, {{"B", 1}, {"T", 1}, {"H", 1}}},
      {example("gpt2_attn_out_residual_layernorm_btf.kf"), {{"B", 3}, {"T", 5}}},
      {example("tinyllama_o_proj_residual_rmsnorm_btf_bf16.kf"), {{"B", 1}, {"T", 3}}},
  };
  for (const Case &c : cases) {
    ir::Graph g = parse_text(c.text);
    for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
      auto worst =
          plan::first_failure(plan::check_planner(g, mode, c.dims, 3, passes::pipeline()), 1e-9);
      INFO(g.name, " ", ir::mode_name(mode), " worst stage ", worst.stage);
      CHECK(worst.error <= 1e-9);
    }
  }
}

TEST_CASE("rank: plans show the user's shapes, kernels run over B*T rows") {
  LowerOptions o;
  o.target.arch = "sm_90a";
  Lowered l =
      lower(dsl::SourceFile("btf.kf", example("gpt2_attn_out_residual_layernorm_btf.kf")), o);
  REQUIRE(l.plan.kernels.size() == 2); // GEMM + residual in its epilogue, then layernorm
  for (const plan::Intermediate &i : l.plan.intermediates)
    CHECK(i.type.rank() == 3);
  CHECK(l.program.source.find("const kf::GemmShape shape{(d_B * d_T), 768, 768};") !=
        std::string::npos);
  for (const codegen::KernelLaunch &k : l.program.launches)
    CHECK(k.rows.str() == "B*T");
}

TEST_CASE("rank: a run binds B and T from a [B, T, F] tensor and names the tensor on a "
          "mismatch") {
  Options o;
  o.arch = "sm_90a";
  Pipeline p = Pipeline::from_string(R"(pipeline btf {
  dim B, T
  input x: f32[B, T, 4]
  input r: f32[B, T, 1]
  return add(x, r)
}
)",
                                     "btf.kf", o);
  CHECK(p.shape("x", {{"B", 3}, {"T", 5}}) == std::vector<int64_t>{3, 5, 4});
  CHECK(p.output_shape(0, {{"B", 3}, {"T", 5}}) == std::vector<int64_t>{3, 5, 4});
  alignas(256) static float memory[512];
  Tensor x{memory, {3, 5, 4}}, r{memory + 128, {3, 5, 1}}, out{memory + 256, {3, 5, 4}};
  Tensor flat = x;
  flat.shape = {15, 4};
  CHECK_THROWS_WITH_AS(
      p.run({{"x", flat}, {"r", r}}, {out}),
      doctest::Contains(
          "pipeline 'btf': tensor 'x' must be f32[B, T, 4], got shape [15, 4] (rank 2 instead "
          "of 3)"),
      Error);
  Tensor swapped = r;
  swapped.shape = {5, 3, 1};
  CHECK_THROWS_WITH_AS(p.run({{"x", x}, {"r", swapped}}, {out}),
                       doctest::Contains("dim B is 3 from tensor 'x' but 5 from tensor 'r' [5, 3, "
                                         "1]"),
                       Error);
  Tensor strided = x;
  strided.row_stride = 8;
  CHECK_THROWS_WITH_AS(p.run({{"x", strided}, {"r", r}}, {out}),
                       doctest::Contains("tensor 'x' f32[3, 5, 4] has row stride 8; kfuse takes "
                                         "contiguous tensors only (row stride 4 or 0)"),
                       Error);
}
