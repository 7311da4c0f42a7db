// `kfuse bench`'s figures and report without a GPU: the GEMMs' operand type and arithmetic,
// the datasheet peak table, and what the text and the JSON say of a bf16 pipeline.
#include "compiler/dsl/parser.h"
#include "compiler/lower.h"
#include "runtime/error.h"
#include "tools/kfuse/bench_figures.h"
#include "tools/kfuse/bench_report.h"
#include "tools/kfuse/command_line.h"

#include <doctest/doctest.h>

#include <string>

using namespace kfuse;
using namespace kfuse::tool;

namespace {

ir::Graph example(const std::string &name) {
  return dsl::parse_kf_file(std::string(KFUSE_SOURCE_DIR) + "/examples/" + name);
}

ir::Graph parse_text(const std::string &text) {
  dsl::SourceFile src("test.kf", text);
  dsl::Diagnostics diags(src);
  return dsl::parse_kf(src, diags);
}

GemmArithmetic arithmetic_of(const std::string &file, Precision p = Precision::FP32) {
  ir::Graph g = example(file);
  return gemm_arithmetic(g, gemm_shapes(g, {{"N", 1024}}), p);
}

rt::TimingStats timing(double median_ms) {
  rt::TimingStats t;
  t.ms = {median_ms};
  t.median = t.min = t.max = t.p10 = t.p90 = median_ms;
  return t;
}

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("bench figures: each GEMM's operand and product types, and the pipeline's arithmetic") {
  ir::Graph g = example("gemm_scale_bn_bf16.kf");
  std::vector<GemmShape> gemms = gemm_shapes(g, {{"N", 1024}});
  REQUIRE(gemms.size() == 1);
  CHECK(gemms[0].m == 1024);
  CHECK(gemms[0].n == 8192);
  CHECK(gemms[0].k == 8192);
  CHECK(gemms[0].trans_b);
  CHECK(gemms[0].operands == ir::DType::BF16);
  CHECK(gemms[0].result == ir::DType::BF16);
  // A and B in bf16, C in bf16: what cuBLAS alone reads and writes.
  CHECK(gemms[0].bytes() == 2 * (1024 * 8192 + 8192 * 8192 + 1024 * 8192));

  // A [B, T, F] operand multiplies as its B*T rows.
  ir::Graph btf = parse_text("pipeline btf {\n  dim B, T\n  input x: f32[B, T, 64]\n"
                             "  param w: f32[32, 64]\n  return linear(x, w)\n}\n");
  const std::vector<GemmShape> tokens = gemm_shapes(btf, {{"B", 4}, {"T", 7}});
  REQUIRE(tokens.size() == 1);
  CHECK(tokens[0].m == 28);
  CHECK(tokens[0].k == 64);
  CHECK(tokens[0].n == 32);

  GemmArithmetic bf16 = arithmetic_of("gemm_bn_scale_softmax_bf16.kf");
  CHECK(bf16.half());
  CHECK(bf16.operands == ir::DType::BF16);
  CHECK(bf16.text() == "bf16 operands, fp32 accumulation");
  CHECK(bf16.precision_name() == "fp32");
  GemmArithmetic f16 = arithmetic_of("bert_head_gelu_layernorm_f16.kf");
  CHECK(f16.operands == ir::DType::F16);
  CHECK(f16.text() == "f16 operands, fp32 accumulation");
  GemmArithmetic tf32 = arithmetic_of("gemm_scale_bn.kf", Precision::TF32);
  CHECK(!tf32.half());
  CHECK(tf32.text() == "precision tf32");
  CHECK(arithmetic_of("gemm_scale_bn.kf", Precision::FP32x3).text() == "precision 3xtf32");
}

TEST_CASE("bench figures: precision bf16 benches the rounded graph's bf16 GEMMs") {
  LowerOptions o;
  o.target.precision = Precision::BF16;
  o.until = LowerOptions::Until::Plan;
  const ir::Graph g =
      lower(dsl::SourceFile::read(std::string(KFUSE_SOURCE_DIR) + "/examples/gemm_scale_bn.kf"), o)
          .graph;
  const std::vector<GemmShape> gemms = gemm_shapes(g, {{"N", 1024}});
  REQUIRE(gemms.size() == 1);
  CHECK(gemms[0].operands == ir::DType::BF16); // cuBLAS's bf16 GEMM is the baseline
  const GemmArithmetic a = gemm_arithmetic(g, gemms, Precision::BF16);
  CHECK(a.half());
  CHECK(a.text() == "precision bf16: f32 tensors, bf16 operands, fp32 accumulation");
  // f16 operands are not bf16's to round: refused as tf32 is.
  CHECK_THROWS_AS(arithmetic_of("bert_head_gelu_layernorm_f16.kf", Precision::BF16), UsageError);
}

TEST_CASE("bench figures: tf32 and 3xtf32 are refused for bf16/f16 operands, mixed GEMMs too") {
  for (Precision p : {Precision::TF32, Precision::FP32x3}) {
    const std::string name = p == Precision::TF32 ? "tf32" : "3xtf32";
    CHECK_THROWS_WITH_AS(
        arithmetic_of("gemm_scale_bn_bf16.kf", p),
        ("--precision " + name +
         ": pipeline 'gemm_scale_bn_bf16' multiplies bf16 operands, which run on bf16 tensor "
         "cores with fp32 accumulation whatever the precision; tf32, 3xtf32 and bf16 apply to "
         "f32 operands only: bench it with --precision fp32 (the default)")
            .c_str(),
        UsageError);
  }
  ir::Graph mixed = parse_text(R"(pipeline mixed {
  dim N
  input  x: f32[N, 16]
  input  y: bf16[N, 16]
  param  w: f32[16, 16]
  param  v: bf16[16, 16]
  return linear(x, w), linear(y, v)
}
)");
  CHECK_THROWS_WITH_AS(gemm_arithmetic(mixed, gemm_shapes(mixed, {{"N", 4}}), Precision::FP32),
                       "pipeline 'mixed' has GEMMs of f32 and bf16 operands: no one peak "
                       "measures them; bench them as separate pipelines",
                       Error);
}

