// Reverse mode (compiler/ir/grad.h): each op's vector-Jacobian product against central finite
// differences of the fp64 interpreter, the backward graph's inputs and outputs, the cost rule,
// and the errors of ops without a rule.
#include "compiler/ir/grad.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "compiler/plan/planner.h"
#include "compiler/plan/validate_plan.h"
#include "tests/support/grad_check.h"
#include "tests/support/kf_text.h"
#include "tests/support/run_tool.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <fmt/format.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

using namespace kfuse;
using ir::Mode;

namespace {

// Relative error of fp64 central differences (step 1e-6): truncation ~1e-12, rounding
// ~1e-16 |L| / 1e-6; 1e-6 leaves room for losses of a few hundred.
constexpr double kBound = 1e-6;

ir::Graph parse(const std::string &text) { return testing::parse_kf_text(text, "grad.kf"); }

// A pipeline of x: f32[N, 6] (and what `decls` declares) returning `body`'s last line.
std::string pipeline(const std::string &decls, const std::string &body) {
  return fmt::format("pipeline p {{\n  dim N\n  input x: f32[N, 6]\n{}{}\n}}\n", decls, body);
}

void expect_gradients(const std::string &text, Mode mode, ir::DimBindings dims = {{"N", 5}}) {
  CAPTURE(text);
  CAPTURE(ir::mode_name(mode));
  ir::Graph f = parse(text);
  testing::GradReport r = testing::check_gradients(f, mode, dims, 11);
  CAPTURE(ir::print_kf(r.result.backward));
  CAPTURE(r.worst);
  CHECK(r.checked > 0);
  CHECK(r.error <= kBound);
}

void expect_unary(const std::string &call) {
  expect_gradients(pipeline("", "  return " + call), Mode::Train);
}

} // namespace

TEST_CASE("grad: pointwise unary ops against finite differences") {
  for (const char *call : {"relu(x)",
                           "leaky_relu(x, negative_slope=0.2)",
                           "gelu(x)",
                           "gelu(x, approximate=\"tanh\")",
                           "silu(x)",
                           "sigmoid(x)",
                           "tanh(x)",
                           "hardtanh(mul(x, constant(value=2, dtype=f32)))",
                           "clamp(x, min=-0.5)",
                           "clamp(x, min=-0.5, max=0.7)",
                           "clamp(x, max=0.1)",
                           "hardsigmoid(mul(x, constant(value=4, dtype=f32)))",
                           "hardswish(mul(x, constant(value=4, dtype=f32)))",
                           "mish(x)",
                           "softplus(x, beta=2)",
                           "softplus(x, beta=1, threshold=0.5)",
                           "elu(x, alpha=0.7)",
                           "selu(x)",
                           "logsigmoid(x)",
                           "softsign(x)",
                           "exp(x)",
                           "log(exp(x))",
                           "abs(x)",
                           "neg(x)",
                           "sqrt(exp(x))",
                           "rsqrt(exp(x))",
                           "square(x)",
                           "reciprocal(exp(x))",
                           "erf(x)",
                           "cast(x, dtype=f32)"})
    expect_unary(call);
}

TEST_CASE("grad: pointwise binary ops with broadcasting against finite differences") {
  // b of every shape that broadcasts against [N, 6]: [6], [1, 6], [N, 1], [1], [N, 6].
  for (const char *b : {"f32[6]", "f32[1, 6]", "f32[N, 1]", "f32[1]", "f32[N, 6]", "f32[1, 1]"})
    for (const char *op : {"add", "sub", "mul", "div", "maximum", "minimum"}) {
      std::string rhs = std::string(op) == "div" ? "exp(b)" : "b";
      expect_gradients(
          pipeline(fmt::format("  param b: {}\n", b), fmt::format("  return {}(x, {})", op, rhs)),
          Mode::Eval);
      expect_gradients(
          pipeline(fmt::format("  param b: {}\n", b), fmt::format("  return {}({}, x)", op, rhs)),
          Mode::Eval);
    }
  expect_gradients(pipeline("  param b: f32[6]\n", "  return pow(exp(x), b)"), Mode::Eval);
  // Comparisons are piecewise constant: no gradient, and none flows through them.
  ir::Graph f = parse(pipeline("  param b: f32[6]\n", "  return add(x, gt(x, b))"));
  testing::GradReport r = testing::check_gradients(f, Mode::Eval, {{"N", 4}}, 3);
  CHECK(r.error <= kBound);
  CHECK(r.result.gradients.size() == 1); // x only: b reaches the output through gt alone
}

