// bf16 GEMMs over an inner dim that is no multiple of 8 on the GPU, against the fp64 reference:
// their operands are matrices kernels write with rows padded to 16 bytes for TMA
// (select::padded_rows), which the transposes and column sums that read them too read at that
// pitch. A 10-class classifier head's backward (dlogits, the cross-entropy gradient a row kernel
// writes, is dX's GEMM operand, dW's transpose's input and db's column sum), at precision bf16 on
// f32 tensors and with bf16 tensors; and a softmax over 10 features feeding a matmul, from a row
// kernel and from a GEMM's row epilogue. Outputs and gradients are poisoned with NaN first, so a
// row element the pitch skips would show.
#include "tests/support/gpu_cases.h"

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <string>

using namespace kfuse;

namespace {

std::string classifier_head(const std::string &dtype) {
  return fmt::format("pipeline lce {{\n  dim N\n  input x: {0}[N, 16]\n  input target: i64[N]\n"
                     "  param w: {0}[10, 16]\n  param b: {0}[10]\n"
                     "  return cross_entropy(linear(x, w, b), target, label_smoothing=0.1)\n}}\n",
                     dtype);
}

} // namespace

TEST_CASE("gpu padded operands: a 10-class linear -> cross_entropy's gradients at bf16") {
  for (int64_t n : {1, 29}) {
    CHECK(testing::expect_gradients_match(classifier_head("f32"), "lce.kf", Mode::Train, n, 41, 1,
                                          Precision::BF16) == 3); // x, w and b
    CHECK(testing::expect_gradients_match(classifier_head("bf16"), "lce_bf16.kf", Mode::Train, n,
                                          43) == 3);
  }
}

TEST_CASE("gpu padded operands: a softmax over 10 features feeds a bf16 matmul") {
  const std::string row_kernel = "pipeline s {\n  dim N\n  input x: bf16[N, 10]\n"
                                 "  param w: bf16[10, 4]\n  y = softmax(x, dim=1)\n"
                                 "  return matmul(y, w)\n}\n",
                    row_epilogue = "pipeline s {\n  dim N\n  input x: bf16[N, 16]\n"
                                   "  param w1: bf16[10, 16]\n  param w2: bf16[10, 4]\n"
                                   "  h = softmax(linear(x, w1), dim=1)\n"
                                   "  return matmul(h, w2)\n}\n";
  for (int64_t n : {1, 29}) {
    testing::expect_match(row_kernel, "softmax_matmul.kf", Mode::Eval, n, 45);
    testing::expect_match(row_epilogue, "linear_softmax_matmul.kf", Mode::Eval, n, 47);
  }
}
