// The unfused baseline of `kfuse bench` on bf16/f16 chains: one kfuse kernel per op, each
// result stored in its own type (bf16/f16 between ops, as PyTorch eager), the GEMM kfuse's
// bare product writing its half-type result. Checked against the fp64 reference within the
// bf16 bound, odd sizes, both modes; `kfuse bench` runs the same plans with cuBLAS's GEMM.
#include "compiler/build_executable.h"
#include "compiler/lower.h"
#include "runtime/error.h"
#include "runtime/pipeline.h"
#include "tests/support/gpu_cases.h"
#include "tools/check/reference_check.h"

#include <doctest/doctest.h>

using namespace kfuse;
using testing::bn_scale_softmax;
using testing::example;
using testing::scale_bn;

namespace {

void expect_unfused_match(const std::string &text, const std::string &file, Mode mode, int64_t n,
                          uint64_t seed, int steps) {
  Options o;
  o.mode = mode;
  const Lowered l = lower(dsl::SourceFile(file, text),
                          lower_options(rt::PipelineAccess::request(o, /*fuse=*/false)));
  Pipeline p = rt::PipelineAccess::compile(build_executable(l));
  rt::CheckRequest req;
  req.kf_text = text;
  req.file_name = file;
  req.options = o;
  req.dims = {{"N", n}};
  req.seed = seed;
  req.steps = steps;
  rt::CheckResult r = rt::check_against_reference(p, l.graph, req);
  const double bound = rt::error_bound(Precision::FP32, l.graph);
  CHECK(bound == 2e-2);
  for (const rt::CheckEntry &e : r.entries) {
    INFO(file, " unfused mode ", mode == Mode::Train ? "train" : "eval", " N=", n, " ", e.name,
         " rel ", e.relative, " max abs ", e.max_abs, " bound ", bound);
    CHECK(e.finite);
    CHECK(e.relative <= bound);
  }
}

} // namespace

TEST_CASE("gpu: the unfused baseline of bf16 and f16 chains stores results in their type") {
  uint64_t seed = 1300;
  for (const char *dtype : {"bf16", "f16"})
    for (auto [in, out] : {std::pair{40, 37}, std::pair{264, 300}})
      for (const std::string &text : {scale_bn(in, out, dtype), bn_scale_softmax(in, out, dtype)}) {
        expect_unfused_match(text, "half.kf", Mode::Eval, 37, ++seed, 1);
        expect_unfused_match(text, "half.kf", Mode::Train, 130, ++seed, 3);
      }
}

TEST_CASE("gpu: the unfused baseline of the bf16 founding examples at small N") {
  for (const char *file : {"gemm_bn_scale_softmax_bf16.kf", "gemm_scale_bn_bf16.kf"}) {
    expect_unfused_match(example(file), file, Mode::Eval, 33, 41, 1);
    expect_unfused_match(example(file), file, Mode::Train, 33, 42, 3);
  }
}
