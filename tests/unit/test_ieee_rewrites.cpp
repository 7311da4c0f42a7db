// The rewrites keep IEEE's and PyTorch's special values and order folds of scaled statistics so
// they do not cancel: each case is a pipeline the planner once changed the result of.
#include "compiler/codegen/program.h"
#include "compiler/dsl/parser.h"
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"
#include "compiler/plan/agreement.h"
#include "compiler/plan/planner.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

using namespace kfuse;
using ir::Mode;

namespace {

ir::Graph parse_text(const std::string &text) {
  dsl::SourceFile src("test.kf", text);
  dsl::Diagnostics diags(src);
  return dsl::parse_kf(src, diags);
}

// The first output of `g`, of the rewritten graph and of its plan, on `tensors`.
struct Outputs {
  std::vector<double> file, rewritten, planned;
};

Outputs outputs(const ir::Graph &g, Mode mode, const ir::DimBindings &dims,
                const ir::TensorMap &tensors) {
  plan::Plan p = plan::make_plan(g, mode);
  Outputs o;
  o.file = plan::run_graph(g, mode, dims, tensors).outputs.at(0).data;
  o.rewritten = plan::run_graph(p.graph, mode, dims, tensors).outputs.at(0).data;
  o.planned = plan::run_plan(p, dims, tensors).outputs.at(0).data;
  return o;
}

} // namespace

TEST_CASE("ieee: x * 0 keeps the sign of its zero through the folds") {
  // fold_affine made x * 0 the map x * 0 + 0, which is +0 for a negative x: 1 / (x * 0) came out
  // +inf where PyTorch gives -inf. A per-feature zero (a param) and a chain of maps alike.
  ir::Graph g = parse_text(R"(pipeline signed_zero {
  dim N
  input  x: f32[N, 3]
  param  c: f32[3]
  param  d: f32[3]
  z = constant(value=0, dtype=f32)
  return reciprocal(mul(x, z)), reciprocal(mul(mul(x, c), d)), reciprocal(div(x, d))
}
)");
  const double inf = std::numeric_limits<double>::infinity();
  const ir::DimBindings dims{{"N", 2}};
  ir::TensorMap t = ir::random_tensors(g, dims, 3);
  t.at("x").data = {-1.5, 2, -0.0, 0.0, -3, 4};
  t.at("c").data = {0, 0, 1};
  t.at("d").data = {-1, inf, -inf};
  for (Mode mode : {Mode::Train, Mode::Eval}) {
    plan::Plan p = plan::make_plan(g, mode);
    plan::RunResult file = plan::run_graph(g, mode, dims, t);
    plan::RunResult planned = plan::run_plan(p, dims, t);
    REQUIRE(file.outputs.size() == 3);
    CHECK(file.outputs[0].data[0] == -inf);
    for (size_t o = 0; o < 3; ++o)
      for (size_t i = 0; i < file.outputs[o].data.size(); ++i) {
        INFO("output ", o, " element ", i);
        double want = file.outputs[o].data[i], got = planned.outputs[o].data[i];
        CHECK((want == got || (std::isnan(want) && std::isnan(got))));
        CHECK(std::signbit(want) == std::signbit(got));
      }
    CHECK(plan::first_failure(plan::check_planner(g, mode, dims, 3, passes::pipeline(),
                                                  [&](ir::TensorMap &m) { m = t; }),
                              1e-9)
              .error == 0);
  }
}