TEST_CASE("grad check: a gradient zero in exact arithmetic whose backward holds only amplified "
          "rounding passes") {
  // p2 is broadcast over a one-column batchnorm: the column is constant, the loss does not move
  // with p2 at all, and the backward's rounding is amplified by 1/sqrt(eps) three times (the
  // batchnorm and two rmsnorms of zeros). The check allows that rounding where the finite
  // differences are zero, and only there (a wrong rule errs where they are not).
  const std::string text = "pipeline zero_gradient {\n  dim N\n  input i0: f32[N, 3]\n"
                           "  param p2: f32[1]\n  state s5: f32[1]\n  state s6: f32[1]\n"
                           "  param p9: f32[1]\n  state s13: f32[1]\n  state s14: f32[1]\n"
                           "  v1 = avg_pool1d(i0, kernel_size=2)\n"
                           "  v4 = maximum(v1, unsqueeze(p2, dim=-2))\n"
                           "  v7 = batchnorm(v4, s5, s6, eps=3e-05, momentum=0.3)\n"
                           "  v8 = rmsnorm(v7, eps=1.19209e-07)\n"
                           "  v10 = rmsnorm(v8, p9, eps=3.57628e-07)\n"
                           "  v12 = minimum(v10, mean(v10, dim=-1, keepdim=true))\n"
                           "  return batchnorm(v12, s13, s14, eps=1e-05, momentum=0.1)\n}\n";
  ir::Graph f = parse(text);
  testing::GradReport r = testing::check_gradients(f, Mode::Train, {{"N", 3}}, 91203800, 8);
  const auto p2 = std::find_if(r.result.gradients.begin(), r.result.gradients.end(),
                               [&](const auto &g) { return f[g.first].name == "p2"; });
  REQUIRE(p2 != r.result.gradients.end());
  for (double d : r.differences.at(size_t(p2 - r.result.gradients.begin())))
    CHECK(d == 0);
  CHECK(r.error <= kBound);
}

TEST_CASE("grad: GEMMs, rank 3 included") {
  expect_gradients("pipeline p {\n  dim N\n  input x: f32[N, 6]\n  param w: f32[4, 6]\n"
                   "  param b: f32[4]\n  return linear(x, w, b)\n}\n",
                   Mode::Train);
  expect_gradients("pipeline p {\n  dim N\n  input x: f32[N, 6]\n  param w: f32[6, 3]\n"
                   "  return tanh(matmul(x, w))\n}\n",
                   Mode::Train);
  expect_gradients("pipeline p {\n  dim N\n  dim T\n  input x: f32[N, T, 6]\n"
                   "  param w: f32[4, 6]\n  param b: f32[4]\n"
                   "  h = linear(x, w, b)\n  return softmax(h, dim=-1)\n}\n",
                   Mode::Train, {{"N", 2}, {"T", 3}});
}

TEST_CASE("grad: batchnorm in train mode (through the batch statistics) and in eval mode") {
  const std::string affine =
      "pipeline p {\n  dim N\n  input x: f32[N, 6]\n  param w: f32[6, 6]\n"
      "  param g: f32[6]\n  param b: f32[6]\n  state rm: f32[6]\n  state rv: f32[6]\n"
      "  h = linear(x, w)\n  h = batchnorm(h, g, b, rm, rv)\n  return softmax(h, dim=1)\n}\n";
  const std::string plain = "pipeline p {\n  dim N\n  input x: f32[N, 6]\n  state rm: f32[6]\n"
                            "  state rv: f32[6]\n  return tanh(batchnorm(x, rm, rv))\n}\n";
  for (Mode mode : {Mode::Train, Mode::Eval}) {
    expect_gradients(affine, mode);
    expect_gradients(plain, mode);
  }
  // The running statistics are states: no gradient.
  ir::GradResult r = ir::grad(parse(plain), Mode::Eval);
  REQUIRE(r.gradients.size() == 1);
  CHECK(parse(plain)[r.gradients[0].first].name == "x");
}

