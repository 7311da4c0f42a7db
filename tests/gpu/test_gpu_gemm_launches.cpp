// What a pipeline says of its GEMM launches: each GEMM kernel's tile and the split-K S its last
// run resolved (rt::PipelineAccess::gemm_launches), and `kfuse bench --json`'s "gemm_launches",
// which the shape sweep (bench/shape_sweep.py) puts beside every point. At 128 x 1024 x 512 the
// tiles leave most SMs idle, so K is split; at 16384 rows, or with split-K capped at 1, it is not.
// A narrow layer's GEMM runs its 128 x 128 twin where the rows give every SM one of its tiles,
// and, where K is deep, its 128 x 256 twin where that one's waves take less time
// (rt::variant_of), with the results the reference gives.
#include "runtime/device_buffer.h"
#include "runtime/driver.h"
#include "runtime/pipeline.h"
#include "runtime/stream.h"
#include "tests/support/gpu_cases.h"
#include "tests/support/run_tool.h"
#include "tests/support/temp_cache.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

using namespace kfuse;

namespace {

const char *kLinear = "pipeline linear {\n  dim N\n  input x: f32[N, 512]\n"
                      "  param w: f32[1024, 512]\n  return linear(x, w)\n}\n";
// K deep enough for the sm90 GEMM's split-K to pay at few rows.
const char *kDeepLinear = "pipeline linear {\n  dim N\n  input x: f32[N, 4096]\n"
                          "  param w: f32[1024, 4096]\n  return linear(x, w)\n}\n";

// One run of `p` (1024 features of `k`) at `rows` rows on zeroed data (S depends on the shape
// only).
void run_at(Pipeline &p, int64_t rows, rt::Stream &stream, int64_t k = 512) {
  rt::DeviceBuffer x(static_cast<size_t>(rows * k * 4)), w(static_cast<size_t>(1024 * k * 4)),
      out(static_cast<size_t>(rows * 1024 * 4));
  x.fill_bytes(0);
  w.fill_bytes(0);
  p.bind("w", {reinterpret_cast<void *>(w.ptr()), {1024, k}});
  const Tensor in{reinterpret_cast<void *>(x.ptr()), {rows, k}};
  const Tensor result{reinterpret_cast<void *>(out.ptr()), {rows, 1024}};
  p.run(&in, 1, &result, 1, stream.handle());
  stream.synchronize();
}

// The integer after `"splits": ` in kfuse bench's JSON, or -1.
int json_splits(const std::string &json) {
  const std::string key = "\"splits\": ";
  const size_t at = json.find(key);
  return at == std::string::npos ? -1 : std::stoi(json.substr(at + key.size()));
}

// The current device's SM count.
int multiprocessors() {
  rt::Driver &driver = rt::Driver::get();
  driver.make_current();
  int sms = 0;
  driver.check(driver.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                           driver.current_device()),
               "cuDeviceGetAttribute");
  return sms;
}

} // namespace

TEST_CASE("gpu gemm launches: each GEMM's tile and the split-K S of its last run") {
  rt::Driver::get().make_current();
  rt::Stream stream;
  Options tf32;
  tf32.mode = Mode::Eval;
  tf32.precision = Precision::TF32;
  tf32.use_tuned = false; // the heuristics' tile and split-K cap, whatever the cache holds
  Pipeline p = Pipeline::from_string(kDeepLinear, "linear.kf", tf32);

  std::vector<rt::GemmLaunch> gemms = rt::PipelineAccess::gemm_launches(p);
  REQUIRE(gemms.size() == 1);
  CHECK(gemms[0].kernel == "k1_gemm");
  CHECK(gemms[0].splits == 0);   // no run has bound the dims yet
  CHECK(!gemms[0].tile.empty()); // tf32 with K % 4 == 0: the Hopper mainloop's tiles
  CHECK(gemms[0].config == p.report().kernels.at(1).config);

  run_at(p, 128, stream, 4096);
  CHECK(rt::PipelineAccess::gemm_launches(p).at(0).splits > 1);
  run_at(p, 16384, stream, 4096); // tiles for every SM: K whole
  CHECK(rt::PipelineAccess::gemm_launches(p).at(0).splits == 1);

  tf32.max_split_k = 1;
  Pipeline capped = Pipeline::from_string(kDeepLinear, "linear.kf", tf32);
  run_at(capped, 128, stream, 4096);
  CHECK(rt::PipelineAccess::gemm_launches(capped).at(0).splits == 1);

  // K = 512: 16 k-blocks do not pay for split-K's partial tiles (launch_geometry.cpp).
  Pipeline shallow = Pipeline::from_string(kLinear, "linear.kf", tf32);
  run_at(shallow, 128, stream);
  CHECK(rt::PipelineAccess::gemm_launches(shallow).at(0).splits == 1);
}

