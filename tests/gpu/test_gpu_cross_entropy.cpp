// cross_entropy with i64 class-index targets on the GPU against the fp64 interpreter: the row
// pass of each row's loss (templates/row_cross_entropy.cuh) at odd row counts and class counts
// from 1 to a BERT vocabulary, every reduction (sum and mean through the column sums
// columns_from_reductions makes), ignored rows and label smoothing, f32 and bf16 logits; and the
// gradients of linear -> cross_entropy through the API's backward. Random targets draw one row in
// four as ignore_index (ir::random_tensors); outputs and gradients are poisoned with NaN first.
#include "tests/support/gpu_cases.h"

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <string>

using namespace kfuse;

namespace {

std::string loss_pipeline(int classes, const std::string &dtype, const std::string &attrs) {
  return fmt::format("pipeline ce_{0}_{1} {{\n  dim N\n  input x: {1}[N, {0}]\n"
                     "  input t: i64[N]\n  return cross_entropy(x, t{2})\n}}\n",
                     classes, dtype, attrs);
}

} // namespace

TEST_CASE("gpu cross_entropy: every reduction, ignored rows and smoothing, C = 1 to 30522") {
  for (int classes : {1, 7, 1000, 30522})
    for (const char *attrs : {", reduction=\"none\"", ", reduction=\"sum\", label_smoothing=0.1",
                              "", ", ignore_index=0, label_smoothing=0.25"})
      for (int64_t n : {1, 37}) {
        if (classes == 1 && std::string(attrs).find("ignore_index=0") != std::string::npos)
          continue; // every row ignored: a NaN mean, which the check takes for a failure
        const std::string text = loss_pipeline(classes, "f32", attrs);
        testing::expect_match(text, "ce.kf", Mode::Train, n, 11 + static_cast<uint64_t>(n));
      }
  for (const char *attrs : {", reduction=\"none\"", ", label_smoothing=0.1"})
    testing::expect_match(loss_pipeline(1000, "bf16", attrs), "ce_bf16.kf", Mode::Eval, 37, 5);
}

TEST_CASE("gpu cross_entropy: linear -> cross_entropy's gradients match the reference") {
  // 10 classes: the loss runs in the GEMM's row epilogue on staged rows; 1000: in a row pass.
  for (int classes : {10, 1000})
    for (const char *attrs :
         {", reduction=\"none\"", ", reduction=\"sum\"", ", label_smoothing=0.1"})
      for (int64_t n : {1, 29})
        CHECK(testing::expect_gradients_match(
                  fmt::format("pipeline lce {{\n  dim N\n  input x: f32[N, 40]\n"
                              "  input t: i64[N]\n  param w: f32[{0}, 40]\n"
                              "  param b: f32[{0}]\n"
                              "  return cross_entropy(linear(x, w, b), t{1})\n}}\n",
                              classes, attrs),
                  "lce.kf", Mode::Train, n, 21) == 3); // x, w and b; the target has none
  testing::expect_examples({"linear_cross_entropy.kf"}, 31);
}
