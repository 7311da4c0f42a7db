#include "compiler/ir/printer.h"

#include "compiler/dsl/parser.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/passes.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

using namespace kfuse;
using ir::Dim;
using ir::DType;
using ir::OpKind;
using ir::ValueKind;

namespace {

ir::Graph parse(const std::string &text) {
  dsl::SourceFile src("t.kf", text);
  dsl::Diagnostics diags(src);
  return dsl::parse_kf(src, diags);
}

// Values in printed order: declarations first, then ops, each in graph order.
std::vector<ir::ValueId> printed_order(const ir::Graph &g) {
  std::vector<ir::ValueId> order;
  for (bool ops : {false, true})
    for (size_t i = 0; i < g.values.size(); ++i)
      if (g.values[i].is_op() == ops)
        order.push_back(static_cast<ir::ValueId>(i));
  return order;
}

// Same ops, args, attrs, types and outputs, value for value in printed order (names of ops
// and provenance may differ).
void check_same_structure(const ir::Graph &a, const ir::Graph &b) {
  CHECK(a.name == b.name);
  CHECK(a.dims == b.dims);
  REQUIRE(a.values.size() == b.values.size());
  std::vector<ir::ValueId> oa = printed_order(a), ob = printed_order(b);
  std::vector<size_t> pa(a.values.size()), pb(b.values.size());
  for (size_t k = 0; k < oa.size(); ++k) {
    pa[static_cast<size_t>(oa[k])] = k;
    pb[static_cast<size_t>(ob[k])] = k;
  }
  for (size_t k = 0; k < oa.size(); ++k) {
    const ir::Value &va = a[oa[k]], &vb = b[ob[k]];
    INFO("value " << k << " in printed order");
    CHECK(va.kind == vb.kind);
    CHECK(va.type == vb.type);
    if (!va.is_op()) {
      CHECK(va.name == vb.name);
      continue;
    }
    CHECK(va.op == vb.op);
    CHECK(va.attrs == vb.attrs);
    REQUIRE(va.args.size() == vb.args.size());
    for (size_t i = 0; i < va.args.size(); ++i)
      CHECK(pa[static_cast<size_t>(va.args[i])] == pb[static_cast<size_t>(vb.args[i])]);
  }
  REQUIRE(a.outputs.size() == b.outputs.size());
  for (size_t i = 0; i < a.outputs.size(); ++i)
    CHECK(pa[static_cast<size_t>(a.outputs[i])] == pb[static_cast<size_t>(b.outputs[i])]);
}

// print(parse(print(g))) == print(g), and the reparsed graph has g's structure.
void check_round_trip(const ir::Graph &g) {
  std::string text = ir::print_kf(g);
  INFO(text);
  ir::Graph again = parse(text);
  CHECK(ir::print_kf(again) == text);
  check_same_structure(g, again);
}

std::vector<std::filesystem::path> examples() {
  std::vector<std::filesystem::path> paths;
  for (const auto &entry : std::filesystem::directory_iterator(KFUSE_SOURCE_DIR "/examples"))
    if (entry.path().extension() == ".kf")
      paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  return paths;
}

ir::TensorType f32(std::vector<Dim> shape) { return {DType::F32, std::move(shape)}; }

} // namespace

TEST_CASE("printer: the canonical text of the founding chain") {
  ir::Graph g = parse(R"(pipeline gemm_bn_scale_softmax {
  dim N
  input x: f32[N, 64]
  param weight: f32[32, 64]
  param bias: f32[32]
  param bn_weight: f32[32]
  param bn_bias: f32[32]
  state running_mean: f32[32]
  state running_var: f32[32]
  param scale: f32[1]
  h = linear(x, weight, bias)
  h = batchnorm(h, bn_weight, bn_bias, running_mean, running_var)
  h = mul(scale, h)
  return softmax(h, dim=1)
})");
  CHECK(ir::print_kf(g) ==
        "pipeline gemm_bn_scale_softmax {\n"
        "  dim N\n"
        "  input  x: f32[N, 64]\n"
        "  param  weight: f32[32, 64]\n"
        "  param  bias: f32[32]\n"
        "  param  bn_weight: f32[32]\n"
        "  param  bn_bias: f32[32]\n"
        "  state  running_mean: f32[32]\n"
        "  state  running_var: f32[32]\n"
        "  param  scale: f32[1]\n"
        "  h = linear(x, weight, bias)\n"
        "  h_1 = batchnorm(h, bn_weight, bn_bias, running_mean, running_var, eps=1e-5, "
        "momentum=0.1)\n"
        "  h_2 = mul(scale, h_1)\n"
        "  t1 = softmax(h_2, dim=1)\n"
        "  return t1\n"
        "}\n");
}

