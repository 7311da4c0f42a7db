// batchnorm over the B*T rows of a [B*T, C] view on the GPU: the column statistics run over
// every token, train mode's running-variance update unbiases by B*T/(B*T-1) (the column
// kernel's count, the product of the bound dims), and eval mode folds the running statistics
// into the GEMM's epilogue. Odd B and T give every tile a tail; train mode runs several steps
// back to back so that the running statistics carry over; outputs and running statistics are
// checked against the fp64 reference (expect_match).
#include "tests/support/gpu_cases.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace kfuse;
using testing::example;
using testing::expect_match;

namespace {

// Token features [B, T, in] viewed as B*T rows: a projection, batchnorm over the tokens, gelu,
// the result viewed back; and batchnorm straight on the view of a second input (its statistics
// from the input, not from a GEMM's epilogue), without affine parameters.
std::string token_batchnorm(int in, int out) {
  return fmt::format(R"(pipeline token_batchnorm {{
  dim B, T
  input x: f32[B, T, {0}]
  input z: f32[B, T, {1}]
  param weight: f32[{1}, {0}]
  param bias: f32[{1}]
  param gamma: f32[{1}]
  param beta: f32[{1}]
  state running_mean: f32[{1}]
  state running_var: f32[{1}]
  state z_mean: f32[{1}]
  state z_var: f32[{1}]
  tokens = reshape(x, shape=[B*T, {0}])
  h = linear(tokens, weight, bias)
  y = gelu(batchnorm(h, gamma, beta, running_mean, running_var, momentum=0.2))
  zn = batchnorm(reshape(z, shape=[-1, {1}]), z_mean, z_var)
  return reshape(y, shape=[B, T, {1}]), zn
}}
)",
                     in, out);
}

} // namespace

TEST_CASE("gpu: batchnorm over a [B*T, C] view (PointNet example), train over 3 steps and eval, "
          "odd B and T") {
  const char *file = "pointnet_mlp_relu_btf_batchnorm.kf";
  uint64_t seed = 1200;
  for (const auto &dims : {std::map<std::string, int64_t>{{"B", 3}, {"N", 7}},
                           std::map<std::string, int64_t>{{"B", 5}, {"N", 33}},
                           std::map<std::string, int64_t>{{"B", 32}, {"N", 1024}}}) {
    expect_match(example(file), file, Mode::Train, dims, ++seed, /*steps=*/3);
    expect_match(example(file), file, Mode::Eval, dims, ++seed);
  }
}

TEST_CASE("gpu: batchnorm over [B*T, C] views after a projection and on an input, odd B, T and "
          "features, train over 3 steps and eval") {
  uint64_t seed = 1250;
  for (auto [in, out] : {std::pair{64, 37}, std::pair{256, 130}})
    for (const auto &dims : {std::map<std::string, int64_t>{{"B", 3}, {"T", 7}},
                             std::map<std::string, int64_t>{{"B", 7}, {"T", 19}},
                             std::map<std::string, int64_t>{{"B", 9}, {"T", 333}}}) {
      expect_match(token_batchnorm(in, out), "token_batchnorm.kf", Mode::Train, dims, ++seed,
                   /*steps=*/3);
      expect_match(token_batchnorm(in, out), "token_batchnorm.kf", Mode::Eval, dims, ++seed);
    }
}
