// Generated kernels on the GPU against the fp64 reference interpreter: fresh random
// inputs for every case, outputs poisoned with NaN first, the fp32 bound of DESIGN.md.
#include "compiler/codegen/program.h"
#include "compiler/dsl/diagnostics.h"
#include "tests/support/gpu_cases.h"
#include "tests/support/random_pipelines.h"
#include "tools/check/reference_check.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace kfuse;
using testing::bn_scale_softmax;
using testing::example;
using testing::expect_examples;
using testing::expect_match;
using testing::matmul_scale_bn;
using testing::repo_file;
using testing::scale_bn;

namespace {

// A stable softmax and a log-sum-exp by hand after a linear layer: a row kernel of several
// passes (max, sum, the epilogue, a per-row result) with [N, 1] values broadcast along the row,
// and h * sigmoid(h) in a second GEMM's epilogue.
std::string row_chain(int in, int out) {
  return fmt::format(R"(pipeline row_chain_{0}_{1} {{
  dim N
  input  x: f32[N, {0}]
  param  weight: f32[{1}, {0}]
  param  bias: f32[{1}]
  input  shift: f32[N, 1]
  h = linear(x, weight, bias)
  m = max(add(h, shift), dim=1, keepdim=true)
  e = exp(sub(add(h, shift), m))
  s = sum(e, dim=1, keepdim=true)
  g = linear(x, weight)
  return div(e, s), add(m, log(s)), neg(logsumexp(h, dim=1)), mul(g, sigmoid(g))
}}
)",
                     in, out);
}

} // namespace

TEST_CASE("gpu: shared values and row chains match the reference") {
  uint64_t seed = 500;
  for (const char *file : {"llama_gate_silu.kf", "swiglu_style_gate.kf",
                           "vit_head_stable_softmax.kf", "distill_log_softmax_by_hand.kf",
                           "resnet50_energy_logsumexp.kf", "simclr_projection_standardize.kf"})
    for (Mode mode : {Mode::Eval, Mode::Train})
      for (int64_t n : {1, 3, 33})
        expect_match(example(file), file, mode, n, ++seed);
  // Row lengths with float4 tails and rows longer than a block's threads (5000 > 1024).
  for (auto [in, out] : {std::pair{19, 37}, std::pair{130, 129}, std::pair{64, 5001}})
    for (int64_t n : {1, 2, 17, 64})
      expect_match(row_chain(in, out), "row_chain.kf", Mode::Eval, n, ++seed);
  for (const char *file : {"shared_values.kf", "row_chain.kf"})
    for (int64_t n : {1, 5, 40})
      expect_match(repo_file("tests/support/pipelines/" + std::string(file)), file, Mode::Eval, n,
                   ++seed);
}

TEST_CASE("gpu: one row kernel's passes in every element type: reduction, groupnorm and softmax "
          "over shared memory, pool, epilogue") {
  // One kernel over the rows of x: the max's result feeds the epilogue from a register, the
  // softmax refills the shared memory the groupnorm's warps read across threads (a barrier
  // between them), the pool writes its own width. 90 features keep the row resident, 60000
  // stream it. A max rather than a sum: a row sum of random signs near 0 is ill-conditioned.
  uint64_t seed = 600;
  for (const char *dtype : {"f32", "bf16", "f16"})
    for (int features : {90, 60000}) {
      std::string text = fmt::format(R"(pipeline passes_{0}_{1} {{
  dim N
  input  x: {0}[N, {1}]
  param  w: {0}[{1}]
  h = mul(x, w)
  m = max(h, dim=1, keepdim=true)
  return groupnorm(h, groups=6), softmax(h, dim=1), max_pool1d(h, kernel_size=5, stride=2), sub(h, m), m
}}
)",
                                     dtype, features);
      for (int64_t n : {1, 7, 64})
        expect_match(text, "passes.kf", Mode::Eval, n, ++seed);
    }
}

TEST_CASE("gpu: founding chains with odd sizes, N from 1 to 64") {
  uint64_t seed = 100;
  for (auto [in, out] : {std::pair{19, 37}, std::pair{130, 129}, std::pair{256, 200}})
    for (const std::string &text : {scale_bn(in, out), bn_scale_softmax(in, out)}) {
      for (int64_t n : {1, 2, 3, 17, 64})
        expect_match(text, "odd.kf", Mode::Eval, n, ++seed);
      for (int64_t n : {2, 3, 17, 64, 130})
        expect_match(text, "odd.kf", Mode::Train, n, ++seed);
    }
}

