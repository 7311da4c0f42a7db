// Column values and matrix values (plan::is_column_value): a vector viewed as [1, F], put
// through any pointwise op and viewed back, is a column value to the partitioner, the plan
// validator and codegen alike, so every plan the validator accepts is one codegen emits.
#include "compiler/codegen/program.h"
#include "compiler/dsl/parser.h"
#include "compiler/plan/agreement.h"
#include "compiler/plan/planner.h"
#include "compiler/plan/validate_plan.h"
#include "compiler/target.h"
#include "tests/support/run_tool.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <filesystem>
#include <fstream>

using namespace kfuse;

namespace {

ir::Graph parse_text(const std::string &text) {
  dsl::SourceFile src("test.kf", text);
  dsl::Diagnostics diags(src);
  return dsl::parse_kf(src, diags);
}

// Plans `text` fused and unfused in both modes (make_plan validates), emits every plan, and
// proves the fused plan against the interpreter at N=3.
void plan_prove_emit(const std::string &text) {
  INFO(text);
  const ir::Graph g = parse_text(text);
  for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
    INFO("mode ", ir::mode_name(mode));
    for (bool fuse : {true, false}) {
      INFO("fuse ", fuse);
      plan::Plan p;
      REQUIRE_NOTHROW(p = plan::make_plan(g, mode, {}, fuse));
      CHECK_NOTHROW(codegen::generate(p, Target{"sm_90a", Precision::FP32}));
    }
    const plan::StageError worst =
        plan::first_failure(plan::check_planner(g, mode, {{"N", 3}}, 7, passes::pipeline()), 1e-9);
    INFO("worst stage ", worst.stage);
    CHECK(worst.error <= 1e-9);
  }
}

// `op` applied to the [1, F] views of its operands (vectors of F = 4), viewed back as [F]. An
// optional bound (clamp's) is set: one at least must be.
std::string through_op(const ir::OpInfo &op, const std::string &a, const std::string &b) {
  std::string args = fmt::format("unsqueeze({}, dim=0)", a);
  if (op.min_args == 2)
    args += fmt::format(", unsqueeze({}, dim=0)", b);
  for (const ir::AttrSpec &spec : op.attrs)
    if (spec.kind == ir::AttrKind::OptNumber) {
      args += fmt::format(", {}=0", spec.name);
      break;
    }
  return fmt::format("squeeze({}({}), dim=0)", op.name, args);
}

} // namespace

TEST_CASE("plan columns: a column statistic through a view and an op meets more column math") {
  plan_prove_emit(R"(pipeline p {
  dim N
  input x: f32[N, 4]
  m = col_mean(x)
  u = squeeze(silu(unsqueeze(m, dim=0)), dim=0)
  return mul(x, add(m, u))
}
)");
}

TEST_CASE("plan columns: a viewed parameter read by a row kernel's prologue") {
  plan_prove_emit(R"(pipeline p {
  dim N
  input x: f32[N, 4]
  param w: f32[4]
  v = squeeze(neg(unsqueeze(w, dim=0)), dim=0)
  return layernorm(sub(v, mul(v, x)))
}
)");
}

TEST_CASE("plan columns: a viewed parameter scales a train-mode batchnorm") {
  plan_prove_emit(R"(pipeline p {
  dim N
  input x: f32[N, 4]
  param w: f32[4]
  state rm: f32[4]
  state rv: f32[4]
  return mul(batchnorm(x, rm, rv), squeeze(silu(unsqueeze(w, dim=0)), dim=0))
}
)");
}

TEST_CASE("plan columns: a column value computed in a column kernel is stored in its [1, F] "
          "shape") {
  const std::string text = R"(pipeline p {
  dim N
  input x: f32[N, 4]
  m = col_mean(x)
  return silu(unsqueeze(m, dim=0)), mul(x, squeeze(silu(unsqueeze(m, dim=0)), dim=0))
}
)";
  plan_prove_emit(text);
  const plan::Plan p = plan::make_plan(parse_text(text), ir::Mode::Train);
  const ir::ValueId out = p.graph.outputs[0];
  const codegen::Program prog = codegen::generate(p, Target{"sm_90a", Precision::FP32});
  // The column kernel stores every feature of the [1, 4] value, not only the first.
  CHECK(prog.source.find(fmt::format("if (col == 0)")) == std::string::npos);
  CHECK(plan::is_column_value(p.graph[out].type));
}

