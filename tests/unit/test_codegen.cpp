// Code generation and the C++ API without a GPU: golden plans and sources, determinism,
// NVRTC compiles of every example in both modes, the disk cache, and the API's checks.
#include "compiler/build_executable.h"
#include "compiler/codegen/program.h"
#include "compiler/dsl/parser.h"
#include "compiler/ir/printer.h"
#include "compiler/plan/plan_printer.h"
#include "compiler/plan/planner.h"
#include "compiler/target.h"
#include "kfuse/kfuse.h"
#include "runtime/pipeline.h"
#include "tests/support/temp_cache.h"
#include "tools/check/reference_check.h"

#include <cmath>
#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

using namespace kfuse;

namespace {

std::string root() { return KFUSE_SOURCE_DIR; }

std::string read(const std::string &path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read ", path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

plan::Plan plan_of(const std::string &example, ir::Mode mode) {
  return plan::make_plan(dsl::parse_kf_file(root() + "/examples/" + example + ".kf"), mode);
}

const char *kSmall = R"(pipeline small {
  dim N
  input  x: f32[N, 6]
  param  weight: f32[5, 6]
  param  scale: f32[1]
  h = linear(x, weight)
  return softmax(mul(h, scale), dim=1)
}
)";

// kSmall compiled for sm_90a (no GPU needed), in `mode`.
Pipeline small_pipeline(Mode mode) {
  Options o;
  o.arch = "sm_90a";
  o.mode = mode;
  return Pipeline::from_string(kSmall, "small.kf", o);
}

} // namespace

TEST_CASE("codegen: plans and sources of the founding workloads match their golden files") {
  for (const char *example : {"gemm_bn_scale_softmax", "gemm_scale_bn"})
    for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
      std::string stem = std::string(example) + "." + std::string(ir::mode_name(mode));
      INFO(stem, " (regenerate with tests/golden/update.sh and review the diff)");
      plan::Plan p = plan_of(example, mode);
      CHECK(plan::print_plan_json(p, {}) == read(root() + "/tests/golden/plan/" + stem + ".json"));
      CHECK(codegen::generate(p).source == read(root() + "/tests/golden/codegen/" + stem + ".cu"));
    }
}

TEST_CASE("codegen: output is deterministic") {
  for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
    codegen::Program a = codegen::generate(plan_of("gemm_bn_scale_softmax", mode));
    codegen::Program b = codegen::generate(plan_of("gemm_bn_scale_softmax", mode));
    CHECK(a.source == b.source);
  }
}

TEST_CASE("codegen: standalone source inlines every template once") {
  std::string s = codegen::inline_templates(
      codegen::generate(plan_of("gemm_scale_bn", ir::Mode::Train)).source);
  CHECK(s.find("#include \"") == std::string::npos);
  CHECK(s.find("// ---- begin gemm_simt.cuh") != std::string::npos);
  CHECK(s.find("// ---- begin gemm_simt.cuh", s.find("// ---- begin gemm_simt.cuh") + 1) ==
        std::string::npos);
}

