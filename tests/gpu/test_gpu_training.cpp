// Training through the C++ API on the GPU (Options::backward): every gradient of backward()
// against the fp64 interpreter's backward graph on odd shapes (gradients poisoned with NaN
// first), in train mode, through a dropout, and in eval mode; and backward()'s checks of its
// tensors against the last run.
#include "runtime/device_buffer.h"
#include "runtime/driver.h"
#include "runtime/pipeline.h"
#include "runtime/stream.h"
#include "tests/support/gpu_cases.h"

#include <doctest/doctest.h>

using namespace kfuse;
using testing::expect_gradients_match;

TEST_CASE("gpu training: gemm_bn_scale_softmax's gradients match the reference in train mode, "
          "over steps that update the running statistics") {
  expect_gradients_match(testing::bn_scale_softmax(37, 53), "bn_scale_softmax.kf", Mode::Train, 29,
                         71, 2);
  expect_gradients_match(testing::bn_scale_softmax(37, 53), "bn_scale_softmax.kf", Mode::Train, 3,
                         72);
}

TEST_CASE("gpu training: with inputs and params frozen the others' gradients match the reference") {
  const std::string text = testing::bn_scale_softmax(37, 53);
  const size_t all = expect_gradients_match(text, "bn_scale_softmax.kf", Mode::Train, 29, 76);
  CHECK(expect_gradients_match(text, "bn_scale_softmax.kf", Mode::Train, 29, 76, 1, Precision::FP32,
                               {"x"}) == all - 1);
  CHECK(expect_gradients_match(text, "bn_scale_softmax.kf", Mode::Train, 45, 77, 2, Precision::TF32,
                               {"x", "weight"}) == all - 2);
}

TEST_CASE("gpu training: the backward of a dropout draws the forward run's mask") {
  expect_gradients_match(testing::example("gpt2_mlp_dropout.kf"), "gpt2_mlp_dropout.kf",
                         Mode::Train, 37, 73, 3);
}

TEST_CASE("gpu training: eval mode differentiates through the running statistics") {
  expect_gradients_match(testing::scale_bn(37, 53), "scale_bn.kf", Mode::Eval, 29, 74);
  expect_gradients_match(testing::bn_scale_softmax(37, 53), "bn_scale_softmax.kf", Mode::Eval, 1,
                         75);
}

TEST_CASE("gpu training: backward() checks its tensors against the last run's dims") {
  Options o;
  o.backward = true;
  Pipeline p = Pipeline::from_string(testing::scale_bn(37, 53), "scale_bn.kf", o);
  const std::map<std::string, int64_t> dims{{"N", 29}};
  std::vector<rt::DeviceBuffer> memory;
  auto tensor = [&](std::vector<int64_t> shape, DType dtype = DType::F32) {
    int64_t n = 1;
    for (int64_t e : shape)
      n *= e;
    memory.emplace_back(static_cast<size_t>(n) * 4);
    return Tensor{reinterpret_cast<void *>(memory.back().ptr()), shape, dtype};
  };
  for (const std::string &name : p.params())
    p.bind(name, tensor(p.shape(name, dims)));
  const Tensor x = tensor({29, 37}), out = tensor({29, 53}), grad_out = tensor({29, 53});
  std::map<std::string, Tensor> gradients;
  for (size_t i = 0; i < p.gradients().size(); ++i)
    gradients[p.gradients()[i]] = tensor(p.gradient_shape(i, dims), p.gradient_dtype(i));
  rt::Stream stream;
  p.run({{"x", x}}, {out}, stream.handle());
  p.backward({grad_out}, gradients, stream.handle());
  stream.synchronize();

  CHECK_THROWS_WITH_AS(p.backward({tensor({30, 53})}, gradients, stream.handle()),
                       doctest::Contains("pipeline 'scale_bn_f32_37_53': backward(): the gradient "
                                         "of output 0 must be f32[29, 53] (at the last run's "
                                         "N=29), got f32[30, 53]"),
                       Error);
  CHECK_THROWS_WITH_AS(p.backward({tensor({29, 53}, DType::BF16)}, gradients, stream.handle()),
                       doctest::Contains("the gradient of output 0 must be f32[29, 53] (at the "
                                         "last run's N=29), got bf16[29, 53]"),
                       Error);
  std::map<std::string, Tensor> wrong = gradients;
  wrong["weight"] = tensor({37, 53});
  CHECK_THROWS_WITH_AS(p.backward({grad_out}, wrong, stream.handle()),
                       doctest::Contains("the gradient of 'weight' must be f32[53, 37] (at the "
                                         "last run's N=29), got f32[37, 53]"),
                       Error);
  // What the backward pipeline checks itself (memory, layout) names the gradient as run does.
  wrong["weight"] = Tensor{nullptr, {53, 37}};
  CHECK_THROWS_WITH_AS(p.backward({grad_out}, wrong, stream.handle()),
                       doctest::Contains("pipeline 'scale_bn_f32_37_53_backward': tensor 'grad "
                                         "weight' is a null pointer"),
                       Error);
  CHECK_THROWS_WITH_AS(p.backward({}, gradients, stream.handle()),
                       doctest::Contains("backward(): expected 1 output gradient(s), got 0"),
                       Error);
  // A run at other dims is the one backward() differentiates now: the gradients of N=29 no more.
  const Tensor x7 = tensor({7, 37}), out7 = tensor({7, 53});
  p.run({{"x", x7}}, {out7}, stream.handle());
  CHECK_THROWS_WITH_AS(p.backward({grad_out}, gradients, stream.handle()),
                       doctest::Contains("the gradient of output 0 must be f32[7, 53] (at the "
                                         "last run's N=7), got f32[29, 53]"),
                       Error);
  stream.synchronize();
}

