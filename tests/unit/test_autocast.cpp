// Precision bf16 on f32 tensors: the autocast_bf16 rewrite, the interpreter's roundings, the
// planner's proof and placement of the roundings, and NVRTC compiles of the kernels.
#include "compiler/dsl/parser.h"
#include "compiler/ir/interpreter.h"
#include "compiler/ir/printer.h"
#include "compiler/lower.h"
#include "compiler/passes/passes.h"
#include "compiler/plan/agreement.h"
#include "compiler/plan/plan_printer.h"
#include "compiler/plan/planner.h"
#include "kfuse/kfuse.h"
#include "runtime/pipeline.h"
#include "tests/support/temp_cache.h"

#include <cmath>
#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace kfuse;
using ir::OpKind;

namespace {

std::string root() { return KFUSE_SOURCE_DIR; }

dsl::SourceFile example(const std::string &name) {
  return dsl::SourceFile::read(root() + "/examples/" + name + ".kf");
}

Lowered autocast_plan(const dsl::SourceFile &src, ir::Mode mode) {
  LowerOptions o;
  o.mode = mode;
  o.target.precision = Precision::BF16;
  o.until = LowerOptions::Until::Plan;
  return lower(src, o);
}

const char *kTwoGemms = R"(pipeline two {
  dim N
  input  x: f32[N, 8]
  param  w1: f32[16, 8]
  param  b1: f32[16]
  param  w2: f32[8, 16]
  h = gelu(linear(x, w1, b1), approximate="tanh")
  return linear(h, w2)
}
)";

int count_ops(const ir::Graph &g, OpKind op) {
  int n = 0;
  for (const ir::Value &v : g.values)
    n += v.is_op() && v.op == op;
  return n;
}

} // namespace

TEST_CASE("autocast_bf16: GEMM operands are cast to bf16, results and every other op stay f32") {
  const ir::Graph g = autocast_plan(dsl::SourceFile("two.kf", kTwoGemms), ir::Mode::Eval).graph;
  CHECK(count_ops(g, OpKind::Cast) == 6); // x, w1, h, w2 to bf16; both products back to f32
  for (const ir::Value &v : g.values) {
    if (!v.is_op() || v.is_effect())
      continue;
    const bool operand_cast = v.op == OpKind::Cast && v.attrs.at("dtype").dim == "bf16";
    INFO(ir::print_kf(g));
    if (v.op == OpKind::Linear) {
      CHECK(g[v.args[0]].type.dtype == ir::DType::BF16);
      CHECK(v.args.size() == 2); // the bias is added in fp32, after the product
    }
    CHECK(v.type.dtype ==
          (operand_cast || v.op == OpKind::Linear ? ir::DType::BF16 : ir::DType::F32));
  }
  CHECK(g[g.outputs[0]].type.dtype == ir::DType::F32);
  // The printed graph parses back (cast is an internal op, valid .kf).
  dsl::SourceFile printed("printed.kf", ir::print_kf(g));
  dsl::Diagnostics diags(printed);
  CHECK(ir::print_kf(dsl::parse_kf(printed, diags)) == ir::print_kf(g));
}

TEST_CASE(
    "autocast_bf16: a value two GEMMs multiply is rounded once, and bf16 GEMMs are left alone") {
  const ir::Graph swiglu = autocast_plan(example("swiglu_style_gate"), ir::Mode::Eval).graph;
  CHECK(count_ops(swiglu, OpKind::Cast) == 5); // x once, each weight, each product
  const ir::Graph bf16 = autocast_plan(example("gemm_bn_scale_softmax_bf16"), ir::Mode::Eval).graph;
  CHECK(count_ops(bf16, OpKind::Cast) == 0);
}

