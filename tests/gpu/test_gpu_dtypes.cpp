// bf16 and f16 tensors on the GPU against the fp64 reference interpreter, which rounds inputs,
// outputs and running-statistic updates to their declared types: the founding chains as
// PyTorch mixed precision declares them (bf16/f16 activations, weight, bias and scale; f32
// batchnorm parameters and running statistics), odd sizes, train and eval, several steps,
// outputs poisoned with NaN first, the 2e-2 bound of DESIGN.md.
#include "tests/support/gpu_cases.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace kfuse;
using testing::bn_scale_softmax;
using testing::example;
using testing::expect_match;
using testing::scale_bn;

namespace {

// Every kernel kind in one pipeline, all tensors bf16/f16 with f32 state: a GEMM whose output
// is returned in the half type, a row reduction and layernorm reading it, an elementwise
// kernel, groupnorm and both pools of half rows, and running statistics of a half-type state
// updated from fp32 statistics.
std::string every_kind(const char *dtype) {
  return fmt::format(R"(pipeline every_kind_{0} {{
  dim N
  input  x: {0}[N, 24]
  param  weight: {0}[37, 24]
  param  ln_weight: f32[37]
  state  running_mean: {0}[37]
  state  running_var: f32[37]
  h = linear(x, weight)
  y = batchnorm(h, running_mean, running_var)
  s = sum(h, dim=1, keepdim=true)
  return h, layernorm(h, ln_weight), add(y, s), gelu(x), groupnorm(x, groups=4),
         max_pool1d(x, kernel_size=3, stride=2), avg_pool1d(h, kernel_size=2)
}}
)",
                     dtype);
}

} // namespace

TEST_CASE("gpu: bf16 and f16 founding chains with odd sizes, train and eval") {
  uint64_t seed = 900;
  for (const char *dtype : {"bf16", "f16"})
    for (auto [in, out] : {std::pair{40, 37}, std::pair{136, 130}, std::pair{264, 300}})
      for (const std::string &text : {scale_bn(in, out, dtype), bn_scale_softmax(in, out, dtype)}) {
        for (int64_t n : {1, 37, 130})
          expect_match(text, "half.kf", Mode::Eval, n, ++seed);
        for (int64_t n : {37, 130})
          expect_match(text, "half.kf", Mode::Train, n, ++seed, 3);
      }
}

TEST_CASE("gpu: every kernel kind reads and writes bf16 and f16") {
  uint64_t seed = 950;
  for (const char *dtype : {"bf16", "f16"})
    for (Mode mode : {Mode::Eval, Mode::Train})
      for (int64_t n : {37, 130})
        expect_match(every_kind(dtype), "every_kind.kf", mode, n, ++seed, 2);
}

TEST_CASE("gpu: the bf16 and f16 examples at small N, train over three steps") {
  for (const char *file : {"gemm_bn_scale_softmax_bf16.kf", "gemm_scale_bn_bf16.kf",
                           "bert_head_gelu_layernorm_f16.kf"}) {
    std::string text = example(file);
    expect_match(text, file, Mode::Eval, 1, 21);
    expect_match(text, file, Mode::Eval, 37, 22);
    expect_match(text, file, Mode::Train, 37, 23, 3);
  }
}
