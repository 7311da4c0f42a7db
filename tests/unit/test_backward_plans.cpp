// The backward graphs of the examples (compiler/ir/grad.h) through the ordinary pipeline path:
// their weight gradients gᵀ x become matmul_tn (compiler/passes/transposed_operands.cpp), their
// bias and affine gradients column statistics (columns_from_reductions), and they plan, agree
// with the fp64 interpreter after every pass and emit CUDA.
#include "compiler/dsl/parser.h"
#include "compiler/ir/grad.h"
#include "compiler/ir/interpreter.h"
#include "compiler/ir/printer.h"
#include "compiler/lower.h"
#include "compiler/passes/passes.h"
#include "compiler/plan/agreement.h"
#include "compiler/plan/plan_printer.h"
#include "compiler/plan/planner.h"
#include "kfuse/error.h"
#include "tests/support/kf_text.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

using namespace kfuse;

namespace {

ir::Graph parse_text(const std::string &text) { return testing::parse_kf_text(text, "test.kf"); }

struct Backward {
  std::string example;
  ir::Mode mode;
  std::string text; // the backward graph as `kfuse grad` prints it
};

// Every example's backward graph in both modes (an example grad refuses would be left out;
// every op has a rule).
std::vector<Backward> backward_graphs() {
  std::vector<Backward> out;
  std::vector<std::filesystem::path> files;
  for (const auto &e :
       std::filesystem::directory_iterator(std::string(KFUSE_SOURCE_DIR) + "/examples"))
    if (e.path().extension() == ".kf")
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto &f : files)
    for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
      const ir::Graph forward = dsl::parse_kf_file(f.string());
      try {
        out.push_back({f.stem().string(), mode, ir::print_kf(ir::grad(forward, mode).backward)});
      } catch (const ir::GradError &) {
      }
    }
  return out;
}

} // namespace

TEST_CASE("backward plans: matmul(transpose(a), b) is matmul_tn, matmul(a, transpose(b)) linear") {
  const ir::Graph g = parse_text("pipeline t {\n  dim N\n  input g: f32[N, 3]\n"
                                 "  input x: f32[N, 2]\n  param w: f32[2, 3]\n"
                                 "  return matmul(transpose(g), x), matmul(g, transpose(w))\n}\n");
  const ir::Graph after = passes::transposed_operands(g, ir::Mode::Train);
  const std::string text = ir::print_kf(after);
  INFO(text);
  CHECK(text.find("matmul_tn(g, x)") != std::string::npos);
  CHECK(text.find("linear(g, w)") != std::string::npos);
  CHECK(after[after.outputs[0]].type == g[g.outputs[0]].type);
  CHECK(after[after.outputs[1]].type == g[g.outputs[1]].type);
  // aᵀ b in fp64: a = [[1, 2, 3], [4, 5, 6]] (N = 2), b = [[1, -1], [0.5, 2]].
  const ir::Graph tn = parse_text("pipeline tn {\n  input a: f32[2, 3]\n  input b: f32[2, 2]\n"
                                  "  return matmul_tn(a, b)\n}\n");
  CHECK(tn[tn.outputs[0]].type.str() == "f32[3, 2]");
  ir::TensorMap t{{"a", {{2, 3}, {1, 2, 3, 4, 5, 6}}}, {"b", {{2, 2}, {1, -1, 0.5, 2}}}};
  const auto out = ir::interpret(tn, ir::Mode::Eval, {}, t);
  CHECK(out[0].data == std::vector<double>{3, 7, 4.5, 8, 6, 9});
  CHECK_THROWS_WITH_AS(parse_text("pipeline bad {\n  input a: f32[2, 3]\n  input b: f32[4, 2]\n"
                                  "  return matmul_tn(a, b)\n}\n"),
                       doctest::Contains("inner dim"), std::exception);
}

