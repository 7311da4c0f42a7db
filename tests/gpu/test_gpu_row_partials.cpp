// A wide layer's row reductions as partials of its GEMM's epilogue (row_partials_epilogue): the
// GEMM writes one partial per (row, column slice) and reduction, a row kernel merges them, and
// the product is never stored unless it is returned. Against the fp64 reference on every
// mainloop and operand type, outputs poisoned first, features that end in a partial tile, one
// row up to many (split-K where the rows are few), the product both unstored and returned, and
// each of the Hopper GEMM's tiles (its partials per column slice whatever the tile).
#include "compiler/dsl/parser.h"
#include "compiler/plan/planner.h"
#include "runtime/device_buffer.h"
#include "runtime/driver.h"
#include "runtime/pipeline.h"
#include "runtime/stream.h"
#include "tests/support/gpu_cases.h"

#include <algorithm>
#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace kfuse;

namespace {

// Every reduction that has partials, over the product and over elementwise values of it, and
// reductions of a [N, 1] result after them; `returned` also returns h. Well-conditioned at tf32
// and bf16: sums of |h| (a sum of random signs cancels).
std::string wide(const char *dtype, int in, int out, bool returned) {
  return fmt::format(R"(pipeline wide_{0}_{1}_{2} {{
  dim N
  input  x: {0}[N, {1}]
  param  weight: {0}[{2}, {1}]
  param  bias: {0}[{2}]
  h = linear(x, weight, bias)
  s = sum(abs(h), dim=1, keepdim=true)
  e = amin(relu(h), dim=1)
  d = mean(div(abs(h), 2), dim=-1, keepdim=true)
  m = logsumexp(logsumexp(mean(max(s, dim=1, keepdim=true), dim=1, keepdim=true), dim=1, keepdim=true), dim=1, keepdim=true)
  return s, e, d, m, amax(h, dim=1), min(h, dim=1, keepdim=true){3}
}}
)",
                     dtype, in, out, returned ? ", h" : "");
}

} // namespace

TEST_CASE("gpu: a wide layer's row reductions are merged from its GEMM epilogue's partials, every "
          "mainloop and type") {
  uint64_t seed = 4100;
  struct Case {
    const char *dtype;
    Precision precision;
    int in; // 132 takes the sm90 mainloop for tf32, 130 the mma.sync one
  };
  for (const Case &c : {Case{"f32", Precision::FP32, 132}, Case{"f32", Precision::TF32, 132},
                        Case{"f32", Precision::TF32, 130}, Case{"bf16", Precision::FP32, 136}})
    for (int out : {129, 1000, 4100, 16385})
      for (bool returned : {false, true}) {
        const std::string text = wide(c.dtype, c.in, out, returned);
        CAPTURE(text);
        CAPTURE(static_cast<int>(c.precision));
        dsl::SourceFile src("wide.kf", text);
        dsl::Diagnostics diags(src);
        plan::Plan p = plan::make_plan(dsl::parse_kf(src, diags), ir::Mode::Eval);
        REQUIRE(p.kernels.size() == 2u);
        CHECK(p.kernels[0].row_partials);
        CHECK(p.kernels[1].row_partials);
        CHECK(std::count(p.kernels[0].rules.begin(), p.kernels[0].rules.end(),
                         "row_partials_epilogue") == 1);
        CHECK(p.kernels[0].stores.size() == (returned ? 1u : 0u));
        // 1 and 2 rows split K over the SMs; 33 and 1217 end in partial tiles of rows.
        for (int64_t n : {1, 2, 33, 64})
          testing::expect_match(text, "wide.kf", Mode::Eval, n, ++seed, 1, c.precision);
        if (out <= 4100)
          testing::expect_match(text, "wide.kf", Mode::Train, 1217, ++seed, 2, c.precision);
      }
}

TEST_CASE("gpu: row partials per column slice whichever tile the Hopper GEMM's run takes") {
  rt::Driver &driver = rt::Driver::get();
  driver.make_current();
  int sms = 0;
  driver.check(driver.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                           driver.current_device()),
               "cuDeviceGetAttribute");
  // K = 2048, 500 features (the last slice partial): as test_gpu_gemm_launches.cpp's deep
  // layer of 512, two waves of rows take the 128 x 256 tile, three the 128 x 128 one, and few
  // rows the kernel's own 64 x 128.
  const int64_t two_waves = 128 * (sms - 1) + 17, three_waves = 128 * (sms / 2 + 3) + 17,
                few = 128 * (sms / 4 - 1);
  for (const char *dtype : {"f32", "bf16"}) {
    CAPTURE(dtype);
    const bool bf16 = std::string(dtype) == "bf16";
    const DType type = bf16 ? DType::BF16 : DType::F32;
    const size_t size = bf16 ? 2 : 4;
    const std::string text = fmt::format(
        "pipeline deep {{\n  dim N\n  input x: {0}[N, 2048]\n  param w: {0}[500, 2048]\n"
        "  param b: {0}[500]\n  h = linear(x, w, b)\n"
        "  return sum(abs(h), dim=1), mean(abs(h), dim=1), amax(h, dim=1)\n}}\n",
        dtype);
    Options eval;
    eval.mode = Mode::Eval;
    eval.precision = bf16 ? Precision::FP32 : Precision::TF32;
    eval.use_tuned = false;
    Pipeline p = Pipeline::from_string(text, "deep.kf", eval);
    auto kernel_at = [&](int64_t rows) {
      rt::DeviceBuffer x(static_cast<size_t>(rows * 2048) * size), w(500 * 2048 * size),
          b(500 * size), out0(static_cast<size_t>(rows) * size),
          out1(static_cast<size_t>(rows) * size), out2(static_cast<size_t>(rows) * size);
      x.fill_bytes(0);
      w.fill_bytes(0);
      b.fill_bytes(0);
      p.bind("w", {reinterpret_cast<void *>(w.ptr()), {500, 2048}, type});
      p.bind("b", {reinterpret_cast<void *>(b.ptr()), {500}, type});
      const Tensor in[] = {{reinterpret_cast<void *>(x.ptr()), {rows, 2048}, type}};
      const Tensor results[] = {{reinterpret_cast<void *>(out0.ptr()), {rows}, type},
                                {reinterpret_cast<void *>(out1.ptr()), {rows}, type},
                                {reinterpret_cast<void *>(out2.ptr()), {rows}, type}};
      rt::Stream stream;
      p.run(in, 1, results, 3, stream.handle());
      stream.synchronize();
      return rt::PipelineAccess::gemm_launches(p).at(0).kernel;
    };
    const std::string gemm = bf16 ? "k0_gemm" : "k1_gemm"; // at tf32 k0 rounds the weight
    CHECK(kernel_at(two_waves) == gemm + "_wider");
    CHECK(kernel_at(three_waves) == gemm + "_wide");
    CHECK(kernel_at(few) == gemm);
    uint64_t seed = 4200;
    for (int64_t n : {two_waves, three_waves, few})
      testing::expect_match(text, "deep.kf", Mode::Eval, n, ++seed, 1, eval.precision);
  }
}
