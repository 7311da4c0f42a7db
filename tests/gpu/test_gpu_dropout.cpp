// dropout on the GPU: the examples within the bound in both modes, and in train mode the GPU's
// mask equal to the interpreter's (the zeros exactly where the reference's are), over runs that
// advance the offset.
#include "compiler/build_executable.h"
#include "runtime/pipeline.h"
#include "tests/support/gpu_cases.h"
#include "tools/check/reference_check.h"

#include <doctest/doctest.h>

using namespace kfuse;
using testing::example;
using testing::expect_examples;

namespace {

// The request's pipeline as lowered once: compiled for the GPU and interpreted as the reference.
Lowered lowered(const rt::CheckRequest &req) {
  return lower(dsl::SourceFile(req.file_name, req.kf_text),
               lower_options(rt::PipelineAccess::request(req.options, true)));
}

} // namespace

TEST_CASE("gpu: dropout examples match the reference in both modes") {
  expect_examples({"gpt2_mlp_dropout.kf", "bert_output_dropout_layernorm.kf"}, 41);
}

TEST_CASE("gpu: dropout drops exactly the interpreter's elements, runs advance the offset") {
  for (Precision precision : {Precision::FP32, Precision::TF32}) {
    rt::CheckRequest req;
    req.kf_text = example("gpt2_mlp_dropout.kf");
    req.file_name = "gpt2_mlp_dropout.kf";
    req.options.mode = Mode::Train;
    req.options.precision = precision;
    req.dims = {{"N", 130}};
    req.seed = 43;
    req.steps = 3;
    req.rng = {0x123456789abcdefULL, 7};
    const Lowered l = lowered(req);
    Pipeline pipeline = rt::PipelineAccess::compile(build_executable(l));
    rt::CheckResult r = rt::check_against_reference(pipeline, l.graph, req);
    const double bound = rt::error_bound(precision);
    for (const rt::CheckEntry &e : r.entries) {
      INFO(e.name, " rel ", e.relative, " zero mismatches ", e.zero_mismatches);
      CHECK(e.finite);
      CHECK(e.relative <= bound);
      CHECK(e.zero_mismatches == 0); // the last step's mask, at offset 9
    }
    CHECK(pipeline.rng_state().seed == req.rng.seed);
    CHECK(pipeline.rng_state().offset == 10); // three train-mode runs from 7
  }
  // Eval mode draws nothing: the offset stays.
  rt::CheckRequest req;
  req.kf_text = example("gpt2_mlp_dropout.kf");
  req.file_name = "gpt2_mlp_dropout.kf";
  req.options.mode = Mode::Eval;
  req.dims = {{"N", 5}};
  req.steps = 2;
  const Lowered l = lowered(req);
  Pipeline pipeline = rt::PipelineAccess::compile(build_executable(l));
  rt::CheckResult r = rt::check_against_reference(pipeline, l.graph, req);
  for (const rt::CheckEntry &e : r.entries)
    CHECK(e.relative <= rt::error_bound(Precision::FP32));
  CHECK(pipeline.rng_state().offset == 0);
}