TEST_CASE("ieee: train-mode batchnorm of a scaled constant column gives exactly its bias") {
  // Folded as y * (c * alpha) + (0 - mean) * alpha, the two terms cancelled: off by 6.5e-7 at
  // c = 1e8, 6.5e-3 at 1e12 and 1.2e3 at 1e20. Centred on the mean of y first, the map
  // computes (y - mean) * (c * alpha) + b, exactly b on a constant column.
  ir::Graph g = parse_text(R"(pipeline scaled_constant {
  dim N
  input  h: f32[N, 2]
  param  c: f32[2]
  param  w: f32[2]
  param  b: f32[2]
  state  rm: f32[2]
  state  rv: f32[2]
  return batchnorm(add(mul(h, c), w), w, b, rm, rv)
}
)");
  const ir::DimBindings dims{{"N", 5}};
  for (double c : {1e8, 1e12, 1e20}) {
    INFO("c = ", c);
    ir::TensorMap t = ir::random_tensors(g, dims, 1);
    for (size_t i = 0; i < 10; i += 2)
      t.at("h").data[i] = 0.75; // column 0 constant, column 1 random
    t.at("c").data = {c, c};
    Outputs o = outputs(g, Mode::Train, dims, t);
    for (size_t i = 0; i < 10; i += 2) {
      CHECK(o.file[i] == t.at("b").data[0]);
      CHECK(o.rewritten[i] == t.at("b").data[0]);
      CHECK(o.planned[i] == t.at("b").data[0]);
    }
    CHECK(plan::first_failure(plan::check_planner(g, Mode::Train, dims, 1, passes::pipeline(),
                                                  [&](ir::TensorMap &m) { m = t; }),
                              1e-9)
              .error <= 1e-9);
  }
}

TEST_CASE("ieee: a non-finite vector the statistics rewrite drops still makes its column NaN") {
  // col_var(col_affine(y, a, b)) = col_var(y) * a^2 drops b, and the centred batchnorm map of
  // y * a + b drops b: an infinite or NaN b made its column NaN in the file and finite in the
  // plan. A variance over one row (correction=1) is such a NaN vector.
  ir::Graph g = parse_text(R"(pipeline dropped_vector {
  dim N
  input  x: f32[N, 4]
  param  a: f32[4]
  param  b: f32[4]
  param  w: f32[4]
  state  rm: f32[4]
  state  rv: f32[4]
  return col_var(add(x, var(x, dim=0, correction=1))), col_var(add(mul(x, a), b)),
         batchnorm(add(mul(x, a), b), w, w, rm, rv)
}
)");
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t rows : {1, 3}) {
    const ir::DimBindings dims{{"N", rows}};
    ir::TensorMap t = ir::random_tensors(g, dims, 5);
    t.at("a").data = {inf, 2, 0.5, -1};
    t.at("b").data = {1, -inf, nan, -0.0};
    for (Mode mode : {Mode::Train, Mode::Eval}) {
      if (rows == 1 && mode == Mode::Train)
        continue; // a train-mode batchnorm needs two rows, as PyTorch's does
      INFO("rows ", rows, ", ", ir::mode_name(mode));
      plan::Plan p = plan::make_plan(g, mode);
      plan::RunResult file = plan::run_graph(g, mode, dims, t);
      plan::RunResult planned = plan::run_plan(p, dims, t);
      REQUIRE(file.outputs.size() == 3);
      for (size_t o = 0; o < 3; ++o)
        for (size_t i = 0; i < file.outputs[o].data.size(); ++i) {
          INFO("output ", o, " element ", i);
          const double want = file.outputs[o].data[i], got = planned.outputs[o].data[i];
          CHECK(std::isnan(want) == std::isnan(got));
          if (o == 1 && i < 3)
            CHECK(std::isnan(want)); // columns 0-2 have a non-finite a or b
        }
      CHECK(plan::disagreement(file, planned) <= 1e-9);
    }
  }
}

TEST_CASE("ieee: a constant -0 is -0 in the generated source") {
  // "float(-0)" negates the integer 0 and is +0.
  ir::Graph g = parse_text(R"(pipeline negative_zero {
  dim N
  input  x: f32[N, 3]
  return reciprocal(mul(x, constant(value=-0, dtype=f32)))
}
)");
  const std::string source = codegen::generate(plan::make_plan(g, Mode::Eval)).source;
  CHECK(source.find("-0.0f") != std::string::npos);
  CHECK(source.find("float(-0)") == std::string::npos);
}