TEST_CASE("gpu: tensor-core GEMMs (tf32, 3xtf32) within their precision's bound") {
  uint64_t seed = 300;
  // In features 19 and 130 are not multiples of 4, so tf32 runs on gemm_tc there; 132, 1000
  // and 520 take the sm90 mainloop on sm_90a, with tails in M, N (257, 300, 4100: not
  // multiples of its 128- or 256-column tiles) and K (132: not a multiple of its 32-deep
  // stage). Below 4096 output features tf32 takes the 64 x 128 tile, from 4096 the 128 x 256.
  for (Precision precision : {Precision::TF32, Precision::FP32x3})
    for (auto [in, out] : {std::pair{19, 37}, std::pair{130, 129}, std::pair{132, 257},
                           std::pair{1000, 300}, std::pair{520, 512}, std::pair{132, 4100}})
      for (const std::string &text : {scale_bn(in, out), bn_scale_softmax(in, out)}) {
        for (int64_t n : {1, 17, 64, 200})
          expect_match(text, "odd.kf", Mode::Eval, n, ++seed, 1, precision);
        // Train mode from 17 rows: with 2 rows batchnorm divides by |y1 - y2|, which turns
        // any GEMM's last-bit error into an output error 1/|y1 - y2| times larger; exact fp32
        // covers N=2 in the tests above, the tensor-core paths are judged where BN is stable.
        for (int64_t n : {17, 64, 130})
          expect_match(text, "odd.kf", Mode::Train, n, ++seed, 2, precision);
      }
  for (Precision precision : {Precision::TF32, Precision::FP32x3}) {
    expect_match(example("gemm_bn_scale_softmax.kf"), "gemm_bn_scale_softmax.kf", Mode::Train, 64,
                 12, 3, precision);
    for (const char *file : {"gemm_scale_bn_512x1024.kf", "gemm_bn_scale_softmax_512x1024.kf"}) {
      expect_match(example(file), file, Mode::Train, 128, 13, 3, precision);
      expect_match(example(file), file, Mode::Eval, 128, 14, 1, precision);
    }
  }
}

TEST_CASE("gpu: the GEMM epilogue and tile scheduler over many row tiles, every mainloop") {
  // Nine or ten 128-row tiles: one full rasterization group of 8 row tiles and a partial one,
  // last tiles of 1, 16, 65 and 127 rows (the row groups the epilogue's statistics merge end
  // at 16 and 64), several column tiles with a tail. In features 132 take the sm90 mainloop for
  // tf32 and 3xtf32 on sm_90a, 130 the mma.sync one; fp32 runs the SIMT one; matmul gives the
  // mainloops' B not transposed.
  uint64_t seed = 500;
  for (Precision precision : {Precision::FP32, Precision::TF32, Precision::FP32x3})
    for (int in : {132, 130})
      for (const std::string &text : {scale_bn(in, 300), matmul_scale_bn(in, 260)}) {
        for (int64_t n : {1025, 1040, 1089, 1151, 1217})
          expect_match(text, "tiles.kf", Mode::Train, n, ++seed, 2, precision);
        expect_match(text, "tiles.kf", Mode::Eval, 1217, ++seed, 1, precision);
      }
}

TEST_CASE("gpu: founding examples at small N, train over three steps") {
  for (const char *file : {"gemm_scale_bn.kf", "gemm_bn_scale_softmax.kf"}) {
    expect_match(example(file), file, Mode::Eval, 1, 7);
    expect_match(example(file), file, Mode::Eval, 33, 8);
    expect_match(example(file), file, Mode::Train, 2, 9);
    expect_match(example(file), file, Mode::Train, 33, 10, 3);
  }
  expect_match(example("gemm_scale_bn_4096.kf"), "gemm_scale_bn_4096.kf", Mode::Train, 64, 11, 3);
}

TEST_CASE("gpu: groupnorm and instancenorm examples, and groups with odd sizes") {
  expect_examples({"sd_unet_groupnorm_silu.kf", "adain_style_instancenorm.kf"}, 21);
  // Groups of 1, 15 (a float4 tail) and 90 features; more groups than warps; a row too long for
  // shared memory (streaming); a bias-only prologue.
  uint64_t seed = 300;
  for (auto [features, groups] : {std::pair{90, 90}, std::pair{90, 6}, std::pair{90, 1},
                                  std::pair{1000, 40}, std::pair{60000, 3}}) {
    std::string text = fmt::format(R"(pipeline groups_{0}_{1} {{
  dim N
  input  x: f32[N, {0}]
  param  shift: f32[{0}]
  param  w: f32[{0}]
  param  b: f32[{0}]
  h = add(x, shift)
  return groupnorm(h, w, b, groups={1}), instancenorm(x)
}}
)",
                                   features, groups);
    for (int64_t n : {1, 7, 64})
      expect_match(text, "groups.kf", Mode::Eval, n, ++seed);
  }
}

