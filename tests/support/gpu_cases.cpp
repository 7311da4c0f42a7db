#include "tests/support/gpu_cases.h"

#include "compiler/build_executable.h"
#include "compiler/dsl/parser.h"
#include "runtime/pipeline.h"
#include "tests/support/source_tree.h"
#include "tools/check/reference_check.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fstream>
#include <sstream>

namespace kfuse::testing {

std::string scale_bn(int in, int out, const std::string &dtype, const std::string &norm_dtype) {
  return fmt::format(R"(pipeline scale_bn_{0}_{1}_{2} {{
  dim N
  input  x: {0}[N, {1}]
  param  weight: {0}[{2}, {1}]
  param  bias: {0}[{2}]
  param  scale: {0}[{2}]
  param  bn_weight: {3}[{2}]
  param  bn_bias: {3}[{2}]
  state  running_mean: {3}[{2}]
  state  running_var: {3}[{2}]
  h = linear(x, weight, bias)
  h = mul(h, scale)
  return batchnorm(h, bn_weight, bn_bias, running_mean, running_var, eps=1e-5, momentum=0.1)
}}
)",
                     dtype, in, out, norm_dtype);
}

std::string bn_scale_softmax(int in, int out, const std::string &dtype,
                             const std::string &norm_dtype) {
  return fmt::format(R"(pipeline bn_scale_softmax_{0}_{1}_{2} {{
  dim N
  input  x: {0}[N, {1}]
  param  weight: {0}[{2}, {1}]
  param  bias: {0}[{2}]
  param  bn_weight: {3}[{2}]
  param  bn_bias: {3}[{2}]
  state  running_mean: {3}[{2}]
  state  running_var: {3}[{2}]
  param  scale: {0}[1]
  h = linear(x, weight, bias)
  h = batchnorm(h, bn_weight, bn_bias, running_mean, running_var, eps=1e-5, momentum=0.1)
  h = mul(scale, h)
  return softmax(h, dim=1)
}}
)",
                     dtype, in, out, norm_dtype);
}

std::string matmul_scale_bn(int in, int out) {
  std::string text = scale_bn(in, out);
  auto replace = [&](const std::string &from, const std::string &to) {
    text.replace(text.find(from), from.size(), to);
  };
  replace("pipeline scale_bn", "pipeline matmul_scale_bn");
  replace(fmt::format("weight: f32[{}, {}]", out, in), fmt::format("weight: f32[{}, {}]", in, out));
  replace("linear(x, weight, bias)", "add(matmul(x, weight), bias)");
  return text;
}

std::string repo_file(const std::string &path) {
  const std::string file = source_path(path);
  std::ifstream in(file);
  REQUIRE_MESSAGE(in.good(), "cannot read ", file,
                  " (the source tree: $KFUSE_SOURCE_DIR, else found from the test binary)");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string example(const std::string &name) { return repo_file("examples/" + name); }

void expect_match(const std::string &text, const std::string &file, Mode mode, int64_t n,
                  uint64_t seed, int steps, Precision precision) {
  expect_match(text, file, mode, {{"N", n}}, seed, steps, precision);
}

void expect_match(const std::string &text, const std::string &file, Mode mode,
                  const std::map<std::string, int64_t> &dims, uint64_t seed, int steps,
                  Precision precision) {
  rt::CheckRequest req;
  req.kf_text = text;
  req.file_name = file;
  req.options.mode = mode;
  req.options.precision = precision;
  req.dims = dims;
  req.seed = seed;
  req.steps = steps;
  rt::CheckResult r = rt::check_against_reference(req);
  dsl::SourceFile src(file, text);
  dsl::Diagnostics diags(src);
  const double bound = rt::error_bound(precision, dsl::parse_kf(src, diags));
  std::string bound_dims;
  for (const auto &[name, value] : dims)
    bound_dims += fmt::format(" {}={}", name, value);
  for (const rt::CheckEntry &e : r.entries) {
    INFO(file, " mode ", mode == Mode::Train ? "train" : "eval", bound_dims, " ", e.name, " rel ",
         e.relative, " max abs ", e.max_abs, " bound ", bound);
    CHECK(e.finite);
    CHECK(e.relative <= bound);
  }
}

size_t expect_gradients_match(const std::string &text, const std::string &file, Mode mode,
                              int64_t n, uint64_t seed, int steps, Precision precision,
                              const std::vector<std::string> &frozen) {
  rt::CheckRequest req;
  req.kf_text = text;
  req.file_name = file;
  req.options.mode = mode;
  req.options.backward = true;
  req.options.precision = precision;
  req.options.frozen = frozen;
  req.dims = {{"N", n}};
  req.seed = seed;
  req.steps = steps;
  req.rng = {0x5eed, 11};
  const LoweredTraining t = lower_training(
      dsl::SourceFile(file, text), lower_options(rt::PipelineAccess::request(req.options, true)));
  Pipeline pipeline = rt::PipelineAccess::compile_training(build_training(t));
  req.backward = {&t.backward.graph, t.sources.grad_inputs, t.sources.saved};
  const rt::CheckResult r = rt::check_against_reference(pipeline, t.forward.graph, req);
  const double bound = std::max(rt::error_bound(precision, t.forward.graph),
                                rt::error_bound(precision, t.backward.graph));
  size_t gradients = 0;
  for (const rt::CheckEntry &e : r.entries) {
    INFO(file, " ", ir::mode_name(mode == Mode::Train ? ir::Mode::Train : ir::Mode::Eval), " N=", n,
         " ", e.name, ": rel ", e.relative, " max abs ", e.max_abs, "; from the exact values ",
         e.exact_relative, ", the reference ", e.reference_relative);
    CHECK(e.finite);
    CHECK(e.within(bound));
    gradients += e.name.rfind("grad ", 0) == 0;
  }
  CHECK(gradients == pipeline.gradients().size());
  CHECK(gradients == t.sources.gradients.size());
  return gradients;
}

void expect_examples(std::initializer_list<const char *> files, uint64_t seed) {
  for (const char *file : files)
    for (Mode mode : {Mode::Eval, Mode::Train}) {
      expect_match(example(file), file, mode, 1, seed);
      expect_match(example(file), file, mode, 33, seed + 1);
    }
}

} // namespace kfuse::testing