TEST_CASE("codegen: bf16/f16 tensors are read and written in their type, GEMMs on the sm90 "
          "mainloop with 2-byte tensor maps, matrices stored between kernels in their type") {
  auto plan_in = [](const char *dtype, int k, const char *op = "linear") {
    std::string text = fmt::format(
        "pipeline half {{\n  dim N\n  input x: {0}[N, {1}]\n  param w: {0}[{2}]\n"
        "  param g: f32[5]\n  state rm: f32[5]\n  state rv: {0}[5]\n"
        "  h = {3}(x, w)\n  return softmax(batchnorm(h, g, g, rm, rv), dim=1)\n}}\n",
        dtype, k, std::string(op) == "linear" ? fmt::format("5, {}", k) : fmt::format("{}, 5", k),
        op);
    dsl::SourceFile src("half.kf", text);
    dsl::Diagnostics diags(src);
    return plan::make_plan(dsl::parse_kf(src, diags), ir::Mode::Train);
  };
  for (auto [dtype, type, operand] :
       {std::tuple{"bf16", "kf::bf16", "Bf16"}, std::tuple{"f16", "kf::f16", "F16"}}) {
    INFO(dtype);
    plan::Plan p = plan_in(dtype, 16);
    // The GEMM output h feeds batchnorm in another kernel: stored in h's type, as PyTorch
    // stores it; batchnorm's folded per-feature scale and shift stay f32.
    REQUIRE(p.intermediates.size() >= 2);
    CHECK(p.intermediates[0].type.str() == fmt::format("{}[N, 5]", dtype));
    CHECK(plan::print_plan_text(p, {}).find(fmt::format("{}[N, 5] (N*10 B)", dtype)) !=
          std::string::npos);
    for (size_t i = 1; i < p.intermediates.size(); ++i)
      CHECK(p.intermediates[i].type.str() == "f32[5]");
    for (Precision precision : {Precision::FP32, Precision::TF32}) {
      codegen::Program prog = codegen::generate(p, Target{"sm_90a", precision});
      // 5 output features: the narrow-layer tile.
      CHECK(prog.source.find(fmt::format("kf::Sm90Gemm<kf::sm90::Operand::{}, 128, 64, 2>",
                                         operand)) != std::string::npos);
      CHECK(ir::dtype_bytes(prog.launches.at(0).params.at(0).map.element) == 2);
      CHECK(ir::dtype_name(prog.launches.at(0).params.at(1).map.element) == dtype);
      CHECK(prog.launches.at(0).params.at(1).map.box_inner == 64);
      CHECK(prog.source.find(fmt::format("{} *__restrict__ p_rv", type)) != std::string::npos);
      const std::string out = ir::printed_names(p.graph)[static_cast<size_t>(p.graph.outputs[0])];
      CHECK(prog.source.find(fmt::format("{} *__restrict__ p_{}", type, out)) != std::string::npos);
      CHECK(prog.source.find(fmt::format("const {} *__restrict__ p_h", type)) != std::string::npos);
    }
    // The Hopper GEMM is the only one taking 2-byte operands: what it cannot run is an error.
    CHECK_THROWS_WITH_AS(codegen::generate(plan_in(dtype, 12), Target{"sm_90a", Precision::FP32}),
                         doctest::Contains("needs the inner dim a constant multiple of 8"),
                         codegen::CodegenError);
    CHECK_THROWS_WITH_AS(codegen::generate(p, Target{"sm_80", Precision::FP32}),
                         doctest::Contains("needs --arch sm_90a; got sm_80"),
                         codegen::CodegenError);
    CHECK_THROWS_WITH_AS(
        codegen::generate(plan_in(dtype, 16, "matmul"), Target{"sm_90a", Precision::FP32}),
        doctest::Contains("the Hopper GEMM reads K-major operands only"), codegen::CodegenError);
  }
}

TEST_CASE("nvrtc: every example compiles for sm_90a in both modes, fused and unfused") {
  TempCache cache;
  // A chain with nothing to fuse (a GEMM, then a row kernel) plans the same kernels unfused:
  // the same source is a cache hit, any other a compile.
  std::set<std::string> compiled;
  for (const auto &entry : std::filesystem::directory_iterator(root() + "/examples")) {
    if (entry.path().extension() != ".kf")
      continue;
    for (Mode mode : {Mode::Train, Mode::Eval})
      for (bool fuse : {true, false}) {
        INFO(entry.path().string(), mode == Mode::Train ? " train" : " eval",
             fuse ? "" : " unfused");
        Options o;
        o.mode = mode;
        o.arch = "sm_90a";
        Pipeline p = rt::PipelineAccess::compile(
            build_executable(lower(dsl::SourceFile::read(entry.path().string()),
                                   lower_options(rt::PipelineAccess::request(o, fuse)))));
        const CompileReport &r = p.report();
        CHECK(r.cache_hit == !compiled.insert(p.cuda_source()).second);
        REQUIRE(!r.kernels.empty());
        for (const KernelReport &k : r.kernels) {
          INFO(k.name);
          CHECK(k.registers > 0);
          CHECK(k.spill_stores == 0);
        }
        MESSAGE(p.name(), ": ", r.kernels.size(), " kernels, ", r.milliseconds, " ms");
      }
  }
}