TEST_CASE("bench figures: the dense datasheet peak of each arithmetic on each board") {
  GemmArithmetic fp32, tf32, bf16, f16;
  tf32.precision = Precision::TF32;
  bf16.operands = ir::DType::BF16;
  f16.operands = ir::DType::F16;
  GemmArithmetic x3;
  x3.precision = Precision::FP32x3;
  struct Row {
    const char *device;
    double fp32, tf32, half;
    const char *board;
  };
  for (const Row &r : {Row{"NVIDIA H100 80GB HBM3", 67.0, 495.0, 989.4, "H100/H200 SXM"},
                       Row{"NVIDIA H200", 67.0, 495.0, 989.4, "H100/H200 SXM"},
                       Row{"NVIDIA H100 PCIe", 51.2, 378.0, 756.0, "H100 PCIe"},
                       Row{"NVIDIA H100 NVL", 60.0, 417.5, 835.0, "H100 NVL"}}) {
    INFO(r.device);
    CHECK(assumed_peak(r.device, fp32).tflops == r.fp32);
    CHECK(assumed_peak(r.device, x3).tflops == r.fp32); // fp32-accurate: the fp32 peak
    CHECK(assumed_peak(r.device, tf32).tflops == r.tf32);
    CHECK(assumed_peak(r.device, bf16).tflops == r.half);
    CHECK(assumed_peak(r.device, f16).tflops == r.half);
    CHECK(assumed_peak(r.device, bf16).assumed ==
          std::string("bf16 tensor core, ") + r.board + " dense, datasheet");
    CHECK(assumed_peak(r.device, f16).assumed ==
          std::string("f16 tensor core, ") + r.board + " dense, datasheet");
  }
  Peak unknown = assumed_peak("NVIDIA A100-SXM4-80GB", bf16);
  CHECK(unknown.tflops == 0);
  CHECK(unknown.assumed ==
        "unknown: no bf16 tensor core datasheet peak is built in for 'NVIDIA A100-SXM4-80GB'");
}