TEST_CASE("gpu gemm launches: kfuse bench --json reports the fused GEMM's tile and S") {
  TempCache cache;
  const std::string json = cache.dir + "/bench.json";
  // fp32: the SIMT GEMM splits K = 512 at 128 rows.
  const std::string bench = "bench examples/gemm_scale_bn_512x1024.kf --dim N=128 --mode eval "
                            "--precision fp32 --iters 3 --warmup 1 --json " +
                            json;
  for (const char *cap : {"", " --max-split-k 1"}) {
    INFO("kfuse ", bench, cap);
    std::remove(json.c_str());
    testing::ToolRun r = testing::run_kfuse(bench + cap);
    INFO(r.out, r.err);
    REQUIRE(r.exit_code == 0);
    const std::string text = testing::read_text(json);
    CHECK(text.find("\"gemm_launches\": [{\"kernel\": \"k0_gemm\", \"tile\": \"") !=
          std::string::npos);
    CHECK(r.out.find("fused k0_gemm: tile ") != std::string::npos);
    if (*cap == '\0')
      CHECK(json_splits(text) > 1);
    else
      CHECK(json_splits(text) == 1);
  }
}

TEST_CASE("gpu gemm launches: a narrow layer runs its wide tile from a full wave of it, with the "
          "reference's results") {
  const int sms = multiprocessors();
  // 1024 features are 8 columns of 128 x 128 tiles: a full wave from sms / 8 row tiles.
  const int64_t wave = 128 * ((sms + 7) / 8) + 17, few = 129;
  rt::Stream stream;
  Options tf32;
  tf32.mode = Mode::Eval;
  tf32.precision = Precision::TF32;
  tf32.use_tuned = false;
  Pipeline p = Pipeline::from_string(kLinear, "linear.kf", tf32);
  run_at(p, wave, stream);
  CHECK(rt::PipelineAccess::gemm_launches(p).at(0).kernel == "k1_gemm_wide");
  CHECK(rt::PipelineAccess::gemm_launches(p).at(0).tile == "128x128x1");
  CHECK(rt::PipelineAccess::gemm_launches(p).at(0).splits == 1);
  run_at(p, few, stream);
  CHECK(rt::PipelineAccess::gemm_launches(p).at(0).kernel == "k1_gemm");
  CHECK(rt::PipelineAccess::gemm_launches(p).at(0).tile == "64x128x2");
  run_at(p, wave, stream); // and back
  CHECK(rt::PipelineAccess::gemm_launches(p).at(0).kernel == "k1_gemm_wide");

  // Both variants against the reference: tf32 and bf16, an epilogue with a residual, and a row
  // kernel after it (layernorm) in train mode over two steps.
  for (const char *dtype : {"f32", "bf16"}) {
    CAPTURE(dtype);
    const std::string text =
        fmt::format("pipeline narrow {{\n  dim N\n  input x: {0}[N, 64]\n  input r: {0}[N, 1024]\n"
                    "  param w: {0}[1024, 64]\n  param g: f32[1024]\n  param b: f32[1024]\n"
                    "  h = add(linear(x, w), r)\n  return layernorm(gelu(h), g, b, eps=1e-5)\n}}\n",
                    dtype);
    const Precision precision = std::string(dtype) == "f32" ? Precision::TF32 : Precision::FP32;
    for (int64_t n : {few, wave}) {
      CAPTURE(n);
      testing::expect_match(text, "narrow.kf", Mode::Train, n, 7, 2, precision);
      testing::expect_match(text, "narrow.kf", Mode::Eval, n, 8, 1, precision);
    }
  }
}

