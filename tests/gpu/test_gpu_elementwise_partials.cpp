// Elementwise kernels that write the column partials of their value (elementwise_stats.cuh):
// the value stored and summarized, or only summarized, over odd rows and columns (partial row
// tiles, partial 128-column blocks, one column) in f32 and bf16, against the fp64 reference.
#include "tests/support/gpu_cases.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace kfuse;
using testing::expect_match;

namespace {

// `p` is stored (returned) and summarized by the column sum; `q` only summarized (nothing
// else reads it); batchnorm's statistics of `r` come from the kernel that stores it. The sums
// are of squares: a bf16 sum of signed products can cancel to a result far smaller than its
// terms, whose bf16 rounding then dominates any relative bound.
std::string partials_chain(int features, const char *dtype) {
  return fmt::format(R"(pipeline elementwise_partials_{0}_{1} {{
  dim N
  input  x: {1}[N, {0}]
  input  y: {1}[N, {0}]
  param  scale: {1}[{0}]
  state  running_mean: {1}[{0}]
  state  running_var: {1}[{0}]
  p = mul(x, x)
  q = mul(sub(y, scale), sub(y, scale))
  r = add(mul(x, scale), y)
  return p, sum(p, dim=0), sum(q, dim=0), batchnorm(r, running_mean, running_var)
}}
)",
                     features, dtype);
}

} // namespace

TEST_CASE("gpu: elementwise kernels write their value's column partials, stored or not") {
  uint64_t seed = 100;
  for (const char *dtype : {"f32", "bf16"})
    for (int features : {1, 33, 130, 257})
      for (int64_t n : {2, 7, 129, 300})
        for (Mode mode : {Mode::Train, Mode::Eval}) {
          INFO(std::string(dtype), " F=", features, " N=", n,
               mode == Mode::Train ? " train" : " eval");
          expect_match(partials_chain(features, dtype), "partials.kf", mode, n, ++seed);
        }
}