TEST_CASE("backward plans: k_major_operands makes every GEMM a linear of K-major operands") {
  const ir::Graph g =
      parse_text("pipeline t {\n  dim N\n  input g: f32[N, 3]\n  input x: f32[N, 2]\n"
                 "  param w: f32[3, 2]\n  return matmul(transpose(g), x), matmul(g, w), "
                 "matmul(cast(transpose(g), dtype=bf16), cast(x, dtype=bf16))\n}\n");
  const ir::Graph after = passes::k_major_operands(g, ir::Mode::Train);
  const std::string text = ir::print_kf(after);
  INFO(text);
  CHECK(text.find("matmul") == std::string::npos);
  CHECK(text.find("t3 = linear(t1, t2)") != std::string::npos); // transpose(g), transpose(x)
  CHECK(text.find("= transpose(w)") != std::string::npos);
  // The cast of a transpose is transposed after the cast: the GEMM reads the copy itself.
  CHECK(text.find("transpose(cast(g") == std::string::npos);
  for (size_t i = 0; i < g.outputs.size(); ++i)
    CHECK(after[after.outputs[i]].type == g[g.outputs[i]].type);
  const plan::StageError worst =
      plan::first_failure(plan::check_planner(g, ir::Mode::Train, {{"N", 5}}, 3,
                                              {{"k_major_operands", passes::k_major_operands},
                                               {"eliminate_dead", passes::eliminate_dead}}),
                          1e-9);
  CHECK(worst.error <= 1e-9);
}

TEST_CASE("backward plans: every example's backward graph plans and emits at each precision") {
  const std::vector<Backward> graphs = backward_graphs();
  CHECK(graphs.size() >= 60);
  for (const Backward &b : graphs)
    for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16}) {
      INFO(b.example, " ", ir::mode_name(b.mode), " precision ", static_cast<int>(p));
      LowerOptions o;
      o.mode = b.mode;
      o.target = Target{"sm_90a", p};
      const Lowered l = lower(dsl::SourceFile("backward.kf", b.text), o);
      CHECK_FALSE(l.program.source.empty());
    }
}

TEST_CASE("backward plans: the planner's passes agree with the interpreter on backward graphs") {
  for (const Backward &b : backward_graphs()) {
    if (b.example != "gemm_bn_scale_softmax_512x1024" && b.example != "llama_gate_silu" &&
        b.example != "bert_output_residual_layernorm" && b.example != "tabular_elu_clamp" &&
        b.example != "sd_unet_groupnorm_silu" && b.example != "maxout_relu_max_pool1d" &&
        b.example != "bert_ffn_gelu_avg_pool1d")
      continue;
    INFO(b.example, " ", ir::mode_name(b.mode));
    const ir::Graph g = parse_text(b.text);
    ir::DimBindings dims;
    for (const std::string &d : g.dims)
      dims[d] = 5;
    const plan::StageError worst =
        plan::first_failure(plan::check_planner(g, b.mode, dims, 7, passes::pipeline()), 1e-9);
    INFO("worst stage ", worst.stage);
    CHECK(worst.error <= 1e-9);
  }
}

TEST_CASE("backward plans: a gradient product that only a row sum reads is summarized, not "
          "stored") {
  // pointnet's eval backward: Σ_rows g·x̂ (bn2_weight's gradient) needs only the column sums of
  // the product, and g·relu'(h) and the input gradient are summarized by the kernels that
  // store them: no col_partials kernel loads a matrix again.
  for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
    const ir::Graph forward =
        dsl::parse_kf_file(std::string(KFUSE_SOURCE_DIR) + "/examples/pointnet_mlp_relu_btf_"
                                                           "batchnorm.kf");
    const plan::Plan p = plan::make_plan(ir::grad(forward, mode).backward, mode);
    INFO(plan::print_plan_text(p, {}));
    int summarized_only = 0, stored_and_summarized = 0;
    for (const plan::Kernel &k : p.kernels) {
      if (mode == ir::Mode::Eval)
        CHECK(k.kind != plan::KernelKind::ColPartials);
      if (k.kind != plan::KernelKind::Elementwise || k.stats_of < 0)
        continue;
      CHECK(k.stats_of == k.anchor);
      (k.stores.empty() ? summarized_only : stored_and_summarized) += 1;
      CHECK(std::find(p.partials.begin(), p.partials.end(), k.stats_of) != p.partials.end());
      for (const plan::Intermediate &i : p.intermediates)
        if (k.stores.empty())
          CHECK(i.value != k.stats_of);
    }
    CHECK(summarized_only >= 1);
    CHECK(stored_and_summarized >= 2);
  }
}