TEST_CASE("nvrtc: a GEMM variant is reported unused exactly where ptxas spilled it") {
  TempCache cache;
  Options o;
  o.mode = Mode::Train;
  o.arch = "sm_90a";
  o.precision = Precision::TF32;
  // A train-mode dropout beside the 128 x 256 tile's 128 fp32 accumulators per thread: ptxas
  // 13.0 spills that variant.
  Pipeline p = Pipeline::from_file(root() + "/examples/bert_output_dropout_layernorm.kf", o);
  bool wider = false;
  for (const KernelReport &k : p.report().kernels) {
    INFO(k.name);
    CHECK(k.unused.empty() == !(k.variant && (k.spill_stores > 0 || k.spill_loads > 0)));
    if (k.name == "k1_gemm_wider") { // after k0, the weight's rounding to tf32
      wider = true;
      CHECK(k.spill_stores > 0);
      CHECK(k.unused.find("k1_gemm or its other variants run instead") != std::string::npos);
    }
  }
  CHECK(wider);
}

TEST_CASE("nvrtc: every row kernel kind compiles on bf16 and f16 rows") {
  TempCache cache;
  for (const char *dtype : {"bf16", "f16"}) {
    INFO(dtype);
    Options o;
    o.mode = Mode::Eval;
    o.arch = "sm_90a";
    const std::string text = fmt::format(R"(pipeline rows {{
  dim N
  input  x: {0}[N, 64]
  param  g: {0}[64]
  input  y: {0}[N, 64]
  input  p: {0}[N, 31]
  return softmax(x, dim=1), layernorm(x, g), groupnorm(x, g, g, groups=4), instancenorm(x),
         max_pool1d(x, kernel_size=3, stride=2), avg_pool1d(x, kernel_size=2), sum(x, dim=1),
         groupnorm_backward(y, x, g, groups=4), max_pool1d_backward(p, x, kernel_size=3, stride=2),
         avg_pool1d_backward(p, kernel_size=3, stride=2, features=64)
}}
)",
                                         dtype);
    Pipeline p = Pipeline::from_string(text, "rows.kf", o);
    for (const KernelReport &k : p.report().kernels) {
      INFO(k.name);
      CHECK(k.registers > 0);
      CHECK(k.spill_stores == 0);
    }
    CHECK(p.cuda_source().find(fmt::format("kf::{} *__restrict__", dtype)) != std::string::npos);
  }
}

TEST_CASE("nvrtc: the second compile of a pipeline is a cache hit") {
  TempCache cache;
  Options o;
  o.arch = "sm_90a";
  std::string file = root() + "/examples/gemm_bn_scale_softmax.kf";
  Pipeline first = Pipeline::from_file(file, o);
  Pipeline second = Pipeline::from_file(file, o);
  CHECK_FALSE(first.report().cache_hit);
  CHECK(second.report().cache_hit);
  CHECK(second.report().cache_key == first.report().cache_key);
  CHECK(second.report().kernels.size() == first.report().kernels.size());
  MESSAGE("cold ", first.report().milliseconds, " ms, warm ", second.report().milliseconds, " ms");
}

TEST_CASE("api: bad bindings and runs name the pipeline, the tensor and the shapes") {
  TempCache cache;
  Pipeline p = small_pipeline(Mode::Eval);
  alignas(16) static float storage[64];
  CHECK(p.inputs() == std::vector<std::string>{"x"});
  CHECK(p.params() == std::vector<std::string>{"weight", "scale"});
  CHECK_THROWS_WITH_AS(p.bind("bias", {storage, {5}}),
                       doctest::Contains("pipeline 'small': 'bias' is not a param or state"),
                       Error);
  CHECK_THROWS_WITH_AS(p.bind("x", {storage, {2, 6}}), doctest::Contains("'x' is not a param"),
                       Error);
  CHECK_THROWS_WITH_AS(p.bind("weight", {storage, {6, 5}}),
                       doctest::Contains("tensor 'weight' must be f32[5, 6], got shape [6, 5]"),
                       Error);
  CHECK_THROWS_WITH_AS(p.bind("weight", {storage, {30}}), doctest::Contains("rank 1 instead of 2"),
                       Error);
  CHECK_THROWS_WITH_AS(p.bind("weight", {nullptr, {5, 6}}),
                       doctest::Contains("'weight' is a null pointer"), Error);
  CHECK_THROWS_WITH_AS(p.bind("weight", {reinterpret_cast<char *>(storage) + 2, {5, 6}}),
                       doctest::Contains("not 4-byte aligned"), Error);
  p.bind("weight", {storage, {5, 6}});
  CHECK_THROWS_WITH_AS(p.run({{"x", {storage, {3, 6}}}}, {{storage, {3, 5}}}),
                       doctest::Contains("param 'scale' (f32[1]) is not bound"), Error);
  p.bind("scale", {storage, {1}});
  CHECK_THROWS_WITH_AS(p.run({}, {{storage, {3, 5}}}),
                       doctest::Contains("input 'x' (f32[N, 6]) is missing"), Error);
  CHECK_THROWS_WITH_AS(p.run({{"y", {storage, {3, 6}}}}, {}),
                       doctest::Contains("'y' is not an input"), Error);
  CHECK_THROWS_WITH_AS(p.run({{"x", {storage, {3, 6}}}}, {}),
                       doctest::Contains("expected 1 output tensor(s), got 0"), Error);
  CHECK_THROWS_WITH_AS(p.run({{"x", {storage, {3, 6}}}}, {{storage, {4, 5}}}),
                       doctest::Contains("dim N is 3 from tensor 'x' but 4 from tensor 'output 0'"),
                       Error);
  CHECK(p.output_shape(0, {{"N", 7}}) == std::vector<int64_t>{7, 5});
  CHECK(p.dims({{"x", {7, 6}}}) == std::map<std::string, int64_t>{{"N", 7}});
  CHECK_THROWS_WITH_AS(p.dims({{"x", {7, 5}}}),
                       doctest::Contains("tensor 'x' must be f32[N, 6], got shape [7, 5]"), Error);
  CHECK_THROWS_WITH_AS(p.dims({{"h", {7, 5}}}),
                       doctest::Contains("no input, param or state named 'h'"), Error);
}

