// Precision bf16 on f32 tensors on the GPU: GEMM operands rounded to bf16 (weights once per
// bind, inputs per run, activations by their producer), fp32 accumulation, f32 results, against
// the fp64 reference interpreter, which rounds where the kernels do (the 2e-2 bound).
#include "kfuse/kfuse.h"
#include "runtime/device_buffer.h"
#include "runtime/driver.h"
#include "tests/support/gpu_cases.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace kfuse;
using testing::bn_scale_softmax;
using testing::example;
using testing::expect_match;
using testing::scale_bn;

namespace {

// K = 16, a multiple of 8 as the bf16 Hopper GEMM needs.
const char *kLinear = R"(pipeline lin {
  dim N
  input  x: f32[N, 16]
  param  weight: f32[24, 16]
  param  bias: f32[24]
  return linear(x, weight, bias)
}
)";

Tensor on(const rt::DeviceBuffer &b, std::vector<int64_t> shape) {
  return {reinterpret_cast<void *>(b.ptr()), std::move(shape)};
}

std::vector<float> values(size_t n, float scale, float shift) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = scale * std::sin(0.37f * static_cast<float>(i) + shift);
  return v;
}

} // namespace

TEST_CASE("gpu: precision bf16 founding chains with odd sizes, train and eval") {
  uint64_t seed = 1200;
  for (auto [in, out] : {std::pair{40, 37}, std::pair{136, 130}, std::pair{264, 300}})
    for (const std::string &text : {scale_bn(in, out), bn_scale_softmax(in, out)}) {
      for (int64_t n : {1, 37, 130})
        expect_match(text, "autocast.kf", Mode::Eval, n, ++seed, 1, Precision::BF16);
      for (int64_t n : {37, 130})
        expect_match(text, "autocast.kf", Mode::Train, n, ++seed, 3, Precision::BF16);
    }
}

TEST_CASE("gpu: precision bf16 founding examples and a two-GEMM MLP whose second GEMM reads the "
          "first's bf16") {
  for (const char *file : {"gemm_bn_scale_softmax.kf", "gemm_scale_bn.kf", "gpt2_mlp_dropout.kf",
                           "mobilenetv3_head_hardswish.kf", "swiglu_style_gate.kf"}) {
    const std::string text = example(file);
    expect_match(text, file, Mode::Eval, 1, 31, 1, Precision::BF16);
    expect_match(text, file, Mode::Eval, 37, 32, 1, Precision::BF16);
    expect_match(text, file, Mode::Train, 37, 33, 3, Precision::BF16);
  }
}

TEST_CASE("gpu: precision bf16 rounds weights once per bind: results follow a bind, not an "
          "in-place change") {
  rt::Driver::get().make_current();
  Options o;
  o.precision = Precision::BF16;
  Pipeline p = Pipeline::from_string(kLinear, "lin.kf", o);
  const int64_t n = 5;
  rt::DeviceBuffer x(n * 16 * sizeof(float)), weight(24 * 16 * sizeof(float)),
      bias(24 * sizeof(float)), out(n * 24 * sizeof(float));
  const std::vector<float> xs = values(n * 16, 1.0f, 0), w1 = values(24 * 16, 0.25f, 1),
                           w2 = values(24 * 16, 0.5f, 2), bs = values(24, 0.1f, 3);
  x.upload(xs.data(), xs.size() * sizeof(float));
  weight.upload(w1.data(), w1.size() * sizeof(float));
  bias.upload(bs.data(), bs.size() * sizeof(float));
  auto run = [&](Pipeline &pipeline) {
    pipeline.run({{"x", on(x, {n, 16})}}, {on(out, {n, 24})});
    rt::Driver &d = rt::Driver::get();
    d.check(d.cuCtxSynchronize(), "cuCtxSynchronize");
    std::vector<float> r(static_cast<size_t>(n * 24));
    out.download(r.data(), r.size() * sizeof(float));
    return r;
  };
  p.bind("weight", on(weight, {24, 16}));
  p.bind("bias", on(bias, {24}));
  const std::vector<float> first = run(p);
  for (int i = 0; i < 3; ++i) // steady runs (the replayed graph) keep the rounding of the bind
    CHECK(run(p) == first);

  weight.upload(w2.data(), w2.size() * sizeof(float));
  CHECK(run(p) == first);     // changed in place, not bound again: the weights rounded at the bind
  CHECK(!p.prepare_params()); // nothing bound since the last run
  p.bind("weight", on(weight, {24, 16}));
  CHECK(p.prepare_params()); // the bound tensor again: rounded now, not at the run
  CHECK(!p.prepare_params());
  const std::vector<float> second = run(p);
  CHECK(second != first);

  Pipeline fresh = Pipeline::from_string(kLinear, "lin.kf", o);
  fresh.bind("weight", on(weight, {24, 16}));
  fresh.bind("bias", on(bias, {24}));
  CHECK(!fresh.prepare_params()); // before a first run, which checks the tensors first
  CHECK(run(fresh) == second);    // what a pipeline bound to the new weights computes
  // Another tensor bound: its kernels wait for the run, which checks it first.
  rt::DeviceBuffer weight2(24 * 16 * sizeof(float));
  weight2.upload(w1.data(), w1.size() * sizeof(float));
  fresh.bind("weight", on(weight2, {24, 16}));
  CHECK(!fresh.prepare_params());
  CHECK(run(fresh) == first);
  // The bias is read every run (fp32, in the epilogue): no bind needed for it.
  const std::vector<float> bs2 = values(24, 0.3f, 4);
  bias.upload(bs2.data(), bs2.size() * sizeof(float));
  CHECK(run(p) != second);
}