TEST_CASE("backward plans: the pools' and groupnorm's gradients are one row pass each") {
  const std::map<std::string, std::string> template_of = {
      {"maxout_relu_max_pool1d", "kf::row_pool_grad<128, kf::Reduce::Max>("},
      {"bert_ffn_gelu_avg_pool1d", "kf::row_pool_grad<256, kf::Reduce::Mean>("},
      {"sd_unet_groupnorm_silu", "kf::row_group_norm_grad<256>("}};
  int found = 0;
  for (const Backward &b : backward_graphs()) {
    auto it = template_of.find(b.example);
    if (it == template_of.end())
      continue;
    ++found;
    INFO(b.example, " ", ir::mode_name(b.mode));
    LowerOptions o;
    o.mode = b.mode;
    o.target = Target{"sm_90a", Precision::FP32};
    const Lowered l = lower(dsl::SourceFile("backward.kf", b.text), o);
    // The gradient op is the only row stage of a row kernel of its own.
    int rows = 0;
    for (const plan::Kernel &k : l.plan.kernels)
      for (ir::ValueId st : k.row_stages) {
        const ir::OpClass cls = ir::op_info(l.plan.graph[st].op).cls;
        if (cls == ir::OpClass::PoolGrad || cls == ir::OpClass::NormGrad) {
          ++rows;
          CHECK(k.kind == plan::KernelKind::Row);
          CHECK(k.row_stages.size() == 1);
        }
      }
    CHECK(rows == 1);
    CHECK(l.program.source.find(it->second) != std::string::npos);
  }
  CHECK(found == 6);
}

TEST_CASE("backward plans: a row op reads its second matrix from an earlier kernel only") {
  // groupnorm_backward reads x from memory: a pass of the kernel that stores x (over the same
  // rows) would read it while other threads write it, and a GEMM's row epilogue would read the
  // product it is storing.
  const ir::Graph rows = parse_text("pipeline p {\n  dim N\n  input g: f32[N, 64]\n"
                                    "  t = softmax(g, dim=1)\n"
                                    "  return groupnorm_backward(g, t, groups=4)\n}\n");
  const plan::Plan p = plan::make_plan(rows, ir::Mode::Train);
  REQUIRE(p.kernels.size() == 2);
  CHECK(p.kernels[0].row_stages.size() == 1);
  CHECK(p.kernels[1].row_stages.size() == 1);
  const ir::Graph gemm = parse_text("pipeline p {\n  dim N\n  input x: f32[N, 64]\n"
                                    "  param w: f32[64, 64]\n  h = linear(x, w)\n"
                                    "  return groupnorm_backward(h, h, groups=4)\n}\n");
  const plan::Plan q = plan::make_plan(gemm, ir::Mode::Train);
  REQUIRE(q.kernels.size() == 2);
  CHECK(q.kernels[0].kind == plan::KernelKind::Gemm);
  CHECK(q.kernels[0].row_stages.empty());
  // Another matrix stored before the GEMM runs: the row epilogue takes it.
  const ir::Graph other = parse_text("pipeline p {\n  dim N\n  input x: f32[N, 64]\n"
                                     "  input y: f32[N, 64]\n  param w: f32[64, 64]\n"
                                     "  h = linear(x, w)\n"
                                     "  return groupnorm_backward(h, y, groups=4)\n}\n");
  const plan::Plan r = plan::make_plan(other, ir::Mode::Train);
  REQUIRE(r.kernels.size() == 1);
  CHECK(std::count(r.kernels[0].rules.begin(), r.kernels[0].rules.end(), "gemm_row_epilogue"));
}

