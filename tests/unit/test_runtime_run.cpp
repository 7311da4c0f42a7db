// What a run checks before it needs a GPU: the positional entry's tensor counts and shapes,
// the workspace query and setter.
#include "kfuse/kfuse.h"

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

const char *kTiny = R"(pipeline tiny {
  dim N
  input  x: f32[N, 4]
  param  weight: f32[5, 4]
  return linear(x, weight)
}
)";

} // namespace

TEST_CASE("run: the workspace a run needs grows with its rows, a pipeline without "
          "intermediates needs none") {
  Options o;
  o.arch = "sm_90a";
  Pipeline train = Pipeline::from_string(kTrain, "chain.kf", o);
  const size_t small = train.workspace_size({{"N", 8}});
  CHECK(small > 0);
  CHECK(small % 256 == 0);
  CHECK(train.workspace_size({{"N", 4096}}) > small);
  CHECK_THROWS_WITH_AS(train.workspace_size({}),
                       doctest::Contains("pipeline 'chain': dim N is not bound"), Error);
  CHECK_THROWS_WITH_AS(train.workspace_size({{"N", 0}}),
                       doctest::Contains("dim N = 0 is out of range; dims are integers in [1, "
                                         "2147483647]"),
                       Error);
  Pipeline tiny = Pipeline::from_string(kTiny, "tiny.kf", o);
  CHECK(tiny.workspace_size({{"N", 8}}) == 0); // the GEMM writes the output itself
}

TEST_CASE("run: bad workspaces and tensor counts are refused before any GPU work") {
  Options o;
  o.arch = "sm_90a";
  Pipeline p = Pipeline::from_string(kTiny, "tiny.kf", o);
  CHECK_THROWS_WITH_AS(p.set_workspace(nullptr, 1024),
                       doctest::Contains("a workspace of 1024 bytes at a null pointer"), Error);
  alignas(256) static char memory[512];
  CHECK_THROWS_WITH_AS(p.set_workspace(memory + 4, 256), doctest::Contains("not 256-byte aligned"),
                       Error);
  p.bind("weight", {memory, {5, 4}});
  Tensor x{memory + 256, {2, 4}}, out{memory + 384, {2, 5}};
  Tensor two[] = {x, x};
  CHECK_THROWS_WITH_AS(p.run(two, 2, &out, 1),
                       doctest::Contains("pipeline 'tiny': expected 1 input tensor(s), got 2"),
                       Error);
  CHECK_THROWS_WITH_AS(p.run(&x, 1, nullptr, 0),
                       doctest::Contains("expected 1 output tensor(s), got 0"), Error);
  Tensor wrong = x;
  wrong.shape = {2, 5};
  CHECK_THROWS_WITH_AS(p.run(&wrong, 1, &out, 1),
                       doctest::Contains("tensor 'x' must be f32[N, 4], got shape [2, 5]"), Error);
  // The by-name entry orders inputs and forwards: its own name checks first.
  CHECK_THROWS_WITH_AS(p.run({{"y", x}}, {out}),
                       doctest::Contains("'y' is not an input of the pipeline"), Error);
  CHECK_THROWS_WITH_AS(p.run({}, {out}), doctest::Contains("input 'x' (f32[N, 4]) is missing"),
                       Error);
}

TEST_CASE("run: groups that do not divide a feature dim bound at run time are refused") {
  Options o;
  o.arch = "sm_90a";
  Pipeline p = Pipeline::from_string(R"(pipeline grouped {
  dim N
  dim C
  input x: f32[N, C]
  return groupnorm(x, groups=4)
}
)",
                                     "grouped.kf", o);
  alignas(256) static float memory[64];
  Tensor x{memory, {2, 6}}, out{memory + 32, {2, 6}};
  CHECK_THROWS_WITH_AS(
      p.run(&x, 1, &out, 1),
      doctest::Contains("pipeline 'grouped': groupnorm: groups=4 does not divide the 6 features "
                        "(line 5)"),
      Error);
}
