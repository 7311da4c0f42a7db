#include "tests/support/generated_check.h"

#include "compiler/codegen/gpu_support.h"
#include "compiler/codegen/program.h"
#include "compiler/dsl/parser.h"
#include "compiler/plan/agreement.h"
#include "compiler/plan/planner.h"

#include <algorithm>
#include <exception>

namespace kfuse::testing {

namespace {

// fp64 interpretation of the same math in another order: rounding differences only.
constexpr double kTolerance = 1e-9;

CheckResult failure(const std::string &where, const std::exception &e) {
  const std::string what = e.what();
  return {what.find("internal error") != std::string::npos ? Verdict::InternalError
                                                           : Verdict::Rejected,
          where + ": " + what};
}

CheckResult check_mode(const ir::Graph &parsed, ir::Mode mode, const ir::DimBindings &dims,
                       uint64_t seed, bool chaotic) {
  const std::string where = std::string(ir::mode_name(mode));
  // As lower() does: GEMMs of bf16/f16 operands run on the Hopper mainloop, which reads
  // K-major operands; the rewrite is proven with the planner's passes below.
  const bool k_major = codegen::hopper_gemms(parsed, {}, Precision::FP32);
  std::vector<passes::Pass> proven = passes::pipeline();
  if (k_major)
    proven.insert(proven.begin(), {"k_major_operands", passes::k_major_operands});
  plan::Plan p;
  ir::Graph g;
  try {
    g = k_major ? passes::k_major_operands(parsed, mode) : parsed;
    plan::make_plan(g, mode, {}, /*fuse=*/false); // the unfused baseline, validated too
    p = plan::make_plan(g, mode);
  } catch (const std::exception &e) {
    return failure(where + " plan", e);
  }
  try {
    codegen::generate(p);
  } catch (const codegen::CodegenError &e) {
    // A construct the GPU generator does not express (softmax over dim 0) is a clear error.
    if (std::string(e.what()).find("internal error") != std::string::npos)
      return failure(where + " emit", e);
  } catch (const std::exception &e) {
    return failure(where + " emit", e);
  }
  try {
    // Chains of train-mode batchnorms amplify rounding chaotically (1 / sqrt(eps) per
    // batchnorm over a column constant up to rounding): there the plan is proven against the
    // rewritten graph, on the tensors drawn for the file.
    auto file_tensors = [&](ir::TensorMap &t) { t = ir::random_tensors(parsed, dims, seed); };
    const std::vector<plan::StageError> stages =
        chaotic ? plan::check_planner(p.graph, mode, dims, seed, {}, file_tensors)
                : plan::check_planner(parsed, mode, dims, seed, proven);
    const std::string at = where + " N=" + std::to_string(dims.at("N")) + ": disagreement ";
    for (const plan::StageError &s : stages)
      if (!(s.random_error <= kTolerance))
        return {Verdict::Disagreement,
                at + std::to_string(s.random_error) + " at " + s.stage + " on random data"};
    plan::StageError worst = plan::first_failure(stages, kTolerance);
    if (!(worst.error <= kTolerance))
      return {Verdict::SpecialValues,
              at + std::to_string(worst.error) + " at " + worst.stage + " on " + worst.draw};
  } catch (const std::exception &e) {
    return failure(where + " prove", e);
  }
  return {};
}

} // namespace

CheckResult check_generated(const std::string &text, int64_t rows, uint64_t seed) {
  ir::Graph g;
  try {
    dsl::SourceFile source("generated.kf", text);
    dsl::Diagnostics diags(source);
    g = dsl::parse_kf(source, diags);
  } catch (const std::exception &e) {
    return failure("parse", e);
  }
  ir::DimBindings dims;
  for (const std::string &d : g.dims)
    dims[d] = d == "N" ? rows : 3;
  const auto batchnorms = std::count_if(g.values.begin(), g.values.end(), [](const ir::Value &v) {
    return v.is_op() && v.op == ir::OpKind::BatchNorm;
  });
  for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
    CheckResult r = check_mode(g, mode, dims, seed, mode == ir::Mode::Train && batchnorms > 1);
    if (r.verdict != Verdict::Ok)
      return r;
  }
  return {};
}

} // namespace kfuse::testing