TEST_CASE("interpreter: precision bf16 multiplies the bf16 roundings exactly, adds the bias in "
          "fp64") {
  const char *text = R"(pipeline one {
  input  x: f32[2, 3]
  param  w: f32[1, 3]
  param  b: f32[1]
  return linear(x, w, b)
}
)";
  const ir::Graph g = autocast_plan(dsl::SourceFile("one.kf", text), ir::Mode::Eval).graph;
  ir::TensorMap t;
  t["x"] = {{2, 3}, {1.00390625 + 1e-7, 3.14159, -2.71828, 0.1, 0.2, 0.3}};
  t["w"] = {{1, 3}, {1.0 / 3, -0.7, 1e-3}};
  t["b"] = {{1}, {0.123456789}};
  const std::vector<ir::HostTensor> out = ir::interpret(g, ir::Mode::Eval, {}, t);
  for (int i = 0; i < 2; ++i) {
    double rounded = 0, exact = 0;
    for (int k = 0; k < 3; ++k) {
      const double x = t["x"].data[static_cast<size_t>(i * 3 + k)];
      const double w = t["w"].data[static_cast<size_t>(k)];
      rounded += ir::round_to(ir::DType::BF16, x) * ir::round_to(ir::DType::BF16, w);
      exact += x * w;
    }
    // Equal up to the order of fp64 additions; the unrounded product is ~1e-3 away.
    const double y = out[0].data[static_cast<size_t>(i)];
    CHECK(y == doctest::Approx(rounded + t["b"].data[0]).epsilon(1e-13));
    CHECK(std::abs(y - (exact + t["b"].data[0])) > 1e-5);
  }
  // 1 + 2^-8 + 1e-7 rounds up to 1 + 2^-7: the operand really is rounded, not truncated.
  CHECK(ir::round_to(ir::DType::BF16, 1.00390625 + 1e-7) == 1.0078125);
}

TEST_CASE("planner: every pass and the plan agree with the autocast graph, both modes") {
  // The founding chains at 512 x 1024: the fp64 interpreter runs every stage.
  for (const char *name : {"gemm_bn_scale_softmax_512x1024", "gemm_scale_bn_512x1024",
                           "gpt2_mlp_dropout", "mobilenetv3_head_hardswish"})
    for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
      const ir::Graph g = autocast_plan(example(name), mode).graph;
      INFO(name, " ", ir::mode_name(mode));
      for (int64_t n : {1, 5}) {
        const plan::StageError worst = plan::first_failure(
            plan::check_planner(g, mode, {{"N", n}}, 11 + static_cast<uint64_t>(n),
                                passes::pipeline()),
            1e-9);
        CHECK_MESSAGE(worst.error <= 1e-9, "worst at ", worst.stage);
      }
    }
}

TEST_CASE("planner: weights are rounded per bind, inputs per run, activations by their producer") {
  const Lowered l = autocast_plan(example("gpt2_mlp_dropout"), ir::Mode::Eval);
  const plan::Plan &p = l.plan;
  int per_bind = 0, gemms = 0;
  for (const plan::Kernel &k : p.kernels) {
    per_bind += k.per_bind;
    gemms += k.kind == plan::KernelKind::Gemm;
  }
  CHECK(per_bind == 2); // fc_weight, proj_weight
  CHECK(gemms == 2);
  const std::string text = plan::print_plan_text(p, {{"N", 64}});
  INFO(text);
  CHECK(text.find("roundings\n") != std::string::npos);
  CHECK(text.find("bf16[3072, 768] of fc_weight: once per bind") != std::string::npos);
  CHECK(text.find("bf16[768, 3072] of proj_weight: once per bind") != std::string::npos);
  CHECK(text.find("bf16[N, 768] of x: every run") != std::string::npos);
  CHECK(text.find("bf16[N, 3072] of") != std::string::npos);
  CHECK(text.find(", which stores it\n") != std::string::npos);
  // The hidden activation crosses kernels as bf16 (the second GEMM's operand), nothing as f32.
  for (const plan::Intermediate &i : p.intermediates)
    CHECK(i.type.dtype == ir::DType::BF16);
  // Unfused, every rounding runs per run, as PyTorch's eager mode casts.
  LowerOptions o;
  o.target.precision = Precision::BF16;
  o.fuse = false;
  o.until = LowerOptions::Until::Plan;
  for (const plan::Kernel &k : lower(example("gpt2_mlp_dropout"), o).plan.kernels)
    CHECK_FALSE(k.per_bind);
}

