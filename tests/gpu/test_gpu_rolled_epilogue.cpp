// Heavy GEMM epilogues on the Hopper mainloop, whose functor is applied in a rolled loop over
// staged accumulators (gemm_epilogue.cuh's Apply::Rolled), against the fp64 reference
// interpreter: f32 (tf32) and bf16 tensors, rows past a tile (N = 1, 33, 1000, split-K where the
// tiles are few), features of the 64 x 128 and 128 x 256 tiles and not a multiple of 8 (scalar
// stores), a per-feature param and a residual input read at each element.
#include "tests/support/gpu_cases.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>

using namespace kfuse;
using testing::expect_match;

namespace {

// linear(x, w, b) of K -> F features, then `body` on h; r: an [N, F] input, s: a param [F].
std::string heavy_chain(const char *dtype, int features, const char *body) {
  return fmt::format("pipeline heavy {{\n  dim N\n  input x: {0}[N, 256]\n  input r: {0}[N, {1}]\n"
                     "  param w: {0}[{1}, 256]\n  param b: {0}[{1}]\n  param s: {0}[{1}]\n"
                     "  h = linear(x, w, b)\n{2}  return h\n}}\n",
                     dtype, features, body);
}

} // namespace

TEST_CASE("gpu: heavy epilogues applied in a rolled loop, f32 and bf16, odd shapes") {
  uint64_t seed = 4200;
  for (const char *dtype : {"f32", "bf16"})
    for (int features : {37, 1000, 4099})
      for (const char *body : {"  h = mish(mish(h))\n", "  h = selu(add(elu(h), r))\n",
                               "  h = mul(tanh(softplus(h)), add(h, r))\n",
                               "  h = hardtanh(gelu(tanh(silu(mul(h, s)))))\n"}) {
        CAPTURE(std::string(dtype));
        CAPTURE(features);
        CAPTURE(std::string(body));
        const std::string text = heavy_chain(dtype, features, body);
        // bf16 operands make a bf16 GEMM at any precision.
        Options o;
        o.mode = Mode::Eval;
        o.precision = std::string(dtype) == "f32" ? Precision::TF32 : Precision::FP32;
        CHECK(Pipeline::from_string(text, "heavy.kf", o).cuda_source().find("kf::Apply::Rolled") !=
              std::string::npos);
        for (int64_t n : {1, 33, 1000})
          expect_match(text, "heavy.kf", Mode::Eval, n, ++seed, 1, o.precision);
      }
}