TEST_CASE(
    "api: dtype, row stride and invalid enum values are refused, naming tensor, shape and dtype") {
  TempCache cache;
  Pipeline p = small_pipeline(Mode::Eval);
  alignas(16) static float storage[64];
  CHECK_THROWS_WITH_AS(p.bind("weight", {storage, {5, 6}, DType::BF16}),
                       doctest::Contains("tensor 'weight' is bf16[5, 6], declared f32[5, 6]"),
                       Error);
  CHECK_THROWS_WITH_AS(p.bind("weight", {storage, {5, 6}, DType::F16}),
                       doctest::Contains("is f16[5, 6]"), Error);
  CHECK_THROWS_WITH_AS(
      p.bind("weight", {storage, {5, 6}, static_cast<DType>(42)}),
      doctest::Contains("tensor 'weight' [5, 6]: dtype value 42 is not a kfuse::DType"), Error);
  CHECK_THROWS_WITH_AS(
      p.bind("weight", {storage, {5, 6}, DType::F32, 8}),
      doctest::Contains("tensor 'weight' f32[5, 6] has row stride 8; kfuse takes contiguous "
                        "tensors only (row stride 6 or 0)"),
      Error);
  CHECK_THROWS_WITH_AS(p.bind("scale", {storage, {1}, DType::F32, 1}),
                       doctest::Contains("row stride 0 for rank 1"), Error);
  p.bind("weight", {storage, {5, 6}, DType::F32, 6}); // the row length is contiguous
  CHECK_THROWS_WITH_AS(p.run({{"x", {storage, {3, 6}, DType::F16}}}, {{storage, {3, 5}}}),
                       doctest::Contains("tensor 'x' is f16[3, 6], declared f32[N, 6]"), Error);

  Options bad;
  bad.precision = static_cast<Precision>(42);
  CHECK_THROWS_WITH_AS(Pipeline::from_string(kSmall, "small.kf", bad),
                       doctest::Contains("42 is not a kfuse::Precision value"), Error);
  bad = {};
  bad.mode = static_cast<Mode>(7);
  CHECK_THROWS_WITH_AS(Pipeline::from_string(kSmall, "small.kf", bad),
                       doctest::Contains("7 is not a kfuse::Mode value"), Error);
}

TEST_CASE("api: a moved-from Pipeline throws instead of crashing") {
  TempCache cache;
  Pipeline p = small_pipeline(Mode::Train);
  Pipeline q = std::move(p);
  CHECK(q.name() == "small");
  const char *moved = "kfuse::Pipeline used after it was moved from";
  CHECK_THROWS_WITH_AS(p.name(), moved, Error);
  CHECK_THROWS_WITH_AS(p.plan_text(), moved, Error);
  CHECK_THROWS_WITH_AS(p.inputs(), moved, Error);
  CHECK_THROWS_WITH_AS(p.bind("weight", {}), moved, Error);
  CHECK_THROWS_WITH_AS(p.run({}, {}), moved, Error);
}

