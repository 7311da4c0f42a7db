// Training through the C++ API (Options::backward) where no GPU is needed: what a pipeline
// compiled with its backward says about its gradients, and every misuse refused before a launch.
#include "kfuse/kfuse.h"
#include "runtime/pipeline.h"

#include <doctest/doctest.h>

using namespace kfuse;

namespace {

const char *kTrain = R"(pipeline chain {
  dim N
  input  x: f32[N, 12]
  param  weight: f32[10, 12]
  param  bn_weight: f32[10]
  param  bn_bias: f32[10]
  state  running_mean: f32[10]
  state  running_var: f32[10]
  h = linear(x, weight)
  h = batchnorm(h, bn_weight, bn_bias, running_mean, running_var, eps=1e-5, momentum=0.1)
  return softmax(h, dim=1)
}
)";

Options training(Mode mode = Mode::Train) {
  Options o;
  o.arch = "sm_90a";
  o.mode = mode;
  o.backward = true;
  return o;
}

} // namespace

TEST_CASE("training api: a pipeline compiled with its backward names its gradients, the saved "
          "values are no outputs of its own") {
  Pipeline p = Pipeline::from_string(kTrain, "chain.kf", training());
  CHECK(p.gradients() == std::vector<std::string>{"x", "weight", "bn_weight", "bn_bias"});
  CHECK(p.output_count() == 1);
  CHECK_THROWS_WITH_AS(p.output_shape(1, {{"N", 8}}),
                       doctest::Contains("pipeline 'chain': no output 1 (it has 1)"), Error);
  CHECK(p.gradient_shape(0, {{"N", 8}}) == std::vector<int64_t>{8, 12});
  CHECK(p.gradient_shape(1, {{"N", 8}}) == std::vector<int64_t>{10, 12});
  CHECK(p.gradient_dtype(3) == DType::F32);
  CHECK_THROWS_WITH_AS(p.gradient_shape(4, {{"N", 8}}),
                       doctest::Contains("pipeline 'chain': no gradient 4 (it has 4)"), Error);
  // The forward saves for the backward (its further outputs) and the backward is its own plan.
  const Pipeline &backward = rt::PipelineAccess::backward(p);
  CHECK(backward.name() == "chain_backward");
  CHECK(backward.output_count() == 4);
  CHECK(rt::PipelineAccess::executable(p).interface.outputs.size() > 1);
  // Eval mode differentiates through the running statistics: the same gradients.
  Pipeline eval = Pipeline::from_string(kTrain, "chain.kf", training(Mode::Eval));
  CHECK(eval.gradients() == p.gradients());
}

TEST_CASE("training api: backward() on a pipeline compiled without it, and before any run, is "
          "refused") {
  Options plain;
  plain.arch = "sm_90a";
  Pipeline p = Pipeline::from_string(kTrain, "chain.kf", plain);
  const char *needs = "pipeline 'chain': backward() needs a pipeline compiled with "
                      "Options::backward = true";
  CHECK_THROWS_WITH_AS(p.backward({}, std::map<std::string, Tensor>{}), doctest::Contains(needs),
                       Error);
  CHECK_THROWS_WITH_AS(p.backward(nullptr, 0, nullptr, 0), doctest::Contains(needs), Error);
  CHECK_THROWS_WITH_AS(p.gradients(), doctest::Contains("gradients() needs a pipeline compiled"),
                       Error);
  CHECK_THROWS_WITH_AS(rt::PipelineAccess::backward(p),
                       doctest::Contains("its backward needs a pipeline compiled"), Error);

  Pipeline t = Pipeline::from_string(kTrain, "chain.kf", training());
  alignas(256) static char memory[1024];
  Tensor g{memory, {8, 10}};
  std::vector<Tensor> gradients(4, Tensor{memory + 512, {8, 12}});
  CHECK_THROWS_WITH_AS(t.backward(&g, 1, gradients.data(), gradients.size()),
                       doctest::Contains("pipeline 'chain': backward() before a run: run() "
                                         "computes and keeps what the backward reads"),
                       Error);
  // The by-name entry checks its names first.
  CHECK_THROWS_WITH_AS(t.backward({g}, {{"running_mean", g}}),
                       doctest::Contains("backward(): 'running_mean' has no gradient (the "
                                         "gradients: x, weight, bn_weight, bn_bias)"),
                       Error);
  CHECK_THROWS_WITH_AS(t.backward({g}, {{"x", g}}),
                       doctest::Contains("backward(): the gradient of 'weight' is missing"), Error);
}

TEST_CASE("training api: with batch statistics exchanged across ranks the backward exchanges "
          "its batchnorm's gradient means through the same all-gather") {
  Options ranks = training();
  ranks.batch_stats_ranks = 2;
  Pipeline p = Pipeline::from_string(kTrain, "chain.kf", ranks);
  CHECK(p.gradients() == std::vector<std::string>{"x", "weight", "bn_weight", "bn_bias"});
  CHECK(p.all_gathers_per_run() == 1);
  const Pipeline &backward = rt::PipelineAccess::backward(p);
  // The means of the output gradient and of its product with the normalized input.
  CHECK(backward.all_gathers_per_run() == 2);
  CHECK(rt::PipelineAccess::executable(backward).exchanges.size() == 2);
}

TEST_CASE("training api: options that have no backward are refused when compiling") {
  Options tune = training();
  tune.tune_at_start = {{"N", 64}};
  CHECK_THROWS_WITH_AS(Pipeline::from_string(kTrain, "chain.kf", tune),
                       doctest::Contains("Options::tune_at_start tunes the pipeline's forward "
                                         "alone"),
                       Error);
  // An op without a gradient rule (a second derivative) is named where the backward is built.
  const char *second = R"(pipeline second {
  dim N
  input  g: f32[N, 3]
  input  y: f32[N, 7]
  return max_pool1d_backward(g, y, kernel_size=3, stride=2)
}
)";
  CHECK_THROWS_WITH_AS(Pipeline::from_string(second, "second.kf", training()),
                       doctest::Contains("(max_pool1d_backward) has no vector-Jacobian product"),
                       Error);
}