TEST_CASE("planner: without precision bf16 no plan has a per-bind kernel or a rounding") {
  const std::string text = plan::print_plan_text(
      plan::make_plan(dsl::parse_kf_file(root() + "/examples/gpt2_mlp_dropout.kf"), ir::Mode::Eval),
      {});
  CHECK(text.find("roundings") == std::string::npos);
  CHECK(text.find("once per bind") == std::string::npos);
}

TEST_CASE("nvrtc: precision bf16 compiles the founding chains and a two-GEMM MLP for sm_90a") {
  TempCache cache;
  for (const char *name : {"gemm_bn_scale_softmax", "gemm_scale_bn", "gpt2_mlp_dropout"})
    for (Mode mode : {Mode::Train, Mode::Eval}) {
      Options o;
      o.arch = "sm_90a";
      o.mode = mode;
      o.precision = Precision::BF16;
      INFO(name, mode == Mode::Train ? " train" : " eval");
      Pipeline p = Pipeline::from_file(root() + "/examples/" + name + ".kf", o);
      const std::string &cu = p.cuda_source();
      CHECK(cu.find("kf::Sm90Gemm<kf::sm90::Operand::Bf16") != std::string::npos);
      CHECK(cu.find("kf::round_to_bf16(") != std::string::npos);
      CHECK(cu.find("Operand::Tf32") == std::string::npos);
      for (const KernelReport &k : p.report().kernels)
        CHECK(k.spill_stores == 0);
    }
}

TEST_CASE("api: precision bf16 runs matmul through its weight transposed once per bind, and says "
          "where it cannot run: K not a multiple of 8") {
  Options o;
  o.arch = "sm_90a";
  o.precision = Precision::BF16;
  auto compile = [&](int k, const std::string &weight, const std::string &product) {
    const std::string text = fmt::format("pipeline g {{\n  dim N\n  input  x: f32[N, {}]\n  "
                                         "param  w: f32[{}]\n  return {}\n}}\n",
                                         k, weight, product);
    return Pipeline::from_string(text, "g.kf", o);
  };
  // The Hopper GEMM reads K-major operands: matmul's [K, N] weight is transposed by a kernel
  // of its own, which reads a param only and so runs once per bind.
  const Pipeline matmul = compile(8, "8, 4", "matmul(x, w)");
  CHECK(matmul.plan_text().find("runs     once per bind: it reads params only") !=
        std::string::npos);
  CHECK(matmul.plan_text().find("(transpose)") != std::string::npos);
  CHECK(matmul.cuda_source().find("kf::transpose_tile(") != std::string::npos);
  CHECK(matmul.cuda_source().find("kf::Sm90Gemm<kf::sm90::Operand::Bf16") != std::string::npos);
  // K = 6: the rounded copies of x and w are written by kernels, with rows padded to 16 bytes.
  const Pipeline odd = compile(6, "4, 6", "linear(x, w)");
  CHECK(odd.cuda_source().find("kf::map_elements<1>(d_N, 6, 8, ") != std::string::npos);
  CHECK(odd.cuda_source().find("kf::map_elements<1>(4, 6, 8, ") != std::string::npos);
  CHECK(odd.cuda_source().find("kf::Sm90Gemm<kf::sm90::Operand::Bf16") != std::string::npos);
  // A declared bf16 tensor is read in place: its rows must be 16-byte multiples.
  CHECK_THROWS_WITH_AS(Pipeline::from_string("pipeline g {\n  dim N\n  input  x: bf16[N, 6]\n  "
                                             "param  w: bf16[4, 6]\n  return linear(x, w)\n}\n",
                                             "g.kf", o),
                       doctest::Contains("g.kf:5:10: error: linear of bf16 operands runs on the "
                                         "Hopper GEMM, which needs the inner dim a constant "
                                         "multiple of 8"),
                       dsl::DiagnosticError);
}