TEST_CASE("api: outputs and state overlapping other tensors are refused before anything runs") {
  TempCache cache;
  Pipeline p = small_pipeline(Mode::Eval);
  alignas(16) static float storage[256];
  p.bind("weight", {storage, {5, 6}});
  p.bind("scale", {storage + 30, {1}});
  CHECK_THROWS_WITH_AS(p.run({{"x", {storage + 64, {3, 6}}}}, {{storage + 70, {3, 5}}}),
                       doctest::Contains("output 0 [3, 5] at 0x"), Error);
  CHECK_THROWS_WITH_AS(p.run({{"x", {storage + 64, {3, 6}}}}, {{storage + 70, {3, 5}}}),
                       doctest::Contains("overlaps input 'x' [3, 6]"), Error);
  CHECK_THROWS_WITH_AS(p.run({{"x", {storage + 64, {3, 6}}}}, {{storage + 29, {3, 5}}}),
                       doctest::Contains("overlaps param 'weight' [5, 6]"), Error);

  const char *bn_text = R"(pipeline bn_small {
  dim N
  input  x: f32[N, 4]
  param  weight: f32[4, 4]
  param  bn_weight: f32[4]
  param  bn_bias: f32[4]
  state  running_mean: f32[4]
  state  running_var: f32[4]
  h = linear(x, weight)
  return batchnorm(h, bn_weight, bn_bias, running_mean, running_var, eps=1e-5, momentum=0.1)
}
)";
  Options o;
  o.arch = "sm_90a";
  Pipeline bn = Pipeline::from_string(bn_text, "bn_small.kf", o);
  bn.bind("weight", {storage, {4, 4}});
  bn.bind("bn_weight", {storage + 16, {4}});
  bn.bind("bn_bias", {storage + 20, {4}});
  bn.bind("running_mean", {storage + 24, {4}});
  bn.bind("running_var", {storage + 26, {4}});
  Tensor x{storage + 64, {2, 4}};
  CHECK_THROWS_WITH_AS(bn.run({{"x", x}}, {{storage + 80, {2, 4}}}),
                       doctest::Contains("state 'running_var' [4] at 0x"), Error);
  CHECK_THROWS_WITH_AS(bn.run({{"x", x}}, {{storage + 80, {2, 4}}}),
                       doctest::Contains("overlaps state 'running_mean'"), Error);
  bn.bind("running_var", {storage + 28, {4}});
  CHECK_THROWS_WITH_AS(bn.run({{"x", x}}, {{storage + 30, {2, 4}}}),
                       doctest::Contains("overlaps output 0 [2, 4]"), Error);
}

TEST_CASE("api: a pipeline with a bf16 or f16 tensor is judged by the bf16 bound") {
  auto bound = [](const std::string &decls, const std::string &ret) {
    dsl::SourceFile src("b.kf", "pipeline b {\n  dim N\n" + decls + "  return " + ret + "\n}\n");
    dsl::Diagnostics diags(src);
    return rt::error_bound(Precision::FP32, dsl::parse_kf(src, diags));
  };
  CHECK(bound("  input x: f32[N, 4]\n", "relu(x)") == 1e-5);
  CHECK(bound("  input x: f32[N, 4]\n  param s: bf16[1]\n", "mul(x, s)") == 2e-2);
  CHECK(bound("  input x: f16[N, 4]\n", "relu(x)") == 2e-2);
  CHECK(rt::error_bound(Precision::TF32) == 5e-3);
}

TEST_CASE("check: a gradient summed over the batch passes within the bound of its terms' "
          "magnitudes") {
  // A bias before train-mode batchnorm: zero, so the GPU's value is its sum's rounding, far
  // from the reference relative to itself and to its value on the GPU's saved values.
  rt::CheckEntry e;
  e.relative = 1.4e8;
  e.given_saved_relative = 45.0;
  e.summed_relative = 1e-4;
  CHECK(e.within(5e-3));
  e.summed_relative = 1e-2;
  CHECK_FALSE(e.within(5e-3));
  e.summed_relative = -1; // not a sum over the batch
  CHECK_FALSE(e.within(5e-3));
  e.summed_relative = 1e-4;
  e.finite = false;
  CHECK_FALSE(e.within(5e-3));
}