TEST_CASE("printer: every example round-trips") {
  for (const auto &path : examples()) {
    INFO(path.string());
    check_round_trip(dsl::parse_kf_file(path.string()));
  }
}

TEST_CASE("printer: the planner's graphs verify and round-trip after every pass") {
  for (const auto &path : examples()) {
    ir::Graph g = dsl::parse_kf_file(path.string());
    for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
      passes::run_pipeline(g, mode, passes::pipeline(),
                           [&](const passes::Pass &pass, const ir::Graph &out) {
                             INFO(path.filename().string()
                                  << " in " << ir::mode_name(mode) << " mode after " << pass.name);
                             CHECK_NOTHROW(ir::verify(out));
                             check_round_trip(out);
                           });
    }
  }
}

TEST_CASE("printer: names are unique, stable and never capture another name") {
  ir::GraphBuilder b("p", {"N"});
  ir::ValueId x = b.declare(ValueKind::Input, "x", f32({Dim::symbol("N"), Dim::constant(4)}));
  ir::ValueId h = b.op(OpKind::Relu, {x}, {}, "h");
  ir::ValueId h2 = b.op(OpKind::Tanh, {h}, {}, "h");          // rebound: h_2 (h_1 is taken)
  ir::ValueId sum = b.op(OpKind::Add, {h, h2});               // unnamed: t2 (t1 is taken)
  ir::ValueId h1 = b.op(OpKind::Relu, {sum}, {}, "h_1");      // keeps its name
  ir::ValueId t1 = b.op(OpKind::Relu, {h1}, {}, "t1");        // keeps its name
  ir::ValueId anon = b.op(OpKind::Relu, {t1});                // t3
  ir::ValueId kw = b.op(OpKind::Relu, {anon}, {}, "return");  // a keyword: t4
  ir::ValueId bad = b.op(OpKind::Relu, {kw}, {}, "bn.scale"); // not an identifier: t5
  ir::ValueId shadow = b.op(OpKind::Relu, {bad}, {}, "x");    // a declaration's name: x_1
  ir::ValueId dim = b.op(OpKind::Relu, {shadow}, {}, "N");    // a dim's name: N_1
  b.add_output(dim);
  b.add_output(h);
  ir::Graph g = b.finish();
  REQUIRE_NOTHROW(ir::verify(g));
  CHECK(ir::printed_names(g) == std::vector<std::string>{"x", "h", "h_2", "t2", "h_1", "t1", "t3",
                                                         "t4", "t5", "x_1", "N_1"});
  CHECK(ir::print_kf(g) == "pipeline p {\n"
                           "  dim N\n"
                           "  input  x: f32[N, 4]\n"
                           "  h = relu(x)\n"
                           "  h_2 = tanh(h)\n"
                           "  t2 = add(h, h_2)\n"
                           "  h_1 = relu(t2)\n"
                           "  t1 = relu(h_1)\n"
                           "  t3 = relu(t1)\n"
                           "  t4 = relu(t3)\n"
                           "  t5 = relu(t4)\n"
                           "  x_1 = relu(t5)\n"
                           "  N_1 = relu(x_1)\n"
                           "  return N_1, h\n"
                           "}\n");
  check_round_trip(g);
}

