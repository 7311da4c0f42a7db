#include "compiler/ir/infer.h"
#include "compiler/ir/verifier.h"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

using namespace kfuse;
using ir::Dim;
using ir::DType;
using ir::OpKind;
using ir::ValueKind;

namespace {

ir::TensorType f32(std::vector<Dim> shape) { return {DType::F32, std::move(shape)}; }

// x(%0) w(%1) rm(%2) rv(%3) | h = linear(x, w) (%4), bn = batchnorm(h, rm, rv) (%5),
// s = softmax(bn, dim=1) (%6) | return s. Built in code: no source locations.
ir::Graph base() {
  ir::GraphBuilder b("p", {"N"});
  Dim n = Dim::symbol("N"), c = Dim::constant(16);
  ir::ValueId x = b.declare(ValueKind::Input, "x", f32({n, c}));
  ir::ValueId w = b.declare(ValueKind::Param, "w", f32({c, c}));
  ir::ValueId rm = b.declare(ValueKind::State, "rm", f32({c}));
  ir::ValueId rv = b.declare(ValueKind::State, "rv", f32({c}));
  ir::ValueId h = b.op(OpKind::Linear, {x, w}, {}, "h");
  ir::ValueId bn = b.op(OpKind::BatchNorm, {h, rm, rv}, {}, "bn");
  b.add_output(b.op(OpKind::Softmax, {bn}, {{"dim", {1, {}}}}, "s"));
  return b.finish();
}

// verify() fails on `g` with `message`, naming value `value`.
void check_fails(const ir::Graph &g, ir::ValueId value, const std::string &message) {
  try {
    ir::verify(g);
    FAIL("verified: " << message);
  } catch (const ir::VerifyError &e) {
    CHECK(e.value == value);
    CHECK(std::string(e.what()) == message);
  }
}

// A base graph with one change.
ir::Graph changed(const std::function<void(ir::Graph &)> &change) {
  ir::Graph g = base();
  change(g);
  return g;
}

} // namespace

TEST_CASE("verifier: a graph built in code verifies") { CHECK_NOTHROW(ir::verify(base())); }

TEST_CASE("verifier: arguments precede their users") {
  check_fails(changed([](ir::Graph &g) {
                g.values[4].args = {0, 5};
              }),
              4, "'h' (%4, linear): argument %5 does not precede it");
  check_fails(changed([](ir::Graph &g) {
                g.values[4].args = {0, -1};
              }),
              4, "'h' (%4, linear): argument %-1 does not precede it");
}

TEST_CASE("verifier: recorded types are the inferred types") {
  check_fails(changed([](ir::Graph &g) {
                g.values[4].type = f32({Dim::symbol("N"), Dim::constant(8)});
              }),
              4,
              "'h' (%4, linear): its type is recorded as f32[N, 8] but its arguments give "
              "f32[N, 16]");
  check_fails(changed([](ir::Graph &g) {
                g.values[1].type = f32({Dim::constant(16), Dim::constant(8)});
              }),
              4,
              "'h' (%4, linear): dims cannot unify in linear: the inner dim is 16 in the input "
              "f32[N, 16] but 8 in argument 2 f32[16, 8]");
}

TEST_CASE("verifier: attributes are complete and of the right kind") {
  check_fails(changed([](ir::Graph &g) { g.values[5].attrs.erase("eps"); }), 5,
              "'bn' (%5, batchnorm): the attribute 'eps' is missing");
  check_fails(changed([](ir::Graph &g) {
                g.values[5].attrs["gamma"] = {1, {}};
              }),
              5, "'bn' (%5, batchnorm): batchnorm has no attribute 'gamma'");
  check_fails(changed([](ir::Graph &g) {
                g.values[5].attrs["eps"] = {std::numeric_limits<double>::infinity(), {}};
              }),
              5, "'bn' (%5, batchnorm): attribute 'eps' must be a number > 0, got inf");
  check_fails(changed([](ir::Graph &g) {
                g.values[5].attrs["momentum"] = {0, "N"};
              }),
              5, "'bn' (%5, batchnorm): attribute 'momentum' must be a number in [0, 1], got 'N'");
  check_fails(changed([](ir::Graph &g) {
                g.values[6].attrs["dim"] = {1.5, {}};
              }),
              6,
              "'s' (%6, softmax): attribute 'dim' must be an integer in "
              "[-2147483647, 2147483647], got 1.5");
  check_fails(changed([](ir::Graph &g) {
                g.values[5].attrs["eps"] = {0, {}};
              }),
              5, "'bn' (%5, batchnorm): attribute 'eps' must be a number > 0, got 0");
  check_fails(changed([](ir::Graph &g) {
                g.values[5].attrs["momentum"] = {1.5, {}};
              }),
              5, "'bn' (%5, batchnorm): attribute 'momentum' must be a number in [0, 1], got 1.5");
}