TEST_CASE("gpu training: backward() repeats bit for bit, and follows the last run") {
  Options o;
  o.backward = true;
  o.mode = Mode::Train;
  Pipeline p = Pipeline::from_string(testing::bn_scale_softmax(37, 53), "bn.kf", o);
  const std::map<std::string, int64_t> dims{{"N", 29}};
  std::vector<rt::DeviceBuffer> memory;
  auto tensor = [&](std::vector<int64_t> shape, float fill) {
    size_t n = 1;
    for (int64_t e : shape)
      n *= static_cast<size_t>(e);
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i)
      host[i] = fill * static_cast<float>((i * 7919) % 23) / 23.0f - 0.25f;
    memory.emplace_back(n * 4);
    memory.back().upload(host.data(), n * 4);
    return Tensor{reinterpret_cast<void *>(memory.back().ptr()), shape};
  };
  for (const std::string &name : p.params())
    p.bind(name, tensor(p.shape(name, dims), 1.0f));
  const Tensor x1 = tensor({29, 37}, 1.0f), x2 = tensor({29, 37}, 2.0f);
  const Tensor out = tensor({29, 53}, 0), grad_out = tensor({29, 53}, 1.0f);
  const std::vector<int64_t> shape = p.gradient_shape(0, dims); // x's
  const Tensor dx = tensor(shape, 0);
  std::vector<Tensor> gradients{dx};
  for (size_t i = 1; i < p.gradients().size(); ++i)
    gradients.push_back(tensor(p.gradient_shape(i, dims), 0));
  auto download = [&](const Tensor &t) {
    std::vector<float> host(static_cast<size_t>(t.shape[0] * t.shape[1]));
    rt::Driver &driver = rt::Driver::get();
    driver.check(
        driver.cuMemcpyDtoH(host.data(), reinterpret_cast<CUdeviceptr>(t.data), host.size() * 4),
        "cuMemcpyDtoH");
    return host;
  };
  rt::Stream stream;
  auto backward = [&] {
    p.backward(&grad_out, 1, gradients.data(), gradients.size(), stream.handle());
    stream.synchronize();
    return download(dx);
  };
  p.run({{"x", x1}}, {out}, stream.handle());
  const std::vector<float> first = backward();
  CHECK(backward() == first); // the saved values stay until the next run
  p.run({{"x", x2}}, {out}, stream.handle());
  CHECK(backward() != first); // the second run's input and saved values
  p.run({{"x", x1}}, {out}, stream.handle());
  CHECK(backward() == first);
}