TEST_CASE("check: a gradient passes on the GPU's saved values, or as its casts' rounding noise "
          "against the exact values") {
  // Column sums of a centred matrix cast to bf16: zero in exact arithmetic, so the reference's
  // result is the casts' rounding noise, far past the bound relative to itself.
  dsl::SourceFile src("noise.kf", "pipeline noise {\n  dim N\n  input x: f32[N, 8]\n"
                                  "  d = sub(x, mean(x, dim=0, keepdim=true))\n"
                                  "  return sum(cast(d, dtype=bf16), dim=0)\n}\n");
  dsl::Diagnostics diags(src);
  const ir::Graph g = dsl::parse_kf(src, diags);
  const ir::DimBindings dims{{"N", 300}};
  ir::TensorMap tensors = ir::random_tensors(g, dims, 3);
  const std::vector<double> declared = ir::interpret(g, ir::Mode::Eval, dims, tensors)[0].data;
  const std::vector<double> exact =
      ir::interpret(g, ir::Mode::Eval, dims, tensors, {}, ir::Rounding::None)[0].data;
  for (double e : exact)
    CHECK(std::fabs(e) < 1e-12);
  const double reference = ir::relative_error(declared, exact);
  CHECK(reference > 1e-4); // the rounding noise: about 2^-9 per term, over 300 rows

  // A result as noisy as the reference passes, one 1.5x farther from the exact values does not,
  // and nothing non-finite passes.
  rt::CheckEntry e;
  e.relative = 1.0; // against the reference's noise: far over any bound
  e.reference_relative = reference;
  e.exact_relative = 1.2 * reference;
  CHECK(e.within(2e-2));
  e.exact_relative = 1.6 * reference;
  CHECK_FALSE(e.within(2e-2));
  // Off end to end but within the bound on the values the GPU's forward saved: the backward is
  // accurate on its own inputs.
  e.given_saved_relative = 3e-2;
  CHECK_FALSE(e.within(2e-2));
  e.given_saved_relative = 1e-2;
  CHECK(e.within(2e-2));
  e.given_saved_relative = -1;
  e.relative = 1e-3;
  CHECK(e.within(2e-2));
  e.finite = false;
  CHECK_FALSE(e.within(2e-2));
  rt::CheckEntry forward; // not measured against the exact values: the bound alone
  forward.relative = 3e-2;
  CHECK_FALSE(forward.within(2e-2));
}

TEST_CASE("nvrtc: tensor-core precisions compile every example's GEMM on the sm90 mainloop") {
  TempCache cache;
  for (const char *example : {"gemm_bn_scale_softmax", "gemm_scale_bn"})
    for (Precision precision : {Precision::TF32, Precision::FP32x3}) {
      Options o;
      o.arch = "sm_90a";
      o.precision = precision;
      Pipeline p = Pipeline::from_file(root() + "/examples/" + example + ".kf", o);
      CHECK(p.cuda_source().find(
                precision == Precision::TF32
                    ? "kf::gemm_sm90<kf::Sm90Gemm<kf::sm90::Operand::Tf32, 256>>"
                    : "kf::gemm_sm90<kf::Sm90Gemm<kf::sm90::Operand::Tf32x3, 128>>") !=
            std::string::npos);
      for (const KernelReport &k : p.report().kernels) {
        INFO(example, " ", k.name);
        CHECK(k.spill_stores == 0);
        CHECK(k.stack_bytes == 0);
      }
    }
}

