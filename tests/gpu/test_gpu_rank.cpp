// [B, T, F] activations on the GPU: the kernels run over B*T rows. Odd B and T give the GEMM and
// the row kernels partial tiles; outputs are poisoned with NaN first (expect_match).
#include "tests/support/gpu_cases.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace kfuse;
using testing::example;
using testing::expect_match;

namespace {

// A transformer-style projection with a residual input, then rmsnorm, on [B, T, F] tensors of
// `dtype` (the norm weight f32); `in` a multiple of 8 for bf16's Hopper GEMM.
std::string projection_rmsnorm(int in, int out, const std::string &dtype) {
  return fmt::format(R"(pipeline projection_rmsnorm {{
  dim B, T
  input x: {0}[B, T, {1}]
  input residual: {0}[B, T, {2}]
  param weight: {0}[{2}, {1}]
  param bias: {0}[{2}]
  param norm_weight: f32[{2}]
  h = add(linear(x, weight, bias), residual)
  return h, rmsnorm(h, norm_weight, eps=1e-6)
}}
)",
                     dtype, in, out);
}

// [B, T, F] through views: reshaped to [B*T, F] for the projection and rmsnorm, reshaped back
// with an inferred extent, a per-row input viewed from [B*T, 1] to [B, 1, T, 1] and back, a
// vector unsqueezed to [1, F], and a view of an input and one of an output returned.
std::string projection_through_views(int in, int out) {
  return fmt::format(R"(pipeline projection_through_views {{
  dim B, T
  input x: f32[B, T, {0}]
  input gate: f32[B, T, 1]
  param weight: f32[{1}, {0}]
  param shift: f32[{1}]
  param norm_weight: f32[{1}]
  tokens = reshape(x, shape=[B*T, {0}])
  h = add(linear(tokens, weight), unsqueeze(shift, dim=0))
  y = rmsnorm(h, norm_weight, eps=1e-6)
  g = squeeze(unsqueeze(reshape(gate, shape=[-1, 1]), dim=0), dim=-3)
  z = mul(y, g)
  per_head = unsqueeze(reshape(z, shape=[B, T, -1]), dim=1)
  return squeeze(per_head, dim=1), per_head, reshape(x, shape=[B*T, {0}])
}}
)",
                     in, out);
}

const std::map<std::string, int64_t> kOddBT[] = {
    {{"B", 1}, {"T", 1}}, {{"B", 3}, {"T", 5}}, {{"B", 5}, {"T", 33}}, {{"B", 7}, {"T", 19}}};

} // namespace

TEST_CASE("gpu: [B, T, F] examples (GPT-2 f32 layernorm, TinyLlama bf16 rmsnorm, BERT MLM "
          "transform through views) with odd B, T") {
  uint64_t seed = 900;
  for (const char *file :
       {"gpt2_attn_out_residual_layernorm_btf.kf", "tinyllama_o_proj_residual_rmsnorm_btf_bf16.kf",
        "bert_mlm_transform_tokens_view.kf"})
    for (Mode mode : {Mode::Eval, Mode::Train})
      for (const auto &dims : kOddBT)
        expect_match(example(file), file, mode, dims, ++seed);
}

TEST_CASE("gpu: [B, T, F] projection + residual + rmsnorm in f32 and bf16, odd feature counts") {
  uint64_t seed = 950;
  for (const char *dtype : {"f32", "bf16"})
    for (auto [in, out] : {std::pair{64, 37}, std::pair{128, 130}, std::pair{256, 1000}})
      for (const auto &dims : kOddBT)
        expect_match(projection_rmsnorm(in, out, dtype), "projection_rmsnorm.kf", Mode::Eval, dims,
                     ++seed);
}

TEST_CASE("gpu: [B, T, F] through reshape, unsqueeze and squeeze views, odd B, T and features") {
  uint64_t seed = 980;
  for (auto [in, out] : {std::pair{64, 37}, std::pair{256, 130}})
    for (Mode mode : {Mode::Eval, Mode::Train})
      for (const auto &dims : kOddBT)
        expect_match(projection_through_views(in, out), "projection_through_views.kf", mode, dims,
                     ++seed);
}

TEST_CASE("gpu: an [N, F] input regrouped as [B, T, F] meets a [B, T, F] one in one elementwise "
          "kernel, N bound to B*T, f32 and bf16, odd features") {
  uint64_t seed = 990;
  for (const char *dtype : {"f32", "bf16"})
    for (int f : {37, 64})
      for (const auto &bt : kOddBT) {
        std::map<std::string, int64_t> dims = bt;
        dims["N"] = bt.at("B") * bt.at("T");
        const std::string text = fmt::format(R"(pipeline regroup {{
  dim N, B, T
  input x: {0}[N, {1}]
  input y: {0}[B, T, {1}]
  return add(reshape(x, shape=[B, T, {1}]), y), mul(x, reshape(y, shape=[N, {1}]))
}}
)",
                                             dtype, f);
        expect_match(text, "regroup.kf", Mode::Eval, dims, ++seed);
      }
}