TEST_CASE("grad: a batchnorm's result is recomputed from the input and statistics its rule reads") {
  // The softmax's rule reads the batchnorm's result, the batchnorm's rule its input: the
  // forward saves the input (and in train mode the batch statistics), not the result too.
  const std::string text =
      "pipeline p {\n  dim N\n  input x: f32[N, 6]\n  param w: f32[6, 6]\n"
      "  param g: f32[6]\n  param b: f32[6]\n  state rm: f32[6]\n  state rv: f32[6]\n"
      "  h = linear(x, w)\n  y = batchnorm(h, g, b, rm, rv)\n  return mul(y, softmax(y, "
      "dim=1))\n}\n";
  const ir::Graph f = parse(text);
  const auto saved_names = [](const ir::GradResult &r) {
    std::vector<std::string> names;
    for (ir::ValueId id : r.saved) {
      const ir::Value &v = r.forward[id];
      if (v.type.rank() == 2)
        names.push_back(v.name.empty() ? std::string(ir::op_info(v.op).name) : v.name);
    }
    return names;
  };
  for (Mode mode : {Mode::Train, Mode::Eval}) {
    CAPTURE(mode);
    expect_gradients(text, mode);
    CHECK(saved_names(ir::grad(f, mode)) == std::vector<std::string>{"h", "softmax"});
  }
  // Where the batchnorm's rule reads neither (its input, weight and the GEMM before them
  // frozen), its result is saved: recomputing it would save its input instead.
  CHECK(saved_names(ir::grad(f, Mode::Train, {"x", "w", "g"})) ==
        std::vector<std::string>{"y", "softmax"});
}

TEST_CASE("grad: a batchnorm's result that an extremum or a comparison reaches through recomputed "
          "ops is saved, not recomputed") {
  // max's rule compares its argument with the saved maximum, and x - max(x) is exactly 0 at the
  // maximum: a result recomputed in another order than the forward's would compare unequal
  // there (no element of a slice hitting its maximum, a mask the forward did not take). Saved,
  // the backward reads the forward's own values.
  for (const char *tail : {"  return amax(relu(y), dim=1)", "  return max(y, dim=0)",
                           "  m = max(y, dim=1, keepdim=true)\n  d = sub(y, m)\n"
                           "  return mul(ge(d, mul(d, 0.5)), g)",
                           "  return maximum(y, mul(y, 0.5))"}) {
    CAPTURE(tail);
    const std::string text =
        std::string("pipeline p {\n  dim N\n  input x: f32[N, 6]\n  param g: f32[6]\n"
                    "  param b: f32[6]\n  state rm: f32[6]\n  state rv: f32[6]\n"
                    "  y = batchnorm(x, g, b, rm, rv)\n") +
        tail + "\n}\n";
    const ir::Graph f = parse(text);
    for (Mode mode : {Mode::Train, Mode::Eval}) {
      CAPTURE(mode);
      const ir::GradResult r = ir::grad(f, mode);
      CHECK(r.recomputed.empty());
      expect_gradients(text, mode);
    }
  }
  // An extremum of a saved value (the softmax's output) compares the forward's own values: the
  // result is recomputed for the product's rule.
  const std::string through_softmax =
      "pipeline p {\n  dim N\n  input x: f32[N, 6]\n  param g: f32[6]\n"
      "  param b: f32[6]\n  state rm: f32[6]\n  state rv: f32[6]\n"
      "  y = batchnorm(x, g, b, rm, rv)\n"
      "  return mul(y, amax(softmax(y, dim=1), dim=1, keepdim=true))\n}\n";
  CHECK(ir::grad(parse(through_softmax), Mode::Train).recomputed.size() == 1);
  expect_gradients(through_softmax, Mode::Train);
}

TEST_CASE("grad: row ops and feature normalizations, odd widths and rank 3") {
  for (const char *body :
       {"  return softmax(x, dim=1)", "  return softmax(x, dim=0)",
        "  return log_softmax(x, dim=1)", "  return log_softmax(x, dim=0)",
        "  return layernorm(x, lw, lb)", "  return layernorm(x)", "  return rmsnorm(x, lw)",
        "  return rmsnorm(x)", "  return instancenorm(x, eps=0.01)"})
    expect_gradients(pipeline("  param lw: f32[6]\n  param lb: f32[6]\n", body), Mode::Train);
  expect_gradients("pipeline p {\n  dim N\n  input x: f32[N, 2, 7]\n  param lw: f32[7]\n"
                   "  return layernorm(mul(x, x), lw)\n}\n",
                   Mode::Train, {{"N", 3}});
}