TEST_CASE("verifier: choices, optional bounds and constraints between attributes") {
  ir::GraphBuilder b("p", {"N"});
  ir::ValueId x = b.declare(ValueKind::Input, "x", f32({Dim::symbol("N"), Dim::constant(4)}));
  b.add_output(b.op(OpKind::Gelu, {x}, {{"approximate", {0, "tanh"}}}));
  b.add_output(b.op(OpKind::Clamp, {x}, {{"max", {2, {}}}}));
  b.add_output(b.op(OpKind::Hardtanh, {x}));
  const ir::Graph good = b.finish();
  ir::verify(good);
  auto with = [&](ir::ValueId id, const std::string &key, ir::AttrValue a) {
    ir::Graph g = good;
    g.values[static_cast<size_t>(id)].attrs[key] = a;
    return g;
  };
  check_fails(with(1, "approximate", {0, "fast"}), 1,
              "%1 (gelu): attribute 'approximate' must be \"none\" or \"tanh\", got \"fast\"");
  check_fails(with(2, "max", {-std::numeric_limits<double>::infinity(), {}}), 2,
              "%2 (clamp): attribute 'max' must be a number, got -inf");
  check_fails(with(2, "max", {std::numeric_limits<double>::infinity(), {}}), 2,
              "%2 (clamp): clamp needs at least one of the attributes 'min' and 'max'");
  check_fails(with(3, "min_val", {1, {}}), 3,
              "%3 (hardtanh): hardtanh needs min_val < max_val (as torch.nn.Hardtanh), got "
              "min_val=1 and max_val=1");
  CHECK_THROWS_WITH_AS(ir::GraphBuilder("q").op(OpKind::Clamp, {}), doctest::Contains("clamp"),
                       ir::TypeError);
}

TEST_CASE("verifier: Extent and DType attributes") {
  ir::GraphBuilder b("p", {"N"});
  ir::ValueId x = b.declare(ValueKind::Input, "x", f32({Dim::symbol("N"), Dim::constant(4)}));
  ir::ValueId rm = b.declare(ValueKind::State, "rm", f32({Dim::constant(4)}));
  ir::ValueId rv = b.declare(ValueKind::State, "rv", f32({Dim::constant(4)}));
  ir::ValueId m = b.op(OpKind::ColMean, {x});
  ir::ValueId v = b.op(OpKind::ColVar, {x});
  b.op(OpKind::BnUpdate, {rm, rv, m, v},
       {{"momentum", {0.1, {}}}, {"count", ir::AttrValue::extent(Dim::symbol("N"))}});
  b.add_output(b.op(OpKind::Constant, {}, {{"value", {1, {}}}, {"dtype", {0, "bf16"}}}));
  const ir::Graph good = b.finish();
  REQUIRE_NOTHROW(ir::verify(good));

  auto with = [&](ir::ValueId id, const std::string &key, ir::AttrValue a) {
    ir::Graph g = good;
    g.values[static_cast<size_t>(id)].attrs[key] = a;
    return g;
  };
  auto extent = [](Dim d) { return ir::AttrValue::extent(std::move(d)); };
  CHECK_NOTHROW(ir::verify(with(5, "count", extent(Dim::constant(64)))));
  CHECK_NOTHROW(
      ir::verify(with(5, "count", extent(Dim::product({Dim::constant(4), Dim::symbol("N")})))));
  check_fails(with(5, "count", extent(Dim::symbol("M"))), 5,
              "%5 (bn_update): attribute 'count' has the extent M, which is not a declared dim, "
              "an integer in [1, 2147483647] or a product of them");
  check_fails(with(5, "count", extent(Dim::product({Dim::symbol("N"), Dim::symbol("M")}))), 5,
              "%5 (bn_update): attribute 'count' has the extent M*N, which is not a declared "
              "dim, an integer in [1, 2147483647] or a product of them");
  check_fails(with(5, "count", extent(Dim::constant(0))), 5,
              "%5 (bn_update): attribute 'count' must be in [1, 2147483647], got 0");
  check_fails(with(5, "count", {64, {}}), 5,
              "%5 (bn_update): attribute 'count' must be a positive integer, a dim name or a "
              "product of them, got 64");
  check_fails(
      with(6, "dtype", {0, "f64"}), 6,
      "%6 (constant): attribute 'dtype' must be an element type (f32, f16 or bf16), got 'f64'");
}