TEST_CASE("codegen: the sm90 GEMM describes its own launch, other targets and shapes fall back") {
  const plan::Plan train = plan_of("gemm_bn_scale_softmax", ir::Mode::Train);
  codegen::Program hopper = codegen::generate(train, Target{"sm_90a", Precision::TF32});
  const codegen::KernelLaunch &gemm = hopper.launches.at(0);
  using Grid = codegen::LaunchGeometry::Grid;
  CHECK(gemm.geometry.grid == Grid::Persistent);
  CHECK(gemm.geometry.block_threads == 384);
  CHECK(gemm.geometry.tile_rows == 128);
  CHECK(gemm.geometry.tile_cols == 256);
  CHECK(gemm.geometry.smem_bytes > 48 * 1024);
  REQUIRE(gemm.params.size() >= 2);
  CHECK(gemm.params[0].kind == codegen::LaunchParam::Kind::TensorMap);
  CHECK(gemm.params[0].map.box_rows == 128);
  CHECK(gemm.params[1].map.box_rows == 256);
  CHECK(gemm.params[1].map.box_inner == 32);
  // The column kernel merges partials of the producer's tile height.
  bool merged = false;
  for (const codegen::LaunchParam &lp : hopper.launches.at(1).params)
    if (lp.kind == codegen::LaunchParam::Kind::PartialMean) {
      CHECK(lp.tile_rows == 128);
      merged = true;
    }
  CHECK(merged);
  // A team of 8 lanes merges each feature's partials: 32 features per block of 256 threads.
  CHECK(hopper.launches.at(1).geometry.block_threads == 256);
  CHECK(hopper.launches.at(1).geometry.tile_cols == 32);
  // Not sm_90a, or a GEMM whose K is not a multiple of 4: the mma.sync template.
  CHECK(codegen::generate(train, Target{"sm_80", Precision::TF32})
            .source.find("kf::gemm_tc<true, 0>") != std::string::npos);
  dsl::SourceFile src("odd.kf",
                      "pipeline odd {\n  dim N\n  input x: f32[N, 6]\n  param w: f32[5, 6]\n"
                      "  return linear(x, w)\n}\n");
  dsl::Diagnostics diags(src);
  plan::Plan odd = plan::make_plan(dsl::parse_kf(src, diags), ir::Mode::Eval);
  CHECK(codegen::generate(odd, Target{"sm_90a", Precision::TF32})
            .source.find("kf::gemm_tc<true, 0>") != std::string::npos);
}

TEST_CASE("codegen: a GEMM's functor names the matrices its epilogue reads, which then loads "
          "them") {
  const std::string s =
      codegen::generate(plan_of("tinyllama_o_proj_residual_rmsnorm_btf_bf16", ir::Mode::Eval),
                        Target{"sm_90a", Precision::FP32})
          .source;
  CHECK(s.find("static constexpr int MATRICES = 1;") != std::string::npos);
  CHECK(s.find("if constexpr (I == 0) return kf::Matrix<kf::bf16>{p_residual, 2048};") !=
        std::string::npos);
  CHECK(s.find("const float v_residual = in[0];") != std::string::npos);
  CHECK(s.find("kf::load(p_residual") == std::string::npos); // apply() loads no matrix itself
  // A GEMM whose epilogue reads per-column vectors only names none.
  CHECK(codegen::generate(plan_of("gemm_scale_bn", ir::Mode::Eval))
            .source.find("static constexpr int MATRICES = 0;") != std::string::npos);
}

TEST_CASE("codegen: an elementwise kernel names the matrices and feature vectors it reads and "
          "moves 16 bytes of each per access where its rows hold whole vectors") {
  auto kernel = [](const std::string &text) {
    dsl::SourceFile src("ew.kf", text);
    dsl::Diagnostics diags(src);
    codegen::Program p =
        codegen::generate(plan::make_plan(dsl::parse_kf(src, diags), ir::Mode::Eval));
    REQUIRE(p.launches.size() == 1);
    CHECK(p.launches[0].geometry.grid == codegen::LaunchGeometry::Grid::Elements);
    return std::pair{p.source, p.launches[0].geometry.tile_cols};
  };
  auto text = [](const std::string &x, const std::string &f) {
    return fmt::format("pipeline ew {{\n  dim N\n  input x: {0}[N, {1}]\n  input y: f32[N, {1}]\n"
                       "  param s: f32[{1}]\n  return add(mul(gelu(x), s), y)\n}}\n",
                       x, f);
  };
  // bf16 beside f32: 8 columns a thread (16 bytes of bf16, 32 of f32).
  auto [mixed, mixed_cols] = kernel(text("bf16", "64"));
  CHECK(mixed.find("static constexpr int MATRICES = 3;") != std::string::npos);
  CHECK(mixed.find("if constexpr (I == 0) return kf::Matrix<kf::bf16>{p_x, 64};") !=
        std::string::npos);
  // The feature vector: a row every row reads, leading dimension 0.
  CHECK(mixed.find("else if constexpr (I == 1) return kf::Matrix<float>{p_s, 0};") !=
        std::string::npos);
  CHECK(mixed.find("else if constexpr (I == 2) return kf::Matrix<float>{p_y, 64};") !=
        std::string::npos);
  CHECK(mixed.find("const float v_x = in[0];") != std::string::npos);
  CHECK(mixed.find("kf::load(") == std::string::npos); // apply() loads nothing itself
  CHECK(mixed.find("__device__ float *output() const") != std::string::npos);
  CHECK(mixed.find("kf::map_elements<8>(d_N, 64, ") != std::string::npos);
  CHECK(mixed_cols == 8 * 256);
  // f32 only: 4 columns; a width of symbolic F: decided again at run time.
  CHECK(kernel(text("f32", "64")).first.find("kf::map_elements<4>(d_N, 64, ") != std::string::npos);
  CHECK(kernel("pipeline ew {\n  dim N\n  dim F\n  input x: bf16[N, F]\n  return relu(x)\n}\n")
            .first.find("kf::map_elements<8>(d_N, d_F, ") != std::string::npos);
  // A constant width of no whole vectors: one element at a time, and the grid sized so.
  auto [odd, odd_cols] = kernel(text("bf16", "36"));
  CHECK(odd.find("kf::map_elements<1>(d_N, 36, ") != std::string::npos);
  CHECK(odd_cols == 256);
}