TEST_CASE("grad: groupnorm through each group's statistics, groups = 1 to C") {
  for (const char *groups : {"1", "2", "3", "6"})
    for (const char *args : {", lw, lb", ", lw", ""})
      expect_gradients(pipeline("  param lw: f32[6]\n  param lb: f32[6]\n",
                                fmt::format("  return groupnorm(mul(x, exp(x)){}, groups={}, "
                                            "eps=0.01)",
                                            args, groups)),
                       Mode::Train);
  // The backward is one row op for dx (PyTorch's native_group_norm_backward) and the forward
  // without affine for dweight.
  const std::string text =
      ir::print_kf(ir::grad(parse(pipeline("  param lw: f32[6]\n  param lb: f32[6]\n",
                                           "  return groupnorm(x, lw, lb, groups=3)")),
                            Mode::Train)
                       .backward);
  INFO(text);
  CHECK(text.find("groupnorm_backward(grad_out0, x, lw, groups=3, eps=1e-5)") != std::string::npos);
  CHECK(text.find("groupnorm(x, groups=3, eps=1e-5)") != std::string::npos);
}

TEST_CASE("grad: the pools, F not a multiple of the window, overlapping and gapped windows") {
  for (const char *x : {"f32[N, 7]", "f32[7]"})
    for (const char *op : {"max_pool1d", "avg_pool1d"})
      for (const char *window :
           {"kernel_size=2", "kernel_size=3, stride=2", "kernel_size=2, stride=3", "kernel_size=7",
            "kernel_size=1", "kernel_size=4, stride=1"})
        expect_gradients(fmt::format("pipeline p {{\n  dim N\n  input x: {}\n"
                                     "  return {}(tanh(x), {})\n}}\n",
                                     x, op, window),
                         Mode::Eval);
  // The backward gathers each feature's windows in one row op.
  const std::string text = ir::print_kf(
      ir::grad(parse("pipeline p {\n  dim N\n  input x: f32[N, 7]\n"
                     "  return max_pool1d(x, kernel_size=3), avg_pool1d(x, kernel_size=3, "
                     "stride=2)\n}\n"),
               Mode::Train)
          .backward);
  INFO(text);
  CHECK(text.find("max_pool1d_backward(grad_out0, x, kernel_size=3, stride=3)") !=
        std::string::npos);
  CHECK(text.find("avg_pool1d_backward(grad_out1, kernel_size=3, stride=2, features=7)") !=
        std::string::npos);
}

TEST_CASE("grad: reductions along either axis, with and without keepdim") {
  for (const char *op : {"sum", "mean", "max", "min", "amax", "amin", "logsumexp", "var", "std"})
    for (const char *attrs : {"dim=1", "dim=1, keepdim=true", "dim=0", "dim=0, keepdim=true"}) {
      std::string extra =
          std::string(op) == "var" || std::string(op) == "std" ? ", correction=0" : "";
      expect_gradients(pipeline("", fmt::format("  return {}(x, {}{})", op, attrs, extra)),
                       Mode::Train);
    }
  expect_gradients(pipeline("", "  return var(x, dim=1, keepdim=true)"), Mode::Train);
  expect_gradients(pipeline("", "  return mul(x, std(x, dim=0, keepdim=true))"), Mode::Train);
  // A reduced extent that is a dim: the count comes from a sum of ones.
  expect_gradients(pipeline("", "  return mean(x, dim=0)"), Mode::Train, {{"N", 7}});
}

TEST_CASE("grad: views and column ops") {
  expect_gradients("pipeline p {\n  dim N\n  input x: f32[N, 6]\n  param v: f32[6]\n"
                   "  h = reshape(x, shape=[N, 1, 6])\n  h = mul(h, unsqueeze(v, dim=0))\n"
                   "  return squeeze(h, dim=1)\n}\n",
                   Mode::Train);
  expect_gradients("pipeline p {\n  dim N\n  input x: f32[N, 6]\n  param a: f32[6]\n"
                   "  param b: f32[1]\n  param s: f32[6]\n"
                   "  h = col_affine(x, a, b, s)\n  m = col_mean(h)\n  v = col_var(h)\n"
                   "  return mul(sub(h, m), mul(v, col_sum(h)))\n}\n",
                   Mode::Train);
}

