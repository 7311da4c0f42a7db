// The planner's time grows about linearly with a chain's length: long affine chains and
// thousands of parameters plan, and emit, within a bound far above their measured time (a
// quadratic pass exceeds it many times over). bench/plan_time.sh times `kfuse plan` on such
// chains at several lengths.
#include "compiler/codegen/program.h"
#include "compiler/dsl/parser.h"
#include "compiler/plan/planner.h"
#include "compiler/target.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <ctime>

using namespace kfuse;

namespace {

ir::Graph parse_text(const std::string &text) {
  dsl::SourceFile src("chain.kf", text);
  dsl::Diagnostics diags(src);
  return dsl::parse_kf(src, diags);
}

// `ops` statements `h = mul(h, w)`: one per-feature scale, folded into one map.
std::string scale_chain(int ops) {
  std::string text = "pipeline scale_chain {\n  dim N\n  input x: f32[N, 16]\n  param w: f32[16]\n"
                     "  h = mul(x, w)\n";
  for (int i = 1; i < ops; ++i)
    text += "  h = mul(h, w)\n";
  return text + "  return h\n}\n";
}

// `params` parameters, each added once: `h = add(h, p<i>)`.
std::string param_chain(int params) {
  std::string text = "pipeline param_chain {\n  dim N\n  input x: f32[N, 16]\n";
  for (int i = 0; i < params; ++i)
    text += fmt::format("  param p{}: f32[16]\n", i);
  text += "  h = add(x, p0)\n";
  for (int i = 1; i < params; ++i)
    text += fmt::format("  h = add(h, p{})\n", i);
  return text + "  return h\n}\n";
}

// `layers` narrow layers `h = softmax(relu(linear(h, W)))`: a GEMM kernel each, its softmax
// in the epilogue (gemm_row_epilogue).
std::string layer_chain(int layers) {
  std::string text = "pipeline layer_chain {\n  dim N\n  input x: f32[N, 16]\n"
                     "  param W: f32[16, 16]\n  h = x\n";
  for (int i = 0; i < layers; ++i)
    text += "  h = softmax(relu(linear(h, W)), dim=-1)\n";
  return text + "  return h\n}\n";
}

// Processor seconds (not wall time: other processes sharing the machine do not count) to
// parse, plan and emit `text` in both modes, which plan into at least `kernels` kernels (the
// bound on ops per kernel splits a long chain).
double seconds_to_plan_and_emit(const std::string &text, size_t kernels) {
  const std::clock_t start = std::clock();
  const ir::Graph g = parse_text(text);
  for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
    const plan::Plan p = plan::make_plan(g, mode);
    CHECK(p.kernels.size() >= kernels);
    codegen::generate(p, Target{"sm_90a", Precision::FP32});
  }
  return static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
}

} // namespace

TEST_CASE("plan time: a 50,000-op affine chain, 10,000 params and 4,000 layers plan and emit in "
          "seconds") {
  // Several times what each takes in a RelWithDebInfo build (bench/plan_time.sh measures it;
  // the sanitized run leaves this test out, scripts/test.sh); a pass quadratic in the length
  // exceeds it by far.
  constexpr double kBoundSeconds = 30;
  const double chain = seconds_to_plan_and_emit(scale_chain(50000), 1);
  const double params = seconds_to_plan_and_emit(param_chain(10000), 1);
  const double layers = seconds_to_plan_and_emit(layer_chain(4000), 4000);
  MESSAGE(fmt::format("50,000 scales: {:.2f} s, 10,000 params: {:.2f} s, 4,000 layers: {:.2f} s",
                      chain, params, layers));
  CHECK(chain < kBoundSeconds);
  CHECK(params < kBoundSeconds);
  CHECK(layers < kBoundSeconds);
}