TEST_CASE("bench report: a bf16 pipeline's header, peak, cuBLAS row and JSON fields") {
  ir::Graph g = example("gemm_scale_bn_bf16.kf");
  BenchReport r;
  r.pipeline = g.name;
  r.file = "examples/gemm_scale_bn_bf16.kf";
  r.mode = "train";
  r.dims = {{"N", 1024}};
  r.device = "NVIDIA H100 80GB HBM3";
  r.iters = 100;
  r.gemms = gemm_shapes(g, r.dims);
  r.flop = r.gemms.at(0).flop();
  r.arithmetic = gemm_arithmetic(g, r.gemms, Precision::FP32);
  r.peak = assumed_peak(r.device, r.arithmetic);
  r.min_bytes = 1 << 20;
  r.cublas.label = "cuBLAS GEMM alone (bf16)";
  r.cublas.timing = timing(0.2);
  r.fused.timing = timing(0.21);
  r.unfused.supported = false;
  r.unfused.reason = "a reason";

  const double tflops = r.flop / 0.2e-3 / 1e12; // 687.2 TFLOP/s
  REQUIRE(r.tflops(r.cublas).has_value());
  CHECK(*r.tflops(r.cublas) == doctest::Approx(tflops));
  CHECK(*r.percent_of_peak(r.cublas) == doctest::Approx(100.0 * tflops / 989.4));

  const std::string text = report_text(r);
  INFO(text);
  CHECK(contains(text, "kfuse bench: gemm_scale_bn_bf16 (examples/gemm_scale_bn_bf16.kf) N=1024, "
                       "mode train, bf16 operands, fp32 accumulation\n"));
  CHECK(contains(text, "GEMM (MxNxK, operand type -> product type): 1024x8192x8192 (bf16 -> "
                       "bf16), 137.44 GFLOP"));
  CHECK(contains(text, "peak assumed: 989.4 TFLOP/s (bf16 tensor core, H100/H200 SXM dense, "
                       "datasheet); the GEMM at that peak takes 0.139 ms"));
  CHECK(contains(text, "cuBLAS GEMM alone (bf16)"));
  CHECK(contains(text, "69.5%"));
  CHECK(contains(text, "unfused: not supported at bf16 operands (a reason)"));
  CHECK(contains(text, "fused / cuBLAS GEMM alone: 1.050x the time"));

  const std::string json = report_json(r);
  INFO(json);
  CHECK(contains(json, "\"precision\": \"fp32\""));
  CHECK(contains(json, "\"operands\": \"bf16\", \"accumulation\": \"fp32\""));
  CHECK(contains(json, "{\"m\": 1024, \"n\": 8192, \"k\": 8192, \"trans_b\": true, "
                       "\"operands\": \"bf16\", \"result\": \"bf16\"}"));
  CHECK(contains(json, "\"peak\": {\"tflops\": 989.4, \"assumed\": \"bf16 tensor core, H100/H200 "
                       "SXM dense, datasheet\""));
  CHECK(contains(json, "\"fused_over_cublas_gemm\": 1.05"));
}

TEST_CASE("bench report: a pipeline without a GEMM has no operand type in its JSON") {
  BenchReport r;
  r.pipeline = "p";
  r.mode = "eval";
  const std::string json = report_json(r);
  CHECK(contains(json, "\"gemm\": {\"shapes\": [], \"flop\": 0, \"operands\": null, "
                       "\"accumulation\": null}"));
  CHECK(contains(report_text(r), ", mode eval, precision fp32\n"));
}

TEST_CASE("bench report: the fused GEMMs' tile and split-K S, in the text and the JSON") {
  BenchReport r;
  r.pipeline = "gemm_bn_scale_softmax";
  r.mode = "eval";
  r.fused.timing = timing(0.02);
  r.fused.gemm_launches = {{"k0_gemm", "128x256x1", "tf32 128 x 256 tile: why", 4}};
  r.unfused.timing = timing(0.05);

  const std::string text = report_text(r);
  INFO(text);
  CHECK(contains(text, "fused k0_gemm: tile 128x256x1, split-K S = 4: tf32 128 x 256 tile: why\n"));
  const std::string json = report_json(r);
  INFO(json);
  CHECK(contains(json, "\"gemm_launches\": [{\"kernel\": \"k0_gemm\", \"tile\": \"128x256x1\", "
                       "\"splits\": 4, \"config\": \"tf32 128 x 256 tile: why\"}]"));
  // The other contenders launch no kfuse GEMM.
  CHECK(contains(json, "\"gemm_launches\": []"));

  r.fused.gemm_launches = {{"k0_gemm", "", "fp32 SIMT", 1}};
  CHECK(contains(report_text(r), "fused k0_gemm: its mainloop's one tile, K not split (S = 1): "
                                 "fp32 SIMT\n"));
  CHECK(contains(report_json(r), "\"tile\": null, \"splits\": 1"));
}

TEST_CASE("bench report: fused and unfused outputs agree within twice the precision's bound, or "
          "the report says which run is wrong") {
  BenchReport r;
  r.pipeline = "p";
  r.mode = "eval";
  r.agreement = Agreement{1e-6, 2e-7, 2e-5};
  CHECK(r.agreement->agrees());
  CHECK(contains(report_text(r),
                 "fused vs unfused output:   max |diff| 1e-06, ||diff||/||unfused|| "
                 "2e-07 (within 2e-05)\n"));
  CHECK(contains(
      report_json(r),
      "\"fused_vs_unfused_output\": {\"max_abs\": 1e-06, \"rel\": 2e-07, \"bound\": 2e-05}"));
  r.agreement = Agreement{5.35, 0.568, 2e-5};
  CHECK_FALSE(r.agreement->agrees());
  CHECK(contains(report_text(r), "||diff||/||unfused|| 0.568 (BEYOND 2e-05: the two runs disagree, "
                                 "one of them computes a wrong result)\n"));
  // --backward: the report says the gradients compared are both backwards' on the same inputs.
  r.agreement = Agreement{1e-6, 2e-7, 2e-5, true};
  CHECK(contains(report_text(r), "(within 2e-05); the unfused gradients on the values the fused "
                                 "forward saved\n"));
}