TEST_CASE("plan columns: views of column vectors work through every pointwise op") {
  for (ir::OpClass cls : {ir::OpClass::Unary, ir::OpClass::Binary, ir::OpClass::Random})
    for (ir::OpKind kind : ir::ops_of_class(cls)) {
      const ir::OpInfo &op = ir::op_info(kind);
      plan_prove_emit(fmt::format(R"(pipeline p_{0} {{
  dim N
  input x: f32[N, 4]
  param w: f32[4]
  state rm: f32[4]
  state rv: f32[4]
  m = col_mean(x)
  u = {1}
  v = {2}
  return mul(x, add(m, u)), layernorm(sub(v, mul(v, x))), mul(batchnorm(x, rm, rv), v), u
}}
)",
                                  op.name, through_op(op, "m", "w"), through_op(op, "w", "m")));
    }
}

TEST_CASE("plan columns: the validator refuses a column value computed from a matrix value") {
  plan::Plan p = plan::make_plan(parse_text(R"(pipeline p {
  dim N
  input x: f32[N, 4]
  param w: f32[4]
  return relu(add(x, w))
}
)"),
                                 ir::Mode::Eval);
  REQUIRE(p.kernels.size() == 1);
  // Declare the relu a [1, 4] value: a column value reading the [N, 4] matrix before it.
  ir::ValueId relu = p.graph.outputs[0];
  REQUIRE(p.graph[relu].op == ir::OpKind::Relu);
  p.graph.values[static_cast<size_t>(relu)].type.shape[0] = ir::Dim::constant(1);
  CHECK_THROWS_WITH_AS(
      plan::validate_plan(p),
      fmt::format("internal error: invalid plan for 'p': kernel k0_elementwise computes column "
                  "value {} from matrix value {}",
                  ir::describe(p.graph, relu), ir::describe(p.graph, p.graph[relu].args[0]))
          .c_str(),
      plan::PlanError);
}

TEST_CASE("plan columns: plan --prove emits the CUDA of every plan it proves") {
  const std::string dir = "/tmp/kfuse-plan-columns";
  std::filesystem::create_directories(dir);
  auto prove = [&](const std::string &name, const std::string &body) {
    const std::string kf = dir + "/" + name + ".kf";
    std::ofstream(kf) << "pipeline " << name
                      << " {\n  dim N\n  input x: f32[N, 4]\n  param w: f32[4]\n  param W: "
                         "f32[3, 4]\n  state rm: f32[4]\n  state rv: f32[4]\n  "
                      << body << "\n}\n";
    return testing::run_kfuse("plan --prove " + kf);
  };
  const testing::ToolRun r =
      prove("viewed", "return mul(batchnorm(x, rm, rv), squeeze(silu(unsqueeze(w, dim=0)), "
                      "dim=0))");
  INFO(r.out, r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("train cuda         emitted: fused 3, unfused 4 kernels\n") !=
        std::string::npos);
  CHECK(r.out.find("eval  cuda         emitted: fused 1, unfused 2 kernels\n") !=
        std::string::npos);
  // What the GPU path does not run is said, located, and fails nothing.
  const testing::ToolRun gemm = prove("gemm_of_view", "return linear(unsqueeze(w, dim=0), W)");
  INFO(gemm.out, gemm.err);
  CHECK(gemm.exit_code == 0);
  CHECK(gemm.out.find("cuda               not emitted: " + dir +
                      "/gemm_of_view.kf:8:10: error: linear of f32[1, 4], a view of f32[4], is "
                      "not supported on the GPU") != std::string::npos);
}
