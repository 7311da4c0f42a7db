// Transpose kernels (templates/transpose.cuh) and the Hopper GEMMs that read their copies
// (passes::k_major_operands): matmul's weight transposed once per bind, the operands of a
// matmul of a transpose, and a transpose returned as it is, over odd shapes (edge tiles of the
// 32 x 32 transpose tiles, K tails, one row), against the fp64 reference.
#include "tests/support/gpu_cases.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace kfuse;
using testing::expect_match;

namespace {

// xᵀ y multiplies over the rows: its K is the batch.
std::string transposes(int features) {
  return fmt::format(R"(pipeline transposes_{0} {{
  dim N
  input  x: f32[N, {0}]
  input  y: f32[N, 40]
  return transpose(x), matmul(transpose(x), y)
}}
)",
                     features);
}

const char *name(Precision p) {
  return p == Precision::FP32 ? "fp32" : p == Precision::TF32 ? "tf32" : "bf16";
}

} // namespace

TEST_CASE("gpu: matmul's weight transposed for the Hopper GEMM, at every precision") {
  uint64_t seed = 300;
  for (Precision precision : {Precision::FP32, Precision::TF32, Precision::BF16})
    for (int in : {16, 40})
      for (int out : {33, 130})
        for (int64_t n : {2, 7, 130}) { // train-mode batchnorm needs two rows
          INFO(name(precision), " in=", in, " out=", out, " N=", n);
          expect_match(testing::matmul_scale_bn(in, out), "matmul.kf", Mode::Train, n, ++seed, 2,
                       precision);
        }
}

TEST_CASE("gpu: transposes returned and multiplied over the batch") {
  uint64_t seed = 400;
  for (Precision precision : {Precision::FP32, Precision::TF32})
    for (int features : {1, 33, 70})
      for (int64_t n : {1, 7, 130}) {
        INFO(name(precision), " F=", features, " N=", n);
        expect_match(transposes(features), "transposes.kf", Mode::Eval, n, ++seed, 1, precision);
      }
}