TEST_CASE("grad: dropout's backward draws the forward's mask") {
  const std::string text = "pipeline p {\n  dim N\n  input x: f32[N, 6]\n  param w: f32[6, 6]\n"
                           "  h = dropout(linear(x, w), p=0.5)\n  return mul(h, sigmoid(h))\n}\n";
  // Finite differences see the same mask (the same stream and run state): they agree only where
  // the backward draws it too.
  expect_gradients(text, Mode::Train);
  expect_gradients(text, Mode::Eval);
  ir::GradResult r = ir::grad(parse(text), Mode::Train);
  int dropouts = 0;
  for (const ir::Value &v : r.backward.values)
    if (v.is_op() && v.op == ir::OpKind::Dropout) {
      ++dropouts;
      CHECK(v.attr("stream") == 0);
      CHECK(v.attr("p") == 0.5);
    }
  CHECK(dropouts == 1);
}

TEST_CASE("grad: train-mode batchnorm's backward reads the forward's batch statistics") {
  const std::string text = "pipeline p {\n  dim N\n  input x: f32[N, 6]\n  param w: f32[4, 6]\n"
                           "  state m: f32[4]\n  state v: f32[4]\n"
                           "  return batchnorm(linear(x, w), m, v)\n}\n";
  ir::Graph f = parse(text);
  ir::GradResult r = ir::grad(f, Mode::Train);
  ir::verify(r.backward);
  // The forward computes them anyway: saved as two [4] vectors, not recomputed from the batch.
  std::vector<ir::OpKind> saved_ops;
  for (ir::ValueId s : r.saved)
    saved_ops.push_back(r.forward[s].op);
  CHECK(std::count(saved_ops.begin(), saved_ops.end(), ir::OpKind::ColMean) == 1);
  CHECK(std::count(saved_ops.begin(), saved_ops.end(), ir::OpKind::ColVar) == 1);
  for (const ir::Value &v : r.backward.values)
    CHECK_FALSE((v.is_op() && v.op == ir::OpKind::ColVar));
  // The forward that saves them still verifies and returns its own output first.
  ir::Graph fw = ir::forward_with_saves(r);
  ir::verify(fw);
  CHECK(fw.outputs.front() == f.outputs.front());
  CHECK(fw.outputs.size() == 1 + r.saved.size());
  // Eval mode reads the running statistics: the forward computes nothing more.
  ir::GradResult eval = ir::grad(f, Mode::Eval);
  CHECK(eval.forward.values.size() == f.values.size());
}

TEST_CASE("grad: the backward's inputs, outputs and saved values") {
  const std::string text = "pipeline p {\n  dim N\n  input x: f32[N, 6]\n  param w: f32[4, 6]\n"
                           "  h = linear(x, w)\n  y = mul(h, sigmoid(h))\n  return y, h\n}\n";
  ir::Graph f = parse(text);
  ir::GradResult r = ir::grad(f, Mode::Train);
  ir::verify(r.backward);
  CHECK(r.grad_inputs == std::vector<std::string>{"grad_y", "grad_h"});
  // The GEMM's output is saved; sigmoid(h) is recomputed from it.
  REQUIRE(r.saved.size() == 1);
  CHECK(f[r.saved[0]].name == "h");
  CHECK(r.saved_names[0] == "saved_h");
  CHECK(ir::save_for_backward(f, r.saved[0]));
  for (const ir::Value &v : f.values)
    if (v.is_op() && v.op == ir::OpKind::Sigmoid)
      CHECK_FALSE(ir::save_for_backward(f, static_cast<ir::ValueId>(&v - f.values.data())));
  REQUIRE(r.gradients.size() == 2);
  CHECK(f[r.gradients[0].first].name == "x");
  CHECK(f[r.gradients[1].first].name == "w");
  ir::Graph fw = ir::forward_with_saves(r);
  CHECK(fw.outputs.size() == 3);
  ir::verify(fw);
  // The backward prints as .kf that parses back.
  ir::Graph again = parse(ir::print_kf(r.backward));
  CHECK(again.values.size() == r.backward.values.size());
}