TEST_CASE("verifier: types have rank 1 to 4 and declared, bounded extents") {
  check_fails(changed([](ir::Graph &g) { g.values[0].type.shape[0] = Dim::symbol("M"); }), 0,
              "input 'x' (%0): type f32[M, 16] has an extent that is not a declared dim or an "
              "integer in [1, 2147483647]");
  check_fails(changed([](ir::Graph &g) { g.values[2].type = f32({Dim::constant(0)}); }), 2,
              "state 'rm' (%2): type f32[0] has an extent that is not a declared dim or an "
              "integer in [1, 2147483647]");
  check_fails(
      changed([](ir::Graph &g) { g.values[2].type = f32({Dim::constant(ir::kMaxExtent + 1)}); }), 2,
      "state 'rm' (%2): type f32[2147483648] has an extent that is not a declared dim "
      "or an integer in [1, 2147483647]");
  check_fails(changed([](ir::Graph &g) {
                auto &s = g.values[0].type.shape;
                s.insert(s.begin(), 3, Dim::constant(2));
              }),
              0, "input 'x' (%0): type f32[2, 2, 2, N, 16] has rank 5; tensors have rank 1 to 4");
  check_fails(changed([](ir::Graph &g) { g.values[3].type.shape.clear(); }), 3,
              "state 'rv' (%3): type f32[] has rank 0; tensors have rank 1 to 4");
  // A product extent is an op's (a reshape's [B*T, 16]), never a declaration's.
  check_fails(changed([](ir::Graph &g) {
                g.values[0].type.shape[0] = Dim::product({Dim::symbol("N"), Dim::symbol("N")});
              }),
              0,
              "input 'x' (%0): type f32[N*N, 16] has an extent that is not a declared dim or an "
              "integer in [1, 2147483647]");
}

TEST_CASE("verifier: names of the pipeline, dims and declarations") {
  check_fails(changed([](ir::Graph &g) { g.name = "my pipeline"; }), -1,
              "pipeline name 'my pipeline' is not a .kf name");
  check_fails(changed([](ir::Graph &g) { g.dims.push_back("N"); }), -1,
              "dim 'N' is declared twice");
  check_fails(changed([](ir::Graph &g) { g.dims.push_back("input"); }), -1,
              "dim 'input' is not a .kf name");
  check_fails(changed([](ir::Graph &g) { g.values[1].name = "x"; }), 1,
              "param 'x' (%1): the name is already declared");
  check_fails(changed([](ir::Graph &g) { g.values[1].name = "N"; }), 1,
              "param 'N' (%1): the name is already declared");
  check_fails(changed([](ir::Graph &g) { g.values[1].name = "2w"; }), 1,
              "param '2w' (%1): the name is not a .kf name");
  check_fails(changed([](ir::Graph &g) { g.values[1].args = {0}; }), 1,
              "param 'w' (%1): a declaration has no arguments or attributes");
}

TEST_CASE("verifier: outputs exist and are values") {
  check_fails(changed([](ir::Graph &g) { g.outputs.clear(); }), -1, "pipeline 'p' has no outputs");
  check_fails(changed([](ir::Graph &g) { g.outputs = {7}; }), -1, "output %7 does not exist");

  ir::GraphBuilder b("p");
  ir::ValueId rm = b.declare(ValueKind::State, "rm", f32({Dim::constant(4)}));
  ir::ValueId rv = b.declare(ValueKind::State, "rv", f32({Dim::constant(4)}));
  ir::ValueId u =
      b.op(OpKind::BnUpdate, {rm, rv, rm, rv},
           {{"momentum", {0.1, {}}}, {"count", ir::AttrValue::extent(Dim::constant(8))}});
  b.add_output(u);
  check_fails(b.finish(), 2, "output %2 (bn_update) is an effect, which has no value");
}

TEST_CASE("verifier: running statistics are states, each updated at most once") {
  check_fails(changed([](ir::Graph &g) { g.values[2].kind = ValueKind::Param; }), 5,
              "'bn' (%5, batchnorm): its running_mean is param 'rm' (%2), not a state");

  ir::Graph twice = base();
  {
    ir::GraphBuilder b("p", {"N"});
    for (size_t i = 0; i < 7; ++i) {
      const ir::Value &v = twice.values[i];
      if (v.is_op())
        b.op(v.op, v.args, v.attrs, v.name);
      else
        b.declare(v.kind, v.name, v.type);
    }
    b.add_output(b.op(OpKind::BatchNorm, {6, 3, 2}, {}, "again"));
    twice = b.finish();
  }
  check_fails(twice, 7, "'again' (%7, batchnorm): it updates state 'rv', which is already updated");

  ir::GraphBuilder b("p");
  ir::ValueId p = b.declare(ValueKind::Param, "p", f32({Dim::constant(4)}));
  ir::ValueId rv = b.declare(ValueKind::State, "rv", f32({Dim::constant(4)}));
  b.op(OpKind::BnUpdate, {p, rv, p, rv},
       {{"momentum", {0.1, {}}}, {"count", ir::AttrValue::extent(Dim::constant(8))}});
  b.add_output(p);
  check_fails(b.finish(), 2, "%2 (bn_update): its running_mean is param 'p' (%0), not a state");
}

TEST_CASE("verifier: updated_args names the running statistics") {
  ir::Graph g = base();
  CHECK(ir::updated_args(g[5]) == std::vector<int>{1, 2});
  CHECK(ir::updated_args(g[4]).empty());
  CHECK(ir::updated_args(g[0]).empty());
}