TEST_CASE("backward plans: softmax's gradient is one row kernel reading both of its matrices") {
  // y * (g - Σ g·y): the row kernel's prologue loads y beside its rows (g) element by element,
  // so neither g·y nor the result's inputs go through memory.
  const ir::Graph g = parse_text("pipeline p {\n  dim N\n  input g: f32[N, 100]\n"
                                 "  input y: f32[N, 100]\n"
                                 "  s = sum(mul(g, y), dim=1, keepdim=true)\n"
                                 "  return mul(y, sub(g, s))\n}\n");
  const plan::Plan p = plan::make_plan(g, ir::Mode::Train);
  INFO(plan::print_plan_text(p, {}));
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.kernels[0].kind == plan::KernelKind::Row);
  CHECK(p.kernels[0].row_stages.size() == 2);
  CHECK(p.kernels[0].reads.size() == 2);
  CHECK(p.intermediates.empty());
  LowerOptions o;
  o.mode = ir::Mode::Train;
  o.target = Target{"sm_90a", Precision::FP32};
  const Lowered l = lower(dsl::SourceFile("softmax_grad.kf", ir::print_kf(g)), o);
  CHECK(l.program.source.find("kf::load(p_y + ") != std::string::npos);
}

TEST_CASE("backward plans: groupnorm_backward computes the elementwise ops after it in its pass") {
  const ir::Graph g =
      parse_text("pipeline p {\n  dim N\n  input g: f32[N, 64]\n"
                 "  input x: f32[N, 64]\n  param w: f32[64]\n"
                 "  return tanh(mul(groupnorm_backward(g, x, w, groups=4), w))\n}\n");
  const plan::Plan p = plan::make_plan(g, ir::Mode::Train);
  REQUIRE(p.kernels.size() == 1);
  CHECK(std::count(p.kernels[0].rules.begin(), p.kernels[0].rules.end(), "row_tail"));
  LowerOptions o;
  o.target = Target{"sm_90a", Precision::FP32};
  const Lowered l = lower(dsl::SourceFile("tail.kf", ir::print_kf(g)), o);
  CHECK(l.program.source.find("struct k0_row_pass0_post {") != std::string::npos);
}

TEST_CASE("backward plans: the gradient ops' shape rules name what is wrong") {
  auto error = [](const std::string &body) {
    return testing::kf_error("pipeline p {\n  dim N\n  input g: f32[N, 3]\n  input x: f32[N, 8]\n"
                             "  input y: f32[N, 6]\n  input v: f32[N, 8, 8]\n"
                             "  param w: f32[6]\n  return " +
                                 body + "\n}\n",
                             "t.kf");
  };
  CHECK(error("max_pool1d_backward(g, x, kernel_size=2, stride=2)")
            .find("t.kf:8:30: error: shape mismatch in max_pool1d_backward: g must have the 4 "
                  "windows of 8 features (kernel_size=2, stride=2), got f32[N, 3]") == 0);
  CHECK(error("avg_pool1d_backward(g, kernel_size=9, stride=1, features=8)")
            .find("avg_pool1d_backward: kernel_size=9 is wider than the 8 features") !=
        std::string::npos);
  CHECK(error("avg_pool1d_backward(g, kernel_size=2, stride=2)")
            .find("avg_pool1d_backward requires the attribute 'features'") != std::string::npos);
  CHECK(error("max_pool1d_backward(v, x, kernel_size=2, stride=2)")
            .find("max_pool1d_backward of f32[N, 8, 8] (rank 3) is not supported") !=
        std::string::npos);
  CHECK(error("groupnorm_backward(y, x, groups=2)")
            .find("shape mismatch in groupnorm_backward: x must have the shape of g f32[N, 6], "
                  "got f32[N, 8]") != std::string::npos);
  CHECK(error("groupnorm_backward(y, y, w, groups=4)")
            .find("groupnorm_backward: groups=4 does not divide the 6 features") !=
        std::string::npos);
  CHECK(error("groupnorm_backward(x, x, w, groups=2)")
            .find("weight must be [8] to match f32[N, 8], got f32[6]") != std::string::npos);
  const ir::Graph ok =
      parse_text("pipeline p {\n  dim N\n  input g: f32[N, 3]\n"
                 "  input y: f32[N, 7]\n"
                 "  return max_pool1d_backward(g, y, kernel_size=3, stride=2)\n}\n");
  CHECK(ok[ok.outputs[0]].type.str() == "f32[N, 7]");
}