TEST_CASE("grad: frozen inputs and params get no gradient, and nothing only they need is made") {
  const std::string text = "pipeline p {\n  dim N\n  input x: f32[N, 6]\n  param w1: f32[5, 6]\n"
                           "  param w2: f32[4, 5]\n  state rm: f32[5]\n  state rv: f32[5]\n"
                           "  h = batchnorm(linear(x, w1), rm, rv)\n  return linear(h, w2)\n}\n";
  const ir::Graph f = parse(text);
  const auto matmuls = [](const ir::Graph &g) {
    return std::count_if(g.values.begin(), g.values.end(), [](const ir::Value &v) {
      return v.is_op() && (v.op == ir::OpKind::Matmul || v.op == ir::OpKind::Linear);
    });
  };
  const ir::GradResult all = ir::grad(f, Mode::Train);
  CHECK(ir::gradient_names(all) == std::vector<std::string>{"x", "w1", "w2"});
  // x frozen: no dX GEMM.
  const ir::GradResult no_x = ir::grad(f, Mode::Train, {"x"});
  ir::verify(no_x.backward);
  CHECK(ir::gradient_names(no_x) == std::vector<std::string>{"w1", "w2"});
  CHECK(matmuls(no_x.backward) == matmuls(all.backward) - 1);
  // x and w1 frozen: the gradient stops at h; the backward is dW2's GEMM alone, and the forward
  // saves h only (not the batch statistics the batchnorm's backward would read).
  const ir::GradResult only_w2 = ir::grad(f, Mode::Train, {"x", "w1"});
  CHECK(ir::gradient_names(only_w2) == std::vector<std::string>{"w2"});
  CHECK(matmuls(only_w2.backward) == 1); // dW2 = dYᵀ h
  REQUIRE(only_w2.saved.size() == 1);
  CHECK(f[only_w2.saved[0]].name == "h");
  CHECK(all.saved.size() > only_w2.saved.size()); // the batch statistics are saved for dX/dW1
  CHECK_THROWS_WITH_AS(ir::grad(f, Mode::Train, {"y"}),
                       "grad: frozen 'y' is no input or param of pipeline 'p'", ir::GradError);
  CHECK_THROWS_WITH_AS(ir::grad(f, Mode::Train, {"rm"}),
                       "grad: frozen 'rm' is no input or param of pipeline 'p'", ir::GradError);
  CHECK_THROWS_WITH_AS(ir::grad(f, Mode::Train, {"x", "w1", "w2"}),
                       "grad: no output of pipeline 'p' depends on an input or a param that is "
                       "not frozen through differentiable ops",
                       ir::GradError);
}

TEST_CASE("grad: second derivatives of the max pool and groupnorm are refused by name") {
  ir::Graph f = parse("pipeline p {\n  dim N\n  input g: f32[N, 3]\n  input x: f32[N, 6]\n"
                      "  return max_pool1d_backward(g, x, kernel_size=2, stride=2)\n}\n");
  CHECK_THROWS_WITH_AS(
      ir::grad(f, Mode::Train),
      "grad: %2 (max_pool1d_backward) has no vector-Jacobian product: the gradient of "
      "max_pool1d's gradient (a second derivative) is not supported",
      ir::GradError);
  ir::Graph g = parse("pipeline p {\n  dim N\n  input g: f32[N, 6]\n  input x: f32[N, 6]\n"
                      "  return groupnorm_backward(g, x, groups=2)\n}\n");
  CHECK_THROWS_WITH_AS(ir::grad(g, Mode::Train),
                       doctest::Contains("(groupnorm_backward) has no vector-Jacobian product"),
                       ir::GradError);
  // avg_pool1d_backward is linear in g: its gradient is avg_pool1d.
  expect_gradients("pipeline p {\n  dim N\n  input g: f32[N, 3]\n"
                   "  return avg_pool1d_backward(g, kernel_size=3, stride=2, features=8)\n}\n",
                   Mode::Train);
}