TEST_CASE("codegen: every kernel waits for the grid before it reads what kernels wrote, and "
          "sm_90 launches may start early") {
  const plan::Plan train = plan_of("gemm_bn_scale_softmax", ir::Mode::Train);
  for (const char *arch : {"sm_90a", "sm_80"}) {
    INFO(arch);
    const codegen::Program p = codegen::generate(train, Target{arch, Precision::TF32});
    REQUIRE(p.launches.size() == 3);
    for (const codegen::KernelLaunch &l : p.launches) {
      INFO(l.entry);
      const size_t entry = p.source.find("\n" + l.entry + "(");
      REQUIRE(entry != std::string::npos);
      const size_t body = p.source.find(") {\n", entry) + 4;
      const size_t wait = p.source.find("  kf::wait_prior_grid();\n", body);
      REQUIRE(wait != std::string::npos);
      const std::string before = p.source.substr(body, wait - body);
      INFO(before);
      if (l.kind == plan::KernelKind::Column) {
        // The column kernel loads its params and the running statistics it updates (written by
        // no other kernel) while the GEMM finishes; the partials and stored values after.
        CHECK(before.find("kf::load(p_bn_weight + col)") != std::string::npos);
        CHECK(before.find("kf::load(p_running_var + col)") != std::string::npos);
        CHECK(before.find("_pm") == std::string::npos);
        CHECK(before.find("p_t") == std::string::npos);
      } else {
        CHECK(before.empty()); // the entry's first statement
      }
      CHECK(l.geometry.waits_prior_grid == (std::string(arch) == "sm_90a"));
      for (const codegen::KernelLaunch &v : l.by_rows)
        CHECK(v.geometry.waits_prior_grid == l.geometry.waits_prior_grid);
    }
  }
}

TEST_CASE("api: a .kf error surfaces as a diagnostic with file:line:col") {
  CHECK_THROWS_WITH_AS(
      Pipeline::from_string("pipeline p {\n  dim N\n  input x: f32[N, 4]\n  return relu(y)\n}\n",
                            "bad.kf", {}),
      doctest::Contains("bad.kf:4:15: error: "), std::exception);
}

TEST_CASE("kfuse compile: two processes compiling the same pipeline at once both succeed") {
  TempCache cache;
  std::string cmd =
      std::string(KFUSE_TOOL) + " compile " + root() + "/examples/gemm_scale_bn.kf --arch sm_90a";
  std::string both = cmd + " > " + cache.dir + "/a.log 2>&1 & a=$!; " + cmd + " > " + cache.dir +
                     "/b.log 2>&1 & b=$!; wait $a && wait $b";
  int status = std::system(("bash -c '" + both + "'").c_str());
  INFO(read(cache.dir + "/a.log"), read(cache.dir + "/b.log"));
  CHECK(status == 0);
  for (const char *log : {"/a.log", "/b.log"})
    CHECK(read(cache.dir + log).find("gemm_scale_bn: 3 kernels and 1 variant for sm_90a") !=
          std::string::npos);
  std::string third = cache.dir + "/c.log";
  CHECK(std::system((cmd + " > " + third + " 2>&1").c_str()) == 0);
  CHECK(read(third).find("(cache hit)") != std::string::npos);
}