TEST_CASE("printer: a name too long for a suffix becomes a temporary") {
  std::string longest(ir::kMaxNameLength, 'a');
  ir::GraphBuilder b("p");
  ir::ValueId x = b.declare(ValueKind::Input, "x", f32({Dim::constant(4)}));
  ir::ValueId a = b.op(OpKind::Relu, {x}, {}, longest);
  b.add_output(b.op(OpKind::Relu, {a}, {}, longest));
  ir::Graph g = b.finish();
  CHECK(ir::printed_names(g) == std::vector<std::string>{"x", longest, "t1"});
  check_round_trip(g);
}

TEST_CASE("printer: every attribute kind, effects as bare calls, declarations hoisted") {
  ir::GraphBuilder b("lowered", {"N", "C"});
  ir::ValueId rm = b.declare(ValueKind::State, "rm", f32({Dim::symbol("C")}));
  ir::ValueId rv = b.declare(ValueKind::State, "rv", f32({Dim::symbol("C")}));
  ir::ValueId c = b.op(OpKind::Constant, {}, {{"value", {-2.5e-7, {}}}, {"dtype", {0, "f32"}}});
  // A declaration after an op: the printer puts it with the others.
  ir::ValueId y = b.declare(ValueKind::Input, "y", f32({Dim::symbol("N"), Dim::symbol("C")}));
  ir::ValueId m = b.op(OpKind::ColMean, {y}, {}, "m");
  ir::ValueId v = b.op(OpKind::ColVar, {y}, {}, "v");
  b.op(OpKind::BnUpdate, {rm, rv, m, v},
       {{"momentum", {0.25, {}}}, {"count", ir::AttrValue::extent(Dim::symbol("N"))}});
  ir::ValueId s = b.op(OpKind::LogSoftmax, {y}, {{"dim", {-1, {}}}});
  ir::ValueId z = b.op(OpKind::ColAffine, {s, c, c}, {}, "z");
  b.add_output(z);
  ir::Graph g = b.finish();
  REQUIRE_NOTHROW(ir::verify(g));
  CHECK(ir::print_kf(g) == "pipeline lowered {\n"
                           "  dim N, C\n"
                           "  state  rm: f32[C]\n"
                           "  state  rv: f32[C]\n"
                           "  input  y: f32[N, C]\n"
                           "  t1 = constant(value=-2.5e-7, dtype=f32)\n"
                           "  m = col_mean(y)\n"
                           "  v = col_var(y)\n"
                           "  bn_update(rm, rv, m, v, momentum=0.25, count=N)\n"
                           "  t2 = log_softmax(y, dim=-1)\n"
                           "  z = col_affine(t2, t1, t1)\n"
                           "  return z\n"
                           "}\n");
  check_round_trip(g);

  g.values[6].attrs["count"] = ir::AttrValue::extent(Dim::constant(64));
  CHECK(ir::print_kf(g).find("count=64)") != std::string::npos);
  check_round_trip(g);
  g.values[6].attrs["count"] =
      ir::AttrValue::extent(Dim::product({Dim::constant(2), Dim::symbol("N"), Dim::symbol("C")}));
  CHECK(ir::print_kf(g).find("count=2*C*N)") != std::string::npos);
  check_round_trip(g);
}

TEST_CASE("printer: format_number is the shortest text that reads back exactly") {
  CHECK(ir::format_number(1e-5) == "1e-5");
  CHECK(ir::format_number(0.1) == "0.1");
  CHECK(ir::format_number(1) == "1");
  CHECK(ir::format_number(8192) == "8192");
  CHECK(ir::format_number(-0.5) == "-0.5");
  CHECK(ir::format_number(1e16) == "1e16");
  CHECK(ir::format_number(1.0 / 3) == "0.3333333333333333");
  for (double v : {1e-5, 0.1, 1.0 / 3, 2.0 / 3 * 1e-300, 1.7976931348623157e308, 5e-324,
                   123456789.125, -0.0}) {
    INFO(v);
    ir::GraphBuilder b("p");
    b.add_output(b.op(OpKind::Constant, {}, {{"value", {v, {}}}, {"dtype", {0, "f32"}}}));
    ir::Graph g = b.finish();
    ir::Graph again = parse(ir::print_kf(g));
    CHECK(again[0].attr("value") == v);
    CHECK(std::signbit(again[0].attr("value")) == std::signbit(v));
  }
}