TEST_CASE("gpu: groupnorm with the row in registers, groups of 4 to 128 features, f32 and bf16") {
  // Rows a multiple of 4 x the block's threads, each group the float4s of 1 to 32 aligned lanes
  // (row_group_norm_in_registers); 1 to 8 chunks per thread.
  uint64_t seed = 400;
  for (const char *dtype : {"f32", "bf16"})
    for (auto [features, groups] : {std::pair{1024, 256}, std::pair{1024, 64}, std::pair{2048, 16},
                                    std::pair{4096, 32}, std::pair{16384, 128}}) {
      std::string text = fmt::format(R"(pipeline groups_{0}_{1} {{
  dim N
  input  x: {2}[N, {0}]
  param  shift: {2}[{0}]
  param  w: {2}[{0}]
  param  b: {2}[{0}]
  h = add(x, shift)
  return groupnorm(h, w, b, groups={1}), groupnorm(x, groups={1})
}}
)",
                                     features, groups, dtype);
      for (int64_t n : {1, 7, 64})
        expect_match(text, "groups.kf", Mode::Eval, n, ++seed);
    }
}

TEST_CASE("gpu: groupnorm whose groups do not divide a bound dim fails before any kernel") {
  rt::CheckRequest req;
  req.kf_text = R"(pipeline g {
  dim N
  dim F
  input x: f32[N, F]
  return groupnorm(x, groups=4)
}
)";
  req.file_name = "groups.kf";
  req.dims = {{"N", 8}, {"F", 10}};
  CHECK_THROWS_WITH_AS(rt::check_against_reference(req),
                       doctest::Contains("groups=4 does not divide the 10 features"), kfuse::Error);
}

TEST_CASE("gpu: max_pool1d and avg_pool1d examples, and windows of odd sizes") {
  expect_examples({"maxout_relu_max_pool1d.kf", "bert_ffn_gelu_avg_pool1d.kf"}, 31);
  // Windows of 1 and of the whole row, overlapping (stride < kernel), gapped (stride > kernel),
  // a width the window does not divide; a per-feature prologue on load.
  uint64_t seed = 400;
  for (auto [kernel, stride] :
       {std::pair{1, 1}, std::pair{3, 1}, std::pair{5, 2}, std::pair{2, 7}, std::pair{97, 1}})
    for (const char *pool : {"max_pool1d", "avg_pool1d"}) {
      std::string text = fmt::format(R"(pipeline pool {{
  dim N
  input  x: f32[N, 97]
  param  scale: f32[97]
  h = mul(x, scale)
  return {0}(h, kernel_size={1}, stride={2})
}}
)",
                                     pool, kernel, stride);
      for (int64_t n : {1, 7, 64})
        expect_match(text, "pool.kf", Mode::Eval, n, ++seed);
    }
}

TEST_CASE("gpu: train mode with one row is an error, as in PyTorch") {
  for (const char *file : {"gemm_scale_bn.kf", "gemm_bn_scale_softmax.kf"}) {
    rt::CheckRequest req;
    req.kf_text = example(file);
    req.file_name = file;
    req.options.mode = Mode::Train;
    req.dims = {{"N", 1}};
    CHECK_THROWS_WITH_AS(
        rt::check_against_reference(req),
        doctest::Contains("batchnorm in train mode needs more than 1 row, got N=1"), kfuse::Error);
  }
}

TEST_CASE("gpu: random op chains match the reference") {
  // Seeds are drawn until 60 chains ran: which ones the GPU path refuses depends on the
  // generator's draws, and the count that ran is what the test is about.
  constexpr int kChains = 60;
  int ran = 0, unsupported = 0;
  for (uint64_t seed = 1; ran < kChains && seed <= 200; ++seed) {
    std::string text = testing::random_pipeline(seed);
    INFO(text);
    Mode mode = seed % 2 ? Mode::Train : Mode::Eval;
    // Train mode from 3 rows: over 2 rows batchnorm maps every column to +-1 (up to eps), and
    // a layernorm after it over two columns of one sign normalizes a difference of 1.8e-4
    // between numbers near 1, which fp32's rounding alone moves by 3e-4 relative (seed 49
    // drew that chain; test_interpreter.cpp has the arithmetic).
    int64_t n = 2 + static_cast<int64_t>(seed % 7) * 9;
    if (mode == Mode::Train && n == 2)
      n = 3;
    try {
      expect_match(text, "random.kf", mode, n, seed);
      ++ran;
    } catch (const dsl::DiagnosticError &e) {
      // Outside the GPU path today, reported with their location before planning
      // (codegen::gpu_unsupported): softmax and reductions over dim 0, and a bf16/f16 GEMM
      // whose inner dim is not a multiple of 8 (the Hopper GEMM's TMA rows).
      const std::string what = e.what();
      CHECK((what.find("only the last axis") != std::string::npos ||
             what.find("inner dim a constant multiple of 8") != std::string::npos));
      ++unsupported;
    }
  }
  MESSAGE("random chains run on the GPU: ", ran, ", not expressible: ", unsupported);
  CHECK(ran == kChains);
}