TEST_CASE("gpu gemm launches: a narrow layer of deep K runs its 128 x 256 tile where its waves "
          "take less time, with the reference's results") {
  const int sms = multiprocessors();
  // K = 2048, 512 features: 2 columns of 128 x 256 tiles, 4 of 128 x 128, weighing 5 a wave
  // against 3; the last row tile partial (17 rows). sms row tiles: two waves of 128 x 256 (10)
  // against four (12); sms / 4 + 1: one (5) against two (6); sms / 2 + 4: two (10) against
  // three (9); fewer than sms / 4: no wave of 128 x 128 tiles, the launch's own tile.
  const int64_t two_waves = 128 * (sms - 1) + 17, one_wave = 128 * ((sms + 3) / 4) + 17,
                three_waves = 128 * (sms / 2 + 3) + 17, few = 128 * (sms / 4 - 1);
  // bf16 operands, and f32 ones at tf32.
  for (const char *dtype : {"bf16", "f32"}) {
    CAPTURE(dtype);
    const bool bf16 = std::string(dtype) == "bf16";
    // At tf32 kernel k0 rounds the weight once per bind.
    const std::string gemm = bf16 ? "k0_gemm" : "k1_gemm";
    const DType type = bf16 ? DType::BF16 : DType::F32;
    const size_t size = bf16 ? 2 : 4;
    const std::string text = fmt::format("pipeline deep {{\n  dim N\n  input x: {0}[N, 2048]\n"
                                         "  input r: {0}[N, 512]\n  param w: {0}[512, 2048]\n"
                                         "  return add(linear(x, w), r)\n}}\n",
                                         dtype);
    Options eval;
    eval.mode = Mode::Eval;
    eval.precision = bf16 ? Precision::FP32 : Precision::TF32;
    eval.use_tuned = false;
    Pipeline p = Pipeline::from_string(text, "deep.kf", eval);
    auto kernel_at = [&](int64_t rows) {
      rt::DeviceBuffer x(static_cast<size_t>(rows * 2048) * size), w(512 * 2048 * size),
          r(static_cast<size_t>(rows * 512) * size), out(static_cast<size_t>(rows * 512) * size);
      x.fill_bytes(0);
      w.fill_bytes(0);
      r.fill_bytes(0);
      p.bind("w", {reinterpret_cast<void *>(w.ptr()), {512, 2048}, type});
      const Tensor in[] = {{reinterpret_cast<void *>(x.ptr()), {rows, 2048}, type},
                           {reinterpret_cast<void *>(r.ptr()), {rows, 512}, type}};
      const Tensor result{reinterpret_cast<void *>(out.ptr()), {rows, 512}, type};
      rt::Stream stream;
      p.run(in, 2, &result, 1, stream.handle());
      stream.synchronize();
      return rt::PipelineAccess::gemm_launches(p).at(0);
    };
    CHECK(kernel_at(two_waves).kernel == gemm + "_wider");
    CHECK(kernel_at(two_waves).tile == "128x256x1");
    CHECK(kernel_at(one_wave).kernel == gemm + "_wider");
    CHECK(kernel_at(three_waves).kernel == gemm + "_wide");
    CHECK(kernel_at(few).kernel == gemm);
    testing::expect_match(text, "deep.kf", Mode::Eval, two_waves, 9, 1, eval.precision);
  }
}

TEST_CASE("gpu gemm launches: the SIMT GEMM runs its 128 x 32 tile for small batches and its "
          "128 x 128 twin for large ones, with the reference's results") {
  rt::Driver::get().make_current();
  // K = 512, 1024 features: at 100 rows 8 wide tiles split 8 ways against 32 narrow ones split
  // 4 ways (launch_geometry.cpp's estimate: 40 against 24); at 1997 rows 128 wide tiles unsplit
  // against 512 narrow ones (on the H100's 132 SMs: 32 x 5 against 4 x 32 x 2).
  const int64_t many = 1997, few = 100;
  rt::Stream stream;
  Options fp32;
  fp32.mode = Mode::Eval;
  fp32.use_tuned = false;
  Pipeline p = Pipeline::from_string(kLinear, "linear.kf", fp32);
  run_at(p, few, stream);
  CHECK(rt::PipelineAccess::gemm_launches(p).at(0).kernel == "k0_gemm");
  CHECK(rt::PipelineAccess::gemm_launches(p).at(0).tile == "128x32x1");
  CHECK(rt::PipelineAccess::gemm_launches(p).at(0).splits > 1);
  run_at(p, many, stream);
  CHECK(rt::PipelineAccess::gemm_launches(p).at(0).kernel == "k0_gemm_wide");
  CHECK(rt::PipelineAccess::gemm_launches(p).at(0).tile == "128x128x1");

  // Both tiles against the reference, as a Linear (B k-contiguous) and a matmul (B n-major, its
  // 16-byte copies), with batchnorm's statistics from the epilogue in train mode over two steps
  // (both tiles write partials of 128 rows) and folded into it in eval mode.
  for (const char *product : {"linear(x, w)", "matmul(x, v)"}) {
    CAPTURE(product);
    const std::string text =
        fmt::format("pipeline simt {{\n  dim N\n  input x: f32[N, 200]\n  param w: f32[1024, 200]\n"
                    "  param v: f32[200, 1024]\n  param g: f32[1024]\n  param b: f32[1024]\n"
                    "  state rm: f32[1024]\n  state rv: f32[1024]\n  h = {}\n"
                    "  return batchnorm(relu(h), g, b, rm, rv, eps=1e-5, momentum=0.1)\n}}\n",
                    product);
    for (int64_t n : {int64_t{2}, few, many}) {
      CAPTURE(n);
      testing::expect_match(text, "simt.kf", Mode::Train, n, 11, 2);
      testing::expect_match(text, "simt.kf", Mode::Eval, n, 12, 1);
    }
  }
}