TEST_CASE("grad: transpose is interpreted, and planned as a kernel of its own") {
  ir::Graph f = parse("pipeline p {\n  dim N\n  input x: f32[N, 3]\n  return transpose(x)\n}\n");
  CHECK(f[f.outputs[0]].type.str() == "f32[3, N]");
  ir::TensorMap t = {{"x", {{2, 3}, {1, 2, 3, 4, 5, 6}}}};
  std::vector<ir::HostTensor> out = ir::interpret(f, Mode::Eval, {{"N", 2}}, t);
  CHECK(out[0].shape == std::vector<int64_t>{3, 2});
  CHECK(out[0].data == std::vector<double>{1, 4, 2, 5, 3, 6});
  const plan::Plan p = plan::make_plan(f, Mode::Eval);
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.kernels[0].kind == plan::KernelKind::Transpose);
  CHECK(p.kernels[0].stores == std::vector<ir::ValueId>{f.outputs[0]});
  CHECK_FALSE(p.kernels[0].per_bind); // it reads an input
  CHECK(testing::kf_error("pipeline p {\n  dim N\n  input x: f32[N, 3, 2]\n"
                          "  return transpose(x)\n}\n",
                          "t.kf")
            .find("transpose expects its input of rank 2") != std::string::npos);
}

TEST_CASE("cli: kfuse grad prints the backward graph, what the forward saves, and errors") {
  testing::ToolRun r = testing::run_kfuse("grad examples/gpt2_mlp_dropout.kf --mode train");
  CHECK(r.exit_code == 0);
  CHECK(r.err.empty());
  CHECK(r.out.rfind("# The backward graph of pipeline 'gpt2_mlp_dropout' in train mode.\n"
                    "# Run it in the forward's mode, with the forward's random stream.\n",
                    0) == 0);
  CHECK(r.out.find("#   saved_h = 'h' (%5, linear)\n") != std::string::npos);
  CHECK(r.out.find("#   1: the gradient of param 'fc_weight' (%1)\n") != std::string::npos);
  CHECK(r.out.find("dropout(grad_out0, p=0.1, stream=0)") != std::string::npos);
  ir::Graph backward = parse(r.out); // the header is comments: the whole output parses
  CHECK(backward.name == "gpt2_mlp_dropout_backward");

  r = testing::run_kfuse("grad examples/maxout_relu_max_pool1d.kf");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("max_pool1d_backward(grad_out0, h, kernel_size=4, stride=4)") !=
        std::string::npos);
  // Its backward again: the gradient of max_pool1d_backward, which has none.
  const std::filesystem::path twice = std::filesystem::temp_directory_path() /
                                      ("kfuse_grad_twice_" + std::to_string(getpid()) + ".kf");
  std::ofstream(twice) << r.out;
  r = testing::run_kfuse("grad " + twice.string());
  std::filesystem::remove(twice);
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("kfuse grad: error: grad: 't1' (%5, max_pool1d_backward) has no "
                   "vector-Jacobian product: the gradient of max_pool1d's gradient") == 0);
  // A batchnorm the softmax's rule reads is rebuilt from its saved input and statistics.
  r = testing::run_kfuse("grad examples/gemm_bn_scale_softmax.kf");
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("# Recomputed by the backward from what is saved, not saved:\n"
                   "#   'h' (%9, batchnorm)\n# Outputs:") != std::string::npos);
  CHECK(r.out.find("batchnorm)\n#   saved") == std::string::npos);
  r = testing::run_kfuse("grad examples/gemm_scale_bn.kf --mode test");
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--mode must be train or eval, got 'test'") != std::string::npos);
}

TEST_CASE("grad: transpose, comparisons and bn_update in a forward graph") {
  // bn_update is an effect and the comparison piecewise constant: gradients flow around both.
  expect_gradients("pipeline p {\n  dim N\n  input x: f32[N, 6]\n  param w: f32[N, 6]\n"
                   "  state rm: f32[6]\n  state rv: f32[6]\n"
                   "  m = col_mean(x)\n  v = col_var(x)\n"
                   "  bn_update(rm, rv, m, v, momentum=0.1, count=N)\n"
                   "  t = mul(transpose(x), transpose(w))\n"
                   "  return t, add(x, ge(x, w)), mul(w, gt(w, x))\n}\n",
                   Mode::Train);
}