namespace {

// x * c as x * c + 0, the fold that turned 1 / (x * 0) from -inf into +inf.
ir::Graph mul_plus_zero(const ir::Graph &g, Mode) {
  return passes::Rewriter(g, "mul_plus_zero").run([](passes::Rewriter &r, ir::ValueId old) {
    const ir::Value &v = r.old_graph()[old];
    if (v.op != ir::OpKind::Mul)
      return ir::ValueId{-1};
    return r.op(ir::OpKind::Add, {r.op(ir::OpKind::Mul, {r.map(v.args[0]), r.map(v.args[1])}),
                                  r.constant(0, ir::DType::F32)});
  });
}

} // namespace

TEST_CASE("ieee: the proof's special values catch a fold that loses a zero's sign") {
  ir::Graph g = parse_text(R"(pipeline lost_sign {
  dim N
  input  x: f32[N, 4]
  param  c: f32[4]
  return reciprocal(mul(x, c))
}
)");
  const std::vector<passes::Pass> broken = {{"mul_plus_zero", mul_plus_zero}};
  const ir::DimBindings dims{{"N", 8}};
  int caught = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    // On normal random data alone the broken pass is exact.
    ir::TensorMap t = ir::random_tensors(g, dims, seed);
    CHECK(plan::disagreement(plan::run_graph(g, Mode::Eval, dims, t),
                             plan::run_graph(mul_plus_zero(g, Mode::Eval), Mode::Eval, dims, t)) ==
          0);
    caught +=
        !(plan::first_failure(plan::check_planner(g, Mode::Eval, dims, seed, broken), 1e-9).error <=
          1e-9);
    CHECK(plan::first_failure(plan::check_planner(g, Mode::Eval, dims, seed, passes::pipeline()),
                              1e-9)
              .error <= 1e-9);
  }
  CHECK(caught > 0);
}

TEST_CASE("ieee: a reduction over an axis of extent 1 is its element, sums plus +0") {
  // sum, mean and logsumexp of one element start from +0, as PyTorch's do: -0 gives +0 and
  // 1 / it +inf; max and min give the element itself, -0 included. The chain after the first
  // reduction needs no kernel of its own.
  ir::Graph g = parse_text(R"(pipeline one_element {
  dim N
  input  x: f32[N, 1]
  s = sum(x, dim=1, keepdim=true)
  m = max(x, dim=-1, keepdim=true)
  a = mean(m, dim=1, keepdim=true)
  l = logsumexp(a, dim=1, keepdim=true)
  return reciprocal(s), reciprocal(m), reciprocal(l)
}
)");
  const double inf = std::numeric_limits<double>::infinity();
  const ir::DimBindings dims{{"N", 5}};
  ir::TensorMap t = ir::random_tensors(g, dims, 3);
  t.at("x").data = {-0.0, 0.0, -2, inf, std::nan("")};
  plan::Plan p = plan::make_plan(g, Mode::Eval);
  for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(p.graph.values.size()); ++id)
    if (p.graph[id].is_op())
      CHECK(ir::op_info(p.graph[id].op).cls != ir::OpClass::Reduce);
  const std::vector<std::vector<double>> want = {{inf, inf, -0.5, 0, std::nan("")},
                                                 {-inf, inf, -0.5, 0, std::nan("")},
                                                 {inf, inf, -0.5, 0, std::nan("")}};
  for (size_t o = 0; o < want.size(); ++o) {
    const std::vector<double> got = plan::run_plan(p, dims, t).outputs.at(o).data,
                              file = plan::run_graph(g, Mode::Eval, dims, t).outputs.at(o).data;
    for (size_t i = 0; i < want[o].size(); ++i) {
      CHECK(std::isnan(got[i]) == std::isnan(want[o][i]));
      CHECK(std::isnan(file[i]) == std::isnan(want[o][i]));
      if (!std::isnan(want[o][i])) {
        CHECK(got[i] == want[o][i]);
        CHECK(file[i] == want[o][i]);
      }
    }
  }
}