namespace {

// The gradient of x for `call` of x: f32[1, 4] holding `x`, the output's gradient all ones.
std::vector<double> gradient_at(const std::string &call, std::vector<double> x) {
  ir::Graph f = parse("pipeline p {\n  input x: f32[1, 4]\n  return " + call + "\n}\n");
  ir::GradResult r = ir::grad(f, Mode::Eval);
  const ir::Value &out = f[f.outputs[0]];
  ir::TensorMap t = {{"x", {{1, 4}, std::move(x)}}};
  ir::HostTensor ones;
  ones.shape = ir::concrete_shape(out.type, {});
  ones.data.assign(static_cast<size_t>(ones.numel()), 1.0);
  t[r.grad_inputs[0]] = ones;
  for (size_t s = 0; s < r.saved.size(); ++s) {
    ir::TensorMap fw = {{"x", t.at("x")}};
    t[r.saved_names[s]] = ir::interpret(ir::forward_with_saves(r), Mode::Eval, {}, fw).at(1 + s);
  }
  return ir::interpret(r.backward, Mode::Eval, {}, t).at(0).data;
}

} // namespace

TEST_CASE("grad: non-differentiable points as PyTorch's autograd") {
  using V = std::vector<double>;
  CHECK(gradient_at("relu(x)", {-1, 0, 0.5, 2}) == V{0, 0, 1, 1});
  CHECK(gradient_at("abs(x)", {-1, 0, 0.5, 2}) == V{-1, 0, 1, 1});
  CHECK(gradient_at("leaky_relu(x, negative_slope=0.25)", {-1, 0, 0.5, 2}) == V{0.25, 0.25, 1, 1});
  // hardtanh passes nothing at its bounds, clamp everything.
  CHECK(gradient_at("hardtanh(x)", {-1, 0, 1, 2}) == V{0, 1, 0, 0});
  CHECK(gradient_at("clamp(x, min=-1, max=1)", {-1, 0, 1, 2}) == V{1, 1, 1, 0});
  CHECK(gradient_at("hardsigmoid(x)", {-3, 0, 3, 4}) == V{0, 1.0 / 6, 0, 0});
  CHECK(gradient_at("hardswish(x)", {-3, 0, 3, 4}) == V{-0.5, 0.5, 1.5, 1});
  CHECK(gradient_at("elu(x, alpha=2)", {-1e-300, 0, 1, 2}) == V{2, 2, 1, 1});
  // Equal operands split the gradient: maximum(x, 1) at x = 1.
  CHECK(gradient_at("maximum(x, constant(value=1, dtype=f32))", {0, 1, 1, 2}) == V{0, 0.5, 0.5, 1});
  CHECK(gradient_at("minimum(x, constant(value=1, dtype=f32))", {0, 1, 1, 2}) == V{1, 0.5, 0.5, 0});
  // amax's rule for every extreme reduction: the gradient split among the equal maxima.
  CHECK(gradient_at("amax(x, dim=1, keepdim=true)", {1, 3, 3, 2}) == V{0, 0.5, 0.5, 0});
  CHECK(gradient_at("max(x, dim=1, keepdim=true)", {1, 3, 3, 2}) == V{0, 0.5, 0.5, 0});
  CHECK(gradient_at("amin(x, dim=1)", {1, 3, 1, 2}) == V{0.5, 0, 0.5, 0});
  // max_pool1d as max_pool1d_with_indices: a tie to the first maximum, a NaN window to its last
  // NaN; overlapping windows add up, features in no window get 0.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(gradient_at("max_pool1d(x, kernel_size=2)", {3, 3, 1, 2}) == V{1, 0, 0, 1});
  CHECK(gradient_at("max_pool1d(x, kernel_size=3, stride=1)", {1, 5, 5, 2}) == V{0, 2, 0, 0});
  CHECK(gradient_at("max_pool1d(x, kernel_size=4)", {nan, 1, nan, 2}) == V{0, 0, 1, 0});
  CHECK(gradient_at("max_pool1d(x, kernel_size=1, stride=2)", {1, 2, 3, 4}) == V{1, 0, 1, 0});
  CHECK(gradient_at("avg_pool1d(x, kernel_size=2, stride=1)", {1, 2, 3, 4}) == V{0.5, 1, 1, 0.5});
  CHECK(gradient_at("avg_pool1d(x, kernel_size=3)", {1, 2, 3, 4}) ==
        V{1.0 / 3, 1.0 / 3, 1.0 / 3, 0});
}
