// The reference interpreter against hand-computed values and identities on random data.
#include "compiler/ir/interpreter.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

using namespace kfuse::ir;

namespace {

const Dim N = Dim::symbol("N");
Dim c(int64_t v) { return Dim::constant(v); }
TensorType f32(std::vector<Dim> shape) { return {DType::F32, std::move(shape)}; }
HostTensor tensor(std::vector<int64_t> shape, std::vector<double> data) {
  return {std::move(shape), std::move(data)};
}
AttrValue num(double v) { return {v, {}}; }

void check_values(const HostTensor &t, const std::vector<int64_t> &shape,
                  const std::vector<double> &expected, double tol = 1e-12) {
  REQUIRE(t.shape == shape);
  REQUIRE(t.data.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    CHECK_MESSAGE(t.data[i] == doctest::Approx(expected[i]).epsilon(tol), "element ", i);
}

// The message of the InterpretError that `f` throws ("" if it throws none).
template <class F> std::string error_of(F &&f) {
  try {
    f();
  } catch (const InterpretError &e) {
    return e.what();
  }
  return "";
}

// Biased per-column variance of a row-major [n, c] matrix, written independently of the
// interpreter's column statistics.
std::vector<double> column_variance(const std::vector<double> &y, int64_t n, int64_t cols) {
  std::vector<double> var(static_cast<size_t>(cols));
  for (int64_t j = 0; j < cols; ++j) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
      sum += y[i * cols + j];
    double mean = sum / n;
    for (int64_t i = 0; i < n; ++i)
      sq += (y[i * cols + j] - mean) * (y[i * cols + j] - mean);
    var[j] = sq / n;
  }
  return var;
}

// x[N, 2] -> batchnorm(x, weight, bias, rm, rv) (or the 3-argument form).
Graph batchnorm_graph(bool affine, std::map<std::string, AttrValue> attrs = {}) {
  GraphBuilder b("bn", {"N"});
  ValueId x = b.declare(ValueKind::Input, "x", f32({N, c(2)}));
  std::vector<ValueId> args{x};
  if (affine) {
    args.push_back(b.declare(ValueKind::Param, "weight", f32({c(2)})));
    args.push_back(b.declare(ValueKind::Param, "bias", f32({c(2)})));
  }
  args.push_back(b.declare(ValueKind::State, "rm", f32({c(2)})));
  args.push_back(b.declare(ValueKind::State, "rv", f32({c(2)})));
  b.add_output(b.op(OpKind::BatchNorm, args, std::move(attrs), "y"));
  return b.finish();
}

// Column 0: mean 2, biased variance 2/3. Column 1: mean 2, biased variance 8.
const HostTensor kThreeRows = tensor({3, 2}, {1, 0, 2, 0, 3, 6});

} // namespace

TEST_CASE("interpreter: linear and matmul by hand") {
  GraphBuilder b("gemm");
  ValueId x = b.declare(ValueKind::Input, "x", f32({c(2), c(3)}));
  ValueId w = b.declare(ValueKind::Param, "w", f32({c(2), c(3)}));
  ValueId bias = b.declare(ValueKind::Param, "bias", f32({c(2)}));
  ValueId m = b.declare(ValueKind::Param, "m", f32({c(3), c(2)}));
  b.add_output(b.op(OpKind::Linear, {x, w, bias}));
  b.add_output(b.op(OpKind::Linear, {x, w}));
  b.add_output(b.op(OpKind::Matmul, {x, m}));
  Graph g = b.finish();
  TensorMap t{{"x", tensor({2, 3}, {1, 2, 3, 4, 5, 6})},
              {"w", tensor({2, 3}, {1, 0, -1, 2, 1, 0})},
              {"bias", tensor({2}, {0.5, -1})},
              {"m", tensor({3, 2}, {1, 0, 0, 1, 1, 1})}};
  auto out = interpret(g, Mode::Eval, {}, t);
  check_values(out[0], {2, 2}, {-1.5, 3, -1.5, 12});
  check_values(out[1], {2, 2}, {-2, 4, -2, 13});
  check_values(out[2], {2, 2}, {4, 5, 10, 11});
}

TEST_CASE("interpreter: linear(x, W) equals matmul(x, W^T) across row blocks") {
  // 11 rows: one full block of rows and a partial one; K = 7 exercises the dot's remainder.
  GraphBuilder b("gemm", {"N"});
  ValueId x = b.declare(ValueKind::Input, "x", f32({N, c(7)}));
  ValueId w = b.declare(ValueKind::Param, "w", f32({c(5), c(7)}));
  ValueId wt = b.declare(ValueKind::Param, "wt", f32({c(7), c(5)}));
  b.add_output(b.op(OpKind::Linear, {x, w}));
  b.add_output(b.op(OpKind::Matmul, {x, wt}));
  Graph g = b.finish();
  DimBindings dims{{"N", 11}};
  TensorMap t = random_tensors(g, dims, 7);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t k = 0; k < 7; ++k)
      t["wt"].data[k * 5 + i] = t["w"].data[i * 7 + k];
  auto out = interpret(g, Mode::Eval, dims, t);
  REQUIRE(out[0].shape == std::vector<int64_t>{11, 5});
  CHECK(relative_error(out[0].data, out[1].data) < 1e-14);
  // Row 10, column 3 by a plain loop.
  double expect = 0;
  for (int64_t k = 0; k < 7; ++k)
    expect += t["x"].data[10 * 7 + k] * t["w"].data[3 * 7 + k];
  CHECK(out[0].data[10 * 5 + 3] == doctest::Approx(expect).epsilon(1e-14));
}

TEST_CASE("interpreter: batchnorm in train mode by hand") {
  SUBCASE("with weight and bias") {
    Graph g = batchnorm_graph(true);
    TensorMap t{{"x", kThreeRows},
                {"weight", tensor({2}, {2, 0.5})},
                {"bias", tensor({2}, {1, -1})},
                {"rm", tensor({2}, {0, 1})},
                {"rv", tensor({2}, {1, 2})}};
    auto out = interpret(g, Mode::Train, {{"N", 3}}, t);
    double s0 = std::sqrt(2.0 / 3.0 + 1e-5), s1 = std::sqrt(8.0 + 1e-5);
    check_values(out[0], {3, 2},
                 {-1 / s0 * 2 + 1, -2 / s1 * 0.5 - 1, 0 / s0 * 2 + 1, -2 / s1 * 0.5 - 1,
                  1 / s0 * 2 + 1, 4 / s1 * 0.5 - 1});
    // momentum 0.1: rm = 0.9 rm + 0.1 mean; rv = 0.9 rv + 0.1 var * 3/2.
    check_values(t["rm"], {2}, {0.2, 1.1});
    check_values(t["rv"], {2}, {1.0, 3.0});
  }
  SUBCASE("three-argument form, explicit eps and momentum") {
    // eps must be > 0; 1e-300 leaves these hand-computed values unchanged.
    Graph g = batchnorm_graph(false, {{"eps", num(1e-300)}, {"momentum", num(0.5)}});
    TensorMap t{{"x", kThreeRows}, {"rm", tensor({2}, {0, 1})}, {"rv", tensor({2}, {1, 2})}};
    auto out = interpret(g, Mode::Train, {{"N", 3}}, t);
    double s0 = std::sqrt(2.0 / 3.0), s1 = std::sqrt(8.0);
    check_values(out[0], {3, 2}, {-1 / s0, -2 / s1, 0, -2 / s1, 1 / s0, 4 / s1});
    check_values(t["rm"], {2}, {1.0, 1.5});
    check_values(t["rv"], {2}, {1.0, 7.0});
  }
}

TEST_CASE("interpreter: batchnorm in eval mode uses the running stats and updates nothing") {
  Graph g = batchnorm_graph(true, {{"eps", num(1e-300)}});
  TensorMap t{{"x", kThreeRows},
              {"weight", tensor({2}, {3, 1})},
              {"bias", tensor({2}, {1, -1})},
              {"rm", tensor({2}, {1, -1})},
              {"rv", tensor({2}, {4, 0.25})}};
  Interpreter in(g, Mode::Eval, {{"N", 3}}, t);
  in.eval_all();
  // Column 0: (x - 1) / 2 * 3 + 1; column 1: (x + 1) / 0.5 - 1.
  check_values(in.value(g.outputs[0]), {3, 2}, {1, 1, 2.5, 1, 4, 13});
  CHECK(in.state_updates().empty());
  interpret(g, Mode::Eval, {{"N", 3}}, t);
  check_values(t["rm"], {2}, {1, -1});
  check_values(t["rv"], {2}, {4, 0.25});
}

TEST_CASE("interpreter: batchnorm on one row is an error in train mode only") {
  Graph g = batchnorm_graph(false);
  TensorMap t{
      {"x", tensor({1, 2}, {1, 2})}, {"rm", tensor({2}, {0, 0})}, {"rv", tensor({2}, {1, 1})}};
  CHECK(error_of([&] {
          interpret(g, Mode::Train, {{"N", 1}}, t);
        }).find("batchnorm in train mode needs more than 1 row, got N=1") != std::string::npos);
  auto out = interpret(g, Mode::Eval, {{"N", 1}}, t);
  check_values(out[0], {1, 2}, {1 / std::sqrt(1 + 1e-5), 2 / std::sqrt(1 + 1e-5)});
}

TEST_CASE("interpreter: train-mode batchnorm normalizes and updates running stats") {
  const int64_t rows = 64, cols = 16;
  const double eps = 1e-3, momentum = 0.3;
  GraphBuilder b("bn", {"N"});
  ValueId x = b.declare(ValueKind::Input, "x", f32({N, c(cols)}));
  ValueId rm = b.declare(ValueKind::State, "rm", f32({c(cols)}));
  ValueId rv = b.declare(ValueKind::State, "rv", f32({c(cols)}));
  b.add_output(
      b.op(OpKind::BatchNorm, {x, rm, rv}, {{"eps", num(eps)}, {"momentum", num(momentum)}}));
  Graph g = b.finish();
  DimBindings dims{{"N", rows}};
  TensorMap t = random_tensors(g, dims, 3);
  for (double &v : t["x"].data)
    v = 3 * v + 5; // a column variance near 9 and a mean far from 0
  const TensorMap entry = t;
  std::vector<double> var = column_variance(entry.at("x").data, rows, cols);
  const HostTensor y = interpret(g, Mode::Train, dims, t)[0];

  std::vector<double> y_mean(cols, 0.0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      y_mean[j] += y.data[i * cols + j] / rows;
  std::vector<double> y_var = column_variance(y.data, rows, cols);
  for (int64_t j = 0; j < cols; ++j) {
    CHECK(std::abs(y_mean[j]) < 1e-12);
    CHECK(y_var[j] == doctest::Approx(1 / (1 + eps / var[j])).epsilon(1e-12));
    double mean = 0;
    for (int64_t i = 0; i < rows; ++i)
      mean += entry.at("x").data[i * cols + j] / rows;
    double unbiased = var[j] * rows / (rows - 1);
    CHECK(
        t["rm"].data[j] ==
        doctest::Approx((1 - momentum) * entry.at("rm").data[j] + momentum * mean).epsilon(1e-12));
    CHECK(t["rv"].data[j] ==
          doctest::Approx((1 - momentum) * entry.at("rv").data[j] + momentum * unbiased)
              .epsilon(1e-12));
  }
}

TEST_CASE("interpreter: binary ops broadcast [1], [C] and [N, 1]") {
  GraphBuilder b("bin");
  ValueId a = b.declare(ValueKind::Input, "a", f32({c(2), c(3)}));
  ValueId s = b.declare(ValueKind::Param, "s", f32({c(1)}));
  ValueId v = b.declare(ValueKind::Param, "v", f32({c(3)}));
  ValueId col = b.declare(ValueKind::Param, "col", f32({c(2), c(1)}));
  b.add_output(b.op(OpKind::Add, {a, s}));
  b.add_output(b.op(OpKind::Sub, {s, a}));
  b.add_output(b.op(OpKind::Mul, {a, v}));
  b.add_output(b.op(OpKind::Div, {v, a}));
  b.add_output(b.op(OpKind::Add, {v, s}));
  b.add_output(b.op(OpKind::Mul, {a, col}));
  b.add_output(b.op(OpKind::Sub, {a, a}));
  b.add_output(b.op(OpKind::Sub, {v, col}));
  Graph g = b.finish();
  TensorMap t{{"a", tensor({2, 3}, {1, 2, 3, 4, 5, 6})},
              {"s", tensor({1}, {2})},
              {"v", tensor({3}, {10, 20, 30})},
              {"col", tensor({2, 1}, {1, 2})}};
  auto out = interpret(g, Mode::Eval, {}, t);
  check_values(out[0], {2, 3}, {3, 4, 5, 6, 7, 8});
  check_values(out[1], {2, 3}, {1, 0, -1, -2, -3, -4});
  check_values(out[2], {2, 3}, {10, 40, 90, 40, 100, 180});
  check_values(out[3], {2, 3}, {10, 10, 10, 2.5, 4, 5});
  check_values(out[4], {3}, {12, 22, 32});
  check_values(out[5], {2, 3}, {1, 2, 3, 8, 10, 12});
  check_values(out[6], {2, 3}, {0, 0, 0, 0, 0, 0});
  check_values(out[7], {2, 3}, {9, 19, 29, 8, 18, 28});
}

TEST_CASE("interpreter: unary ops by hand") {
  GraphBuilder b("unary");
  ValueId x = b.declare(ValueKind::Input, "x", f32({c(4)}));
  for (OpKind k : {OpKind::Relu, OpKind::Gelu, OpKind::Sigmoid, OpKind::Tanh, OpKind::Silu})
    b.add_output(b.op(k, {x}));
  ValueId p = b.declare(ValueKind::Input, "p", f32({c(2)}));
  b.add_output(b.op(OpKind::Rsqrt, {p}));
  Graph g = b.finish();
  TensorMap t{{"x", tensor({4}, {-1, 0, 1, 4})}, {"p", tensor({2}, {4, 0.25})}};
  auto out = interpret(g, Mode::Eval, {}, t);
  check_values(out[0], {4}, {0, 0, 1, 4});
  check_values(out[1], {4}, {-0.15865525393145707, 0, 0.8413447460685429, 4 * 0.9999683287581669});
  check_values(out[2], {4}, {0.2689414213699951, 0.5, 0.7310585786300049, 0.9820137900379085});
  check_values(out[3], {4}, {-0.7615941559557649, 0, 0.7615941559557649, 0.999329299739067});
  check_values(out[4], {4}, {-0.2689414213699951, 0, 0.7310585786300049, 4 * 0.9820137900379085});
  check_values(out[5], {2}, {0.5, 2});
}

TEST_CASE("interpreter: reductions along either axis, as torch computes them") {
  GraphBuilder b("red");
  ValueId x = b.declare(ValueKind::Input, "x", f32({c(2), c(4)}));
  auto reduce = [&](OpKind op, double dim, bool keepdim, AttrMap extra = {}) {
    extra["dim"] = num(dim);
    extra["keepdim"] = num(keepdim ? 1 : 0);
    return b.op(op, {x}, extra);
  };
  for (ValueId id :
       {reduce(OpKind::Sum, 1, true), reduce(OpKind::Mean, -1, false), reduce(OpKind::Max, 1, true),
        reduce(OpKind::Amin, 1, false), reduce(OpKind::Logsumexp, 1, true),
        reduce(OpKind::Var, 1, true), reduce(OpKind::Std, 1, false, {{"correction", num(0)}}),
        reduce(OpKind::Sum, 0, true), reduce(OpKind::Mean, 0, false)})
    b.add_output(id);
  Graph g = b.finish();
  CHECK(g[g.outputs[0]].type.str() == "f32[2, 1]");
  CHECK(g[g.outputs[1]].type.str() == "f32[2]");
  CHECK(g[g.outputs[7]].type.str() == "f32[1, 4]");
  CHECK(g[g.outputs[8]].type.str() == "f32[4]");
  const double inf = std::numeric_limits<double>::infinity();
  // Row 0: 1 2 3 6 (mean 3, squared deviations 4 1 0 9 = 14); row 1 holds -inf and a NaN.
  TensorMap t{{"x", tensor({2, 4}, {1, 2, 3, 6, -inf, 0, std::nan(""), 5})}};
  auto out = interpret(g, Mode::Eval, {}, t);
  CHECK(out[0].data[0] == 12);
  CHECK(out[1].data[0] == 3);
  CHECK(out[2].data[0] == 6);
  CHECK(std::isnan(out[2].data[1])); // max propagates NaN
  CHECK(out[3].data[0] == 1);
  CHECK(out[4].data[0] ==
        doctest::Approx(6 + std::log(std::exp(-5) + std::exp(-4) + std::exp(-3) + 1)));
  CHECK(std::isnan(out[4].data[1]));
  CHECK(out[5].data[0] == doctest::Approx(14.0 / 3)); // correction=1 by default
  CHECK(out[6].data[0] == doctest::Approx(std::sqrt(14.0 / 4)));
  CHECK(out[7].shape == std::vector<int64_t>{1, 4});
  CHECK(out[7].data[0] == -inf);
  CHECK(out[7].data[1] == 2);
  CHECK(std::isnan(out[7].data[2]));
  CHECK(out[7].data[3] == 11);
  CHECK(out[8].data[3] == 5.5);
}

TEST_CASE("interpreter: logsumexp of infinite rows, var with correction >= n") {
  GraphBuilder b("edge");
  ValueId x = b.declare(ValueKind::Input, "x", f32({c(2), c(2)}));
  b.add_output(b.op(OpKind::Logsumexp, {x}, {{"dim", num(1)}, {"keepdim", num(0)}}));
  b.add_output(b.op(OpKind::Var, {x}, {{"dim", num(1)}, {"correction", num(2)}}));
  Graph g = b.finish();
  const double inf = std::numeric_limits<double>::infinity();
  TensorMap t{{"x", tensor({2, 2}, {-inf, -inf, 1, inf})}};
  auto out = interpret(g, Mode::Eval, {}, t);
  CHECK(out[0].data[0] == -inf); // torch.logsumexp: the max is not subtracted when infinite
  CHECK(out[0].data[1] == inf);
  CHECK(std::isnan(out[1].data[0])); // -inf - -inf
  CHECK(std::isnan(out[1].data[1]));
}

TEST_CASE("interpreter: layernorm and rmsnorm over the feature axis") {
  GraphBuilder b("norms");
  ValueId x = b.declare(ValueKind::Input, "x", f32({c(1), c(4)}));
  ValueId w = b.declare(ValueKind::Param, "w", f32({c(4)}));
  ValueId bias = b.declare(ValueKind::Param, "b", f32({c(4)}));
  b.add_output(b.op(OpKind::LayerNorm, {x, w, bias}, {{"eps", num(0.5)}}));
  b.add_output(b.op(OpKind::LayerNorm, {x}, {{"eps", num(0.5)}}));
  b.add_output(b.op(OpKind::RmsNorm, {x, w}, {{"eps", num(0.5)}}));
  Graph g = b.finish();
  TensorMap t{{"x", tensor({1, 4}, {1, 2, 3, 6})},
              {"w", tensor({4}, {1, 2, 0.5, -1})},
              {"b", tensor({4}, {0, 1, 0, 10})}};
  auto out = interpret(g, Mode::Eval, {}, t);
  // mean 3, biased var 14/4 = 3.5: rstd = 1/sqrt(4); mean square 50/4 = 12.5: 1/sqrt(13).
  check_values(out[0], {1, 4}, {-1, 1 - 1, 0, -1.5 + 10});
  check_values(out[1], {1, 4}, {-1, -0.5, 0, 1.5});
  double r = 1 / std::sqrt(13.0);
  check_values(out[2], {1, 4}, {r, 4 * r, 1.5 * r, -6 * r});
}

// Why the GPU tests run train mode from 3 rows: over 2 rows batchnorm maps every column to
// +-d / sqrt(d^2 + eps), 1 up to eps / (2 d^2), so a row of two such columns with one sign holds
// two numbers equal to 4 digits, and a layernorm of that row normalizes their difference.
// fp32's rounding of the batchnorm output alone (6e-8) then moves the result by 6e-8 / 1.8e-4,
// 3e-4 relative: a chain no fp32 kernel can compute within the 1e-5 bound (a random GPU chain
// drew it at N = 2).
TEST_CASE("interpreter: layernorm after batchnorm over 2 rows amplifies fp32 rounding 5000x") {
  Graph g = batchnorm_graph(false, {{"eps", num(3e-5)}, {"momentum", num(0.1)}});
  TensorMap t{{"x", tensor({2, 2}, {2.887743727, 0.221387879, 0.8231607118, -0.3347552834})},
              {"rm", tensor({2}, {0, 0})},
              {"rv", tensor({2}, {1, 1})}};
  HostTensor y = interpret(g, Mode::Train, {{"N", 2}}, t)[0];
  check_values(y, {2, 2}, {0.9999859241, 0.999806067, -0.9999859241, -0.999806067}, 1e-9);

  GraphBuilder b("ln");
  ValueId x = b.declare(ValueKind::Input, "x", f32({c(2), c(2)}));
  b.add_output(b.op(OpKind::LayerNorm, {x}, {{"eps", num(1e-5)}}));
  Graph ln = b.finish();
  HostTensor y32 = y;
  for (double &v : y32.data)
    v = static_cast<float>(v);
  TensorMap exact{{"x", y}}, rounded{{"x", y32}};
  double err = relative_error(interpret(ln, Mode::Eval, {}, rounded)[0].data,
                              interpret(ln, Mode::Eval, {}, exact)[0].data);
  CHECK(err > 1e-4);
  CHECK(err < 1e-3);
}

TEST_CASE("interpreter: groupnorm per feature group, instancenorm per row") {
  GraphBuilder b("groups");
  ValueId x = b.declare(ValueKind::Input, "x", f32({c(1), c(4)}));
  ValueId w = b.declare(ValueKind::Param, "w", f32({c(4)}));
  ValueId bias = b.declare(ValueKind::Param, "b", f32({c(4)}));
  b.add_output(b.op(OpKind::GroupNorm, {x, w, bias}, {{"groups", num(2)}, {"eps", num(0.75)}}));
  b.add_output(b.op(OpKind::GroupNorm, {x}, {{"groups", num(1)}, {"eps", num(0.5)}}));
  b.add_output(b.op(OpKind::InstanceNorm, {x}, {{"eps", num(0.5)}}));
  Graph g = b.finish();
  TensorMap t{{"x", tensor({1, 4}, {1, 2, 3, 6})},
              {"w", tensor({4}, {1, 2, 0.5, -1})},
              {"b", tensor({4}, {0, 1, 0, 10})}};
  auto out = interpret(g, Mode::Eval, {}, t);
  // Groups {1, 2} (mean 1.5, var 0.25: rstd 1) and {3, 6} (mean 4.5, var 2.25: rstd 1/sqrt(3)).
  double r = 1 / std::sqrt(3.0);
  check_values(out[0], {1, 4}, {-0.5, 0.5 * 2 + 1, -1.5 * r * 0.5, 1.5 * r * -1 + 10});
  // One group is layernorm without affine: mean 3, var 3.5, rstd 1/2.
  check_values(out[1], {1, 4}, {-1, -0.5, 0, 1.5});
  check_values(out[2], {1, 4}, {-1, -0.5, 0, 1.5});
}

TEST_CASE("interpreter: groupnorm whose groups do not divide a bound dim is an error") {
  GraphBuilder b("groups", {"F"});
  ValueId x = b.declare(ValueKind::Input, "x", f32({c(1), Dim::symbol("F")}));
  b.add_output(b.op(OpKind::GroupNorm, {x}, {{"groups", num(2)}}));
  Graph g = b.finish();
  TensorMap t{{"x", tensor({1, 3}, {1, 2, 3})}};
  CHECK_THROWS_WITH_AS(interpret(g, Mode::Eval, {{"F", 3}}, t),
                       doctest::Contains("groups=2 does not divide the 3 features"),
                       InterpretError);
}

TEST_CASE("interpreter: max_pool1d and avg_pool1d over feature windows") {
  GraphBuilder b("pools");
  ValueId x = b.declare(ValueKind::Input, "x", f32({c(2), c(5)}));
  b.add_output(b.op(OpKind::MaxPool1d, {x}, {{"kernel_size", num(2)}}));
  b.add_output(b.op(OpKind::AvgPool1d, {x}, {{"kernel_size", num(3)}, {"stride", num(1)}}));
  b.add_output(b.op(OpKind::MaxPool1d, {x}, {{"kernel_size", num(1)}, {"stride", num(3)}}));
  Graph g = b.finish();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  TensorMap t{{"x", tensor({2, 5}, {1, 5, 2, 8, 3, 4, -1, nan, 0, 6})}};
  auto out = interpret(g, Mode::Eval, {}, t);
  // stride defaults to kernel_size: windows [0, 2) and [2, 4); the last feature is left out.
  REQUIRE(out[0].shape == std::vector<int64_t>{2, 2});
  CHECK(out[0].data[0] == 5);
  CHECK(out[0].data[1] == 8);
  CHECK(out[0].data[2] == 4);
  CHECK(std::isnan(out[0].data[3])); // a window holding a NaN
  REQUIRE(out[1].shape == std::vector<int64_t>{2, 3});
  CHECK(out[1].data[0] == doctest::Approx(8.0 / 3));
  CHECK(out[1].data[1] == 5);
  CHECK(out[1].data[2] == doctest::Approx(13.0 / 3));
  check_values(out[2], {2, 2}, {1, 8, 4, 0});
}

TEST_CASE("interpreter: the pools' gradients go back over the windows as PyTorch's indices") {
  GraphBuilder b("pool_grads");
  ValueId x = b.declare(ValueKind::Input, "x", f32({c(2), c(5)}));
  ValueId g2 = b.declare(ValueKind::Input, "g2", f32({c(2), c(2)}));
  ValueId g3 = b.declare(ValueKind::Input, "g3", f32({c(2), c(3)}));
  auto window = [](double k, double s) {
    return std::map<std::string, AttrValue>{{"kernel_size", num(k)}, {"stride", num(s)}};
  };
  b.add_output(b.op(OpKind::MaxPool1dBackward, {g2, x}, window(2, 2)));
  b.add_output(b.op(OpKind::MaxPool1dBackward, {g3, x}, window(3, 1)));
  b.add_output(b.op(OpKind::MaxPool1dBackward, {g2, x}, window(1, 3)));
  auto avg = window(3, 1);
  avg["features"] = num(5);
  b.add_output(b.op(OpKind::AvgPool1dBackward, {g3}, avg));
  Graph g = b.finish();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  TensorMap t{{"x", tensor({2, 5}, {1, 5, 5, 2, 3, 4, -1, nan, 0, nan})},
              {"g2", tensor({2, 2}, {10, 20, 30, 40})},
              {"g3", tensor({2, 3}, {1, 2, 3, 3, 6, 9})}};
  auto out = interpret(g, Mode::Eval, {}, t);
  // Windows (1, 5) (5, 2) and (4, -1) (NaN, 0); the last feature is in none.
  check_values(out[0], {2, 5}, {0, 10, 20, 0, 0, 30, 0, 40, 0, 0});
  // Overlapping windows add up; a tie goes to the first maximum ((5, 5, 2): feature 1), a window
  // holding NaNs to its last NaN ((NaN, 0, NaN): feature 4).
  check_values(out[1], {2, 5}, {0, 1 + 2, 3, 0, 0, 0, 0, 3 + 6, 0, 9});
  // stride > kernel_size: features 1, 2 and 4 are in no window.
  check_values(out[2], {2, 5}, {10, 0, 0, 20, 0, 30, 0, 0, 40, 0});
  check_values(out[3], {2, 5}, {1.0 / 3, 1, 2, 5.0 / 3, 1, 1, 3, 6, 5, 3});
}

TEST_CASE("interpreter: groupnorm_backward per group, by hand") {
  GraphBuilder b("groupnorm_grad");
  ValueId g = b.declare(ValueKind::Input, "g", f32({c(1), c(4)}));
  ValueId x = b.declare(ValueKind::Input, "x", f32({c(1), c(4)}));
  ValueId w = b.declare(ValueKind::Param, "w", f32({c(4)}));
  b.add_output(
      b.op(OpKind::GroupNormBackward, {g, x, w}, {{"groups", num(2)}, {"eps", num(0.75)}}));
  b.add_output(b.op(OpKind::GroupNormBackward, {g, x}, {{"groups", num(4)}, {"eps", num(0.75)}}));
  Graph graph = b.finish();
  TensorMap t{{"g", tensor({1, 4}, {1, 0, 0, 1})},
              {"x", tensor({1, 4}, {1, 2, 3, 6})},
              {"w", tensor({4}, {1, 2, 0.5, -1})}};
  auto out = interpret(graph, Mode::Eval, {}, t);
  // Group {1, 2}: rstd 1, x̂ (-0.5, 0.5), gx (1, 0): mean(gx) 0.5, mean(gx x̂) -0.25. Group {3, 6}:
  // rstd r = 1/sqrt(3), x̂ r = (-0.5, 0.5), gx (0, -1): mean(gx) -0.5, mean(gx x̂) -0.75 r.
  const double r = 1 / std::sqrt(3.0);
  check_values(out[0], {1, 4}, {0.375, -0.375, 0.125 * r, -0.125 * r});
  // Groups of one feature: x̂ = 0, the gradient too.
  check_values(out[1], {1, 4}, {0, 0, 0, 0});
}

TEST_CASE("interpreter: softmax and log_softmax") {
  SUBCASE("by hand, with large values") {
    GraphBuilder b("sm");
    ValueId x = b.declare(ValueKind::Input, "x", f32({c(2), c(2)}));
    b.add_output(b.op(OpKind::Softmax, {x}, {{"dim", num(1)}}));
    b.add_output(b.op(OpKind::LogSoftmax, {x}, {{"dim", num(-1)}}));
    Graph g = b.finish();
    // Row 1 overflows exp() unless the maximum is subtracted first.
    TensorMap t{{"x", tensor({2, 2}, {0, std::log(3.0), 1000, 1000 + std::log(3.0)})}};
    auto out = interpret(g, Mode::Eval, {}, t);
    check_values(out[0], {2, 2}, {0.25, 0.75, 0.25, 0.75});
    check_values(out[1], {2, 2}, {std::log(0.25), std::log(0.75), std::log(0.25), std::log(0.75)});
  }
  SUBCASE("identities on random data") {
    const int64_t rows = 5, cols = 7;
    GraphBuilder b("sm", {"N"});
    ValueId x = b.declare(ValueKind::Input, "x", f32({N, c(cols)}));
    ValueId rows_sm = b.op(OpKind::Softmax, {x}, {{"dim", num(-1)}});
    ValueId rows_sm1 = b.op(OpKind::Softmax, {x}, {{"dim", num(1)}});
    ValueId cols_sm = b.op(OpKind::Softmax, {x}, {{"dim", num(0)}});
    ValueId rows_log = b.op(OpKind::LogSoftmax, {x}, {{"dim", num(1)}});
    ValueId cols_log = b.op(OpKind::LogSoftmax, {x}, {{"dim", num(-2)}});
    for (ValueId id : {rows_sm, rows_sm1, cols_sm, rows_log, cols_log})
      b.add_output(id);
    Graph g = b.finish();
    DimBindings dims{{"N", rows}};
    TensorMap t = random_tensors(g, dims, 11);
    auto out = interpret(g, Mode::Eval, dims, t);
    for (int64_t i = 0; i < rows; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < cols; ++j)
        sum += out[0].data[i * cols + j];
      CHECK(sum == doctest::Approx(1).epsilon(1e-14));
    }
    for (int64_t j = 0; j < cols; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < rows; ++i)
        sum += out[2].data[i * cols + j];
      CHECK(sum == doctest::Approx(1).epsilon(1e-14));
    }
    CHECK(out[0].data == out[1].data);
    CHECK(out[0].data != out[2].data);
    for (size_t i = 0; i < out[0].data.size(); ++i) {
      CHECK(out[3].data[i] == doctest::Approx(std::log(out[0].data[i])).epsilon(1e-14));
      CHECK(out[4].data[i] == doctest::Approx(std::log(out[2].data[i])).epsilon(1e-14));
    }
  }
}

TEST_CASE("interpreter: col_mean, col_var and col_affine with and without a shift") {
  GraphBuilder b("col", {"N"});
  ValueId y = b.declare(ValueKind::Input, "y", f32({N, c(2)}));
  ValueId far = b.declare(ValueKind::Input, "far", f32({N, c(2)}));
  ValueId a3 = b.declare(ValueKind::Param, "a3", f32({c(2)}));
  ValueId s1 = b.declare(ValueKind::Param, "s1", f32({c(1)}));
  b.add_output(b.op(OpKind::ColMean, {y}));
  b.add_output(b.op(OpKind::ColVar, {y}));
  b.add_output(b.op(OpKind::ColVar, {far}));
  b.add_output(b.op(OpKind::ColAffine, {y, a3, s1}));
  b.add_output(b.op(OpKind::ColAffine, {y, s1, a3}));
  b.add_output(b.op(OpKind::ColAffine, {y, a3, s1, a3})); // (y - a3) * a3 + s1
  Graph g = b.finish();
  HostTensor shifted = kThreeRows;
  for (double &v : shifted.data)
    v += 1e9; // E[y^2] - E[y]^2 would lose every digit of the variance here
  TensorMap t{
      {"y", kThreeRows}, {"far", shifted}, {"a3", tensor({2}, {2, -1})}, {"s1", tensor({1}, {10})}};
  auto out = interpret(g, Mode::Eval, {{"N", 3}}, t);
  check_values(out[0], {2}, {2, 2});
  check_values(out[1], {2}, {2.0 / 3.0, 8});
  check_values(out[2], {2}, {2.0 / 3.0, 8});
  check_values(out[3], {3, 2}, {12, 10, 14, 10, 16, 4});
  check_values(out[4], {3, 2}, {12, -1, 22, -1, 32, 59});
  check_values(out[5], {3, 2}, {8, 9, 10, 9, 12, 3});
}

TEST_CASE("interpreter: col_sum is the sum over the rows, in the matrix's type") {
  GraphBuilder b("col", {"N"});
  ValueId y = b.declare(ValueKind::Input, "y", f32({N, c(2)}));
  ValueId h = b.declare(ValueKind::Input, "h", {DType::BF16, {c(2), c(3)}});
  b.add_output(b.op(OpKind::ColSum, {y}));
  ValueId h_sum = b.op(OpKind::ColSum, {h});
  b.add_output(h_sum);
  Graph g = b.finish();
  CHECK(g[h_sum].type == TensorType{DType::BF16, {c(3)}});
  TensorMap t{{"y", kThreeRows}, {"h", tensor({2, 3}, {1, -2, 0.5, 3, 0.25, -4})}};
  auto out = interpret(g, Mode::Eval, {{"N", 3}}, t);
  check_values(out[0], {2}, {6, 6});
  check_values(out[1], {3}, {4, -1.75, -3.5});
}

TEST_CASE("interpreter: col_var and bn_update reproduce train-mode batchnorm") {
  const int64_t rows = 6, cols = 4;
  GraphBuilder b("bn", {"N"});
  ValueId x = b.declare(ValueKind::Input, "x", f32({N, c(cols)}));
  ValueId rm = b.declare(ValueKind::State, "rm", f32({c(cols)}));
  ValueId rv = b.declare(ValueKind::State, "rv", f32({c(cols)}));
  b.add_output(b.op(OpKind::BatchNorm, {x, rm, rv}));
  Graph fused = b.finish();

  GraphBuilder d("decomposed", {"N"});
  x = d.declare(ValueKind::Input, "x", f32({N, c(cols)}));
  rm = d.declare(ValueKind::State, "rm", f32({c(cols)}));
  rv = d.declare(ValueKind::State, "rv", f32({c(cols)}));
  ValueId eps = d.declare(ValueKind::Param, "eps", f32({c(1)}));
  ValueId mean = d.op(OpKind::ColMean, {x});
  ValueId var = d.op(OpKind::ColVar, {x});
  d.op(OpKind::BnUpdate, {rm, rv, mean, var},
       {{"momentum", num(0.1)}, {"count", AttrValue::extent(N)}});
  ValueId inv = d.op(OpKind::Rsqrt, {d.op(OpKind::Add, {var, eps})});
  d.add_output(d.op(OpKind::Mul, {d.op(OpKind::Sub, {x, mean}), inv}));
  Graph decomposed = d.finish();

  DimBindings dims{{"N", rows}};
  TensorMap t1 = random_tensors(fused, dims, 5);
  t1["eps"] = tensor({1}, {1e-5});
  const TensorMap entry1 = t1;
  TensorMap t2 = t1;
  auto y1 = interpret(fused, Mode::Train, dims, t1);
  auto y2 = interpret(decomposed, Mode::Train, dims, t2);
  CHECK(relative_error(y2[0].data, y1[0].data) < 1e-14);
  CHECK(t2["rm"].data != entry1.at("rm").data);
  CHECK(t2["rv"].data != entry1.at("rv").data);
  CHECK(relative_error(t2["rm"].data, t1["rm"].data) < 1e-15);
  CHECK(relative_error(t2["rv"].data, t1["rv"].data) < 1e-15);
  // The count can be a number or a product of dims too (a [B*T, C] view's rows): 3 instead
  // of N=6 unbiases by 3/2 instead of 6/5, B*T = 10 by 10/9.
  const Dim bt = Dim::product({Dim::symbol("B"), Dim::symbol("T")});
  for (auto [count, n] : std::vector<std::pair<Dim, double>>{{c(3), 3}, {bt, 10}}) {
    CAPTURE(count.str());
    GraphBuilder e("update", {"N", "B", "T"});
    x = e.declare(ValueKind::Input, "x", f32({N, c(cols)}));
    rm = e.declare(ValueKind::State, "rm", f32({c(cols)}));
    rv = e.declare(ValueKind::State, "rv", f32({c(cols)}));
    e.op(OpKind::BnUpdate, {rm, rv, e.op(OpKind::ColMean, {x}), e.op(OpKind::ColVar, {x})},
         {{"momentum", num(0.25)}, {"count", AttrValue::extent(count)}});
    Graph counted = e.finish();
    DimBindings bound{{"N", rows}, {"B", 2}, {"T", 5}};
    TensorMap t3 = random_tensors(counted, bound, 9);
    const TensorMap entry = t3;
    interpret(counted, Mode::Train, bound, t3);
    std::vector<double> var3 = column_variance(entry.at("x").data, rows, cols);
    for (int64_t j = 0; j < cols; ++j)
      CHECK(t3["rv"].data[j] ==
            doctest::Approx(0.75 * entry.at("rv").data[j] + 0.25 * var3[j] * n / (n - 1))
                .epsilon(1e-14));
  }
}

TEST_CASE("interpreter: bn_update rejects a count of 1 or an unbound dim") {
  for (Dim count : {c(1), Dim::symbol("N"), Dim::symbol("M")}) {
    GraphBuilder b("update", {"N"});
    ValueId rm = b.declare(ValueKind::State, "rm", f32({c(2)}));
    ValueId rv = b.declare(ValueKind::State, "rv", f32({c(2)}));
    b.op(OpKind::BnUpdate, {rm, rv, rm, rv},
         {{"momentum", num(0.1)}, {"count", AttrValue::extent(count)}});
    Graph g = b.finish();
    TensorMap t{{"rm", tensor({2}, {0, 0})}, {"rv", tensor({2}, {1, 1})}};
    std::string msg = error_of([&] { interpret(g, Mode::Train, {{"N", 1}}, t); });
    CAPTURE(msg);
    if (count.sym == "M")
      CHECK(msg.find("dim 'M' of %2 (bn_update): count=M is not bound") != std::string::npos);
    else
      CHECK(msg.find("count must be more than 1") != std::string::npos);
    check_values(t["rv"], {2}, {1, 1});
  }
}

// The interpreter reads declarations in place, so it must not bind a temporary map.
static_assert(!std::is_constructible_v<Interpreter, const Graph &, Mode, DimBindings, TensorMap>);
static_assert(std::is_constructible_v<Interpreter, const Graph &, Mode, DimBindings, TensorMap &>);

TEST_CASE("interpreter: reads of a state see its entry value") {
  GraphBuilder b("state", {"N"});
  ValueId x = b.declare(ValueKind::Input, "x", f32({N, c(2)}));
  ValueId rm = b.declare(ValueKind::State, "rm", f32({c(2)}));
  ValueId rv = b.declare(ValueKind::State, "rv", f32({c(2)}));
  b.add_output(b.op(OpKind::BatchNorm, {x, rm, rv}));
  ValueId after = b.op(OpKind::Add, {x, rm});
  b.add_output(after);
  Graph g = b.finish();
  TensorMap t{{"x", kThreeRows}, {"rm", tensor({2}, {100, 200})}, {"rv", tensor({2}, {1, 1})}};
  Interpreter in(g, Mode::Train, {{"N", 3}}, t);
  in.eval_all();
  check_values(in.value(after), {3, 2}, {101, 200, 102, 200, 103, 206});
  check_values(in.value(rm), {2}, {100, 200});
  check_values(in.state_updates().at("rm"), {2}, {90.2, 180.2});
  check_values(t["rm"], {2}, {100, 200}); // the caller's map changes only through interpret()
  interpret(g, Mode::Train, {{"N", 3}}, t);
  check_values(t["rm"], {2}, {90.2, 180.2});
}

TEST_CASE("interpreter: a state updated twice in one run is an error") {
  GraphBuilder b("twice", {"N"});
  ValueId x = b.declare(ValueKind::Input, "x", f32({N, c(2)}));
  ValueId rm = b.declare(ValueKind::State, "rm", f32({c(2)}));
  ValueId rv = b.declare(ValueKind::State, "rv", f32({c(2)}));
  ValueId y = b.op(OpKind::BatchNorm, {x, rm, rv});
  b.add_output(b.op(OpKind::BatchNorm, {y, rm, rv}));
  Graph g = b.finish();
  TensorMap t{{"x", kThreeRows}, {"rm", tensor({2}, {0, 0})}, {"rv", tensor({2}, {1, 1})}};
  CHECK(error_of([&] {
          interpret(g, Mode::Train, {{"N", 3}}, t);
        }).find("state 'rm' is updated by both") != std::string::npos);
  CHECK(error_of([&] { interpret(g, Mode::Eval, {{"N", 3}}, t); }).empty());
}

TEST_CASE("interpreter: train-mode running stats must be states") {
  GraphBuilder b("param", {"N"});
  ValueId x = b.declare(ValueKind::Input, "x", f32({N, c(2)}));
  ValueId rm = b.declare(ValueKind::Param, "rm", f32({c(2)}));
  ValueId rv = b.declare(ValueKind::State, "rv", f32({c(2)}));
  b.add_output(b.op(OpKind::BatchNorm, {x, rm, rv}, {}, "y"));
  Graph g = b.finish();
  TensorMap t{{"x", kThreeRows}, {"rm", tensor({2}, {0, 0})}, {"rv", tensor({2}, {1, 1})}};
  CHECK(error_of([&] {
          interpret(g, Mode::Train, {{"N", 3}}, t);
        }) == "'y' (%3, batchnorm) updates param 'rm' (%1), which is not a state");
}

TEST_CASE("interpreter: missing, misshapen and unbound tensors are named") {
  Graph g = batchnorm_graph(true);
  TensorMap good{{"x", kThreeRows},
                 {"weight", tensor({2}, {1, 1})},
                 {"bias", tensor({2}, {0, 0})},
                 {"rm", tensor({2}, {0, 0})},
                 {"rv", tensor({2}, {1, 1})}};
  DimBindings dims{{"N", 3}};
  CHECK(error_of([&] { Interpreter(g, Mode::Train, dims, good); }).empty());

  TensorMap t = good;
  t.erase("bias");
  CHECK(error_of([&] { Interpreter(g, Mode::Train, dims, t); }) ==
        "missing tensor 'bias' for param f32[2]");
  t = good;
  t["x"] = tensor({2, 2}, {1, 2, 3, 4});
  CHECK(error_of([&] { Interpreter(g, Mode::Train, dims, t); }) ==
        "tensor 'x' has shape [2, 2], expected [3, 2] for input f32[N, 2]");
  t = good;
  t["rv"].data.pop_back();
  CHECK(error_of([&] { Interpreter(g, Mode::Train, dims, t); }) ==
        "tensor 'rv' has shape [2] but holds 1 values");
  CHECK(error_of([&] { Interpreter(g, Mode::Train, {}, good); }) ==
        "input 'x' (%0): dim 'N' of f32[N, 2] is not bound");
  CHECK(error_of([&] {
          Interpreter(g, Mode::Train, {{"N", 0}}, good);
        }) == "input 'x' (%0): f32[N, 2]: dim N = 0 is out of range; dims are integers in [1, "
              "2147483647]");
}

TEST_CASE("interpreter: evaluation order and ill-typed graphs are checked") {
  GraphBuilder b("order");
  ValueId x = b.declare(ValueKind::Input, "x", f32({c(2)}));
  ValueId r = b.op(OpKind::Relu, {x});
  ValueId s = b.op(OpKind::Sigmoid, {r}, {}, "s");
  Graph g = b.finish();
  TensorMap t{{"x", tensor({2}, {-1, 1})}};
  Interpreter in(g, Mode::Eval, {}, t);
  CHECK(in.computed(x));
  CHECK_FALSE(in.computed(r));
  CHECK(error_of([&] { in.value(r); }) == "%1 (relu) has not been computed");
  CHECK(error_of([&] { in.eval(s); }) ==
        "cannot evaluate 's' (%2, sigmoid): its argument %1 (relu) has not been computed");
  in.eval(r);
  in.eval(s);
  check_values(in.value(s), {2}, {0.5, 0.7310585786300049});

  Graph bad = g;
  bad.values[static_cast<size_t>(r)].type = f32({c(3)});
  Interpreter in_bad(bad, Mode::Eval, {}, t);
  CHECK(error_of([&] { in_bad.eval(r); }) ==
        "%1 (relu) is recorded as f32[3] but its arguments give f32[2]");
}

TEST_CASE("interpreter: constant is a [1] tensor that broadcasts") {
  GraphBuilder b("const");
  ValueId x = b.declare(ValueKind::Input, "x", f32({c(2)}));
  ValueId k = b.op(OpKind::Constant, {}, {{"value", num(0.25)}, {"dtype", {0, "f32"}}});
  b.add_output(k);
  b.add_output(b.op(OpKind::Mul, {x, k}));
  Graph g = b.finish();
  TensorMap t{{"x", tensor({2}, {4, -8})}};
  auto out = interpret(g, Mode::Eval, {}, t);
  check_values(out[0], {1}, {0.25});
  check_values(out[1], {2}, {1, -2});
}

TEST_CASE("round_to: bf16 and f16 round to nearest even, as cvt.rn does, f32 stays exact") {
  CHECK(round_to(DType::F32, 1 + 1e-10) == 1 + 1e-10);
  // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7, even is 1.
  CHECK(round_to(DType::BF16, 1 + std::ldexp(1.0, -8)) == 1);
  CHECK(round_to(DType::BF16, 1 + 3 * std::ldexp(1.0, -8)) == 1 + std::ldexp(1.0, -6));
  CHECK(round_to(DType::BF16, -3.14159) == -3.140625);
  CHECK(std::isinf(round_to(DType::BF16, 3.4e38)));
  // f16 keeps 11 significant bits, its largest value is 65504, its subnormals step 2^-24.
  CHECK(round_to(DType::F16, 1 + std::ldexp(1.0, -11)) == 1);
  CHECK(round_to(DType::F16, 1 + 3 * std::ldexp(1.0, -11)) == 1 + std::ldexp(1.0, -9));
  CHECK(round_to(DType::F16, 65519) == 65504);
  CHECK(std::isinf(round_to(DType::F16, 65520)));
  CHECK(round_to(DType::F16, 3 * std::ldexp(1.0, -26)) == std::ldexp(1.0, -24));
  CHECK(round_to(DType::F16, 0.1) == 0.0999755859375);
  CHECK(std::isnan(round_to(DType::BF16, std::nan(""))));
}

TEST_CASE("interpreter: math is double, outputs and state updates are rounded to their type") {
  GraphBuilder b("bf16", {"N"});
  TensorType t16{DType::BF16, {c(1)}};
  ValueId x = b.declare(ValueKind::Input, "x", t16);
  ValueId y = b.declare(ValueKind::Input, "y", t16);
  ValueId sum = b.op(OpKind::Add, {x, y});
  b.add_output(sum);
  b.add_output(b.op(OpKind::Sub, {sum, x})); // the unrounded sum: 1e-10
  Graph g = b.finish();
  TensorMap t{{"x", tensor({1}, {1})}, {"y", tensor({1}, {1e-10})}};
  std::vector<HostTensor> out = interpret(g, Mode::Eval, {}, t);
  CHECK(out[0].data[0] == 1);
  CHECK(out[1].data[0] == doctest::Approx(1e-10).epsilon(1e-6));

  // bf16 activations, f32 running statistics: the output is bf16, the statistics stay f32.
  GraphBuilder m("mixed", {"N"});
  ValueId h = m.declare(ValueKind::Input, "h", {DType::BF16, {N, c(2)}});
  ValueId rm = m.declare(ValueKind::State, "rm", f32({c(2)}));
  ValueId rv = m.declare(ValueKind::State, "rv", {DType::BF16, {c(2)}});
  m.add_output(m.op(OpKind::BatchNorm, {h, rm, rv}));
  Graph mg = m.finish();
  TensorMap mt{{"h", kThreeRows}, {"rm", tensor({2}, {0.1, 0.1})}, {"rv", tensor({2}, {1, 1})}};
  out = interpret(mg, Mode::Train, {{"N", 3}}, mt);
  for (double v : out[0].data)
    CHECK(v == round_to(DType::BF16, v));
  check_values(mt["rm"], {2}, {0.9 * 0.1 + 0.1 * 2, 0.9 * 0.1 + 0.1 * 2});
  // 0.9 + 0.1 * 8 * 3/2 = 2.1, which bf16 holds as 2.09375.
  CHECK(mt["rv"].data[1] == 2.09375);
}

TEST_CASE("random_tensors: values are rounded to each declaration's type") {
  GraphBuilder b("types", {"N"});
  b.declare(ValueKind::Input, "x", {DType::BF16, {N, c(16)}});
  b.declare(ValueKind::Input, "y", {DType::F16, {N, c(16)}});
  b.declare(ValueKind::Input, "z", f32({N, c(16)}));
  Graph g = b.finish();
  TensorMap t = random_tensors(g, {{"N", 8}}, 1);
  bool z_beyond_bf16 = false;
  for (size_t i = 0; i < t["x"].data.size(); ++i) {
    CHECK(t["x"].data[i] == round_to(DType::BF16, t["x"].data[i]));
    CHECK(t["y"].data[i] == round_to(DType::F16, t["y"].data[i]));
    z_beyond_bf16 |= t["z"].data[i] != round_to(DType::BF16, t["z"].data[i]);
  }
  CHECK(z_beyond_bf16);
}

TEST_CASE("random_tensors: deterministic, normal, positive running variances") {
  auto build = [](bool reversed) {
    GraphBuilder b("rand", {"N"});
    std::vector<ValueId> ids(5);
    std::vector<int> order{0, 1, 2, 3, 4};
    if (reversed)
      order = {4, 3, 2, 1, 0};
    for (int i : order) {
      switch (i) {
      case 0:
        ids[0] = b.declare(ValueKind::Input, "x", f32({N, c(64)}));
        break;
      case 1:
        ids[1] = b.declare(ValueKind::State, "rm", f32({c(64)}));
        break;
      case 2:
        ids[2] = b.declare(ValueKind::State, "rv", f32({c(64)}));
        break;
      case 3:
        ids[3] = b.declare(ValueKind::State, "rv2", f32({c(64)}));
        break;
      case 4:
        ids[4] = b.declare(ValueKind::Param, "odd", f32({c(3)}));
        break;
      }
    }
    ValueId y = b.op(OpKind::BatchNorm, {ids[0], ids[1], ids[2]});
    b.op(OpKind::BnUpdate, {ids[1], ids[3], b.op(OpKind::ColMean, {y}), b.op(OpKind::ColVar, {y})},
         {{"momentum", num(0.1)}, {"count", AttrValue::extent(N)}});
    return b.finish();
  };
  Graph g = build(false);
  DimBindings dims{{"N", 64}};
  TensorMap a = random_tensors(g, dims, 42);
  REQUIRE(a.size() == 5);
  CHECK(a["x"].shape == std::vector<int64_t>{64, 64});
  CHECK(a["odd"].shape == std::vector<int64_t>{3});
  CHECK(a["x"].data == random_tensors(g, dims, 42)["x"].data);
  CHECK(a["x"].data != random_tensors(g, dims, 43)["x"].data);
  // Each name has its own stream: rm is not a prefix of x.
  CHECK_FALSE(std::equal(a["rm"].data.begin(), a["rm"].data.end(), a["x"].data.begin()));
  TensorMap reordered = random_tensors(build(true), dims, 42);
  for (const auto &named : a)
    CHECK_MESSAGE(reordered[named.first].data == named.second.data, named.first);

  for (const char *name : {"rv", "rv2"})
    for (double v : a[name].data) {
      CHECK(v >= 0.5);
      CHECK(v <= 1.5);
    }
  bool rm_negative = false;
  for (double v : a["rm"].data)
    rm_negative |= v < 0;
  CHECK(rm_negative);
  double sum = 0, sq = 0;
  for (double v : a["x"].data)
    sum += v;
  double mean = sum / 4096;
  for (double v : a["x"].data)
    sq += (v - mean) * (v - mean);
  CHECK(std::abs(mean) < 0.05);
  CHECK(sq / 4096 == doctest::Approx(1).epsilon(0.05));
  for (double v : a["odd"].data) // Box-Muller's unpaired last value is filled too
    CHECK((std::isfinite(v) && v != 0));
}

TEST_CASE("relative_error") {
  CHECK(relative_error({1, 2}, {1, 2}) == 0);
  CHECK(relative_error({1, 1}, {1, 0}) == 1);
  CHECK(relative_error({1, 2}, {2, 2}) == doctest::Approx(1 / std::sqrt(8.0)));
  CHECK(relative_error({0, 0}, {0, 0}) == 0);
  CHECK(relative_error({3, 4}, {0, 0}) == doctest::Approx(std::sqrt(12.5)));
  // A reference that is zero up to fp64 rounding has no scale: the rms of the difference.
  CHECK(relative_error({0, 0}, {1e-16, 0}) == doctest::Approx(1e-16 / std::sqrt(2.0)));
  CHECK(relative_error({1e-6, 0}, {1e-16, 0}) > 5e-7);
  CHECK_THROWS_AS(relative_error({1}, {1, 2}), std::invalid_argument);
}

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInfinity = std::numeric_limits<double>::infinity();

// `op` applied by the interpreter to each of xs (and ys for a binary op), through a graph.
std::vector<double> apply(OpKind op, const std::vector<double> &xs, AttrMap attrs = {},
                          const std::vector<double> &ys = {}) {
  GraphBuilder b("pointwise");
  int64_t n = static_cast<int64_t>(xs.size());
  ValueId x = b.declare(ValueKind::Input, "x", f32({c(n)}));
  std::vector<ValueId> args = {x};
  if (!ys.empty())
    args.push_back(b.declare(ValueKind::Input, "y", f32({c(n)})));
  b.add_output(b.op(op, args, std::move(attrs)));
  Graph g = b.finish();
  TensorMap t{{"x", tensor({n}, xs)}};
  if (!ys.empty())
    t["y"] = tensor({n}, ys);
  return interpret(g, Mode::Eval, {}, t)[0].data;
}

// Equal as PyTorch's float64 would print them: NaN matches NaN, infinities exactly,
// finite values to 1e-14 relative.
void check_same(const std::vector<double> &got, const std::vector<double> &expected) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element ", i, ": got ", got[i], ", expected ", expected[i]);
    if (std::isnan(expected[i]))
      CHECK(std::isnan(got[i]));
    else if (std::isinf(expected[i]))
      CHECK(got[i] == expected[i]);
    else
      CHECK(got[i] == doctest::Approx(expected[i]).epsilon(1e-14));
  }
}

AttrValue word(const char *w) { return {0, w}; }

const std::vector<double> kXs = {-3.0, -0.5, 0.0, 0.5, 3.0};

} // namespace

// Expected values: Python's math module in double, with PyTorch's formulas.
TEST_CASE("interpreter: pointwise activations match PyTorch's definitions") {
  check_same(apply(OpKind::Relu, {-1, -0.0, 2, kNaN, -kInfinity}), {0, -0.0, 2, kNaN, 0});
  check_same(apply(OpKind::LeakyRelu, {-2, 0, 3, kNaN, -kInfinity}),
             {-0.02, 0, 3, kNaN, -kInfinity});
  check_same(apply(OpKind::LeakyRelu, {-2, 3}, {{"negative_slope", num(0.2)}}), {-0.4, 3});
  check_same(apply(OpKind::Gelu, kXs), {-0.00404969409489031, -0.15426876936299344, 0.0,
                                        0.34573123063700656, 2.99595030590511});
  check_same(
      apply(OpKind::Gelu, kXs, {{"approximate", word("tanh")}}),
      {-0.0036373920817729943, -0.15428599017485606, 0.0, 0.34571400982514394, 2.996362607918227});
  check_same(apply(OpKind::Gelu, {kNaN, kInfinity, -kInfinity}), {kNaN, kInfinity, kNaN});
  check_same(apply(OpKind::Silu, kXs), {-0.14227761953270035, -0.1887703343990727, 0.0,
                                        0.3112296656009273, 2.8577223804672998});
  check_same(apply(OpKind::Silu, {-kInfinity, kInfinity, -1000}), {kNaN, kInfinity, -0.0});
  check_same(apply(OpKind::Sigmoid, {-kInfinity, 0, kInfinity, kNaN}), {0, 0.5, 1, kNaN});
  check_same(apply(OpKind::Tanh, {-kInfinity, 0, kInfinity}), {-1, 0, 1});
  check_same(apply(OpKind::Mish, kXs),
             {-0.1456474612756246, -0.22074377465173, 0.0, 0.3752452113048951, 2.9865350049679575});
  check_same(apply(OpKind::Mish, {kInfinity, -kInfinity, 1000}), {kInfinity, kNaN, 1000});
  check_same(apply(OpKind::Hardsigmoid, kXs),
             {0.0, 0.4166666666666667, 0.5, 0.5833333333333334, 1.0});
  check_same(apply(OpKind::Hardswish, kXs),
             {-0.0, -0.20833333333333334, 0.0, 0.2916666666666667, 3.0});
  check_same(apply(OpKind::Hardswish, {kNaN, -kInfinity}), {kNaN, kNaN});
  check_same(apply(OpKind::Elu, kXs, {{"alpha", num(0.5)}}),
             {-0.475106465816068, -0.1967346701436833, 0.0, 0.5, 3.0});
  check_same(apply(OpKind::Elu, {kNaN, -kInfinity}), {kNaN, -1});
  check_same(apply(OpKind::Selu, kXs), {-1.6705687287671118, -0.6917581878028713, 0.0,
                                        0.5253504936777402, 3.1521029620664414});
  check_same(apply(OpKind::LogSigmoid, kXs),
             {-3.048587351573742, -0.9740769841801067, -0.6931471805599453, -0.4740769841801067,
              -0.04858735157374206});
  check_same(apply(OpKind::LogSigmoid, {-kInfinity, kInfinity, -1000, kNaN}),
             {-kInfinity, 0, -1000, kNaN});
  check_same(apply(OpKind::Softsign, kXs), {-0.75, -1.0 / 3, 0.0, 1.0 / 3, 0.75});
  check_same(apply(OpKind::Softsign, {-0.0, kInfinity, -kInfinity, kNaN}),
             {-0.0, kNaN, kNaN, kNaN});
}

TEST_CASE("interpreter: softplus follows its threshold as PyTorch does") {
  check_same(apply(OpKind::Softplus, kXs),
             {0.04858735157374206, 0.4740769841801067, 0.6931471805599453, 0.9740769841801067,
              3.048587351573742});
  // beta=2, threshold=1: above x * beta > 1 the input is returned as is (3.0, not 3.0000012).
  check_same(
      apply(OpKind::Softplus, kXs, {{"beta", num(2)}, {"threshold", num(1)}}),
      {0.0012378425688652247, 0.15663084375911143, 0.34657359027997264, 0.6566308437591114, 3.0});
  // At the default threshold 20, 21 is returned as is; 19 goes through log1p(exp()).
  check_same(apply(OpKind::Softplus, {21, 19, kNaN, -kInfinity}),
             {21, 19.000000005602796, kNaN, 0});
}

TEST_CASE("interpreter: clamp and hardtanh keep NaN and take one-sided bounds") {
  check_same(apply(OpKind::Clamp, {-5, 0.5, 5, kNaN}, {{"min", num(-1)}, {"max", num(1)}}),
             {-1, 0.5, 1, kNaN});
  check_same(apply(OpKind::Clamp, {-5, 5, -kInfinity}, {{"min", num(0)}}), {0, 5, 0});
  check_same(apply(OpKind::Clamp, {-5, 5, kInfinity}, {{"max", num(0)}}), {-5, 0, 0});
  // min > max: every value becomes max, as torch.clamp.
  check_same(apply(OpKind::Clamp, {-5, 5}, {{"min", num(2)}, {"max", num(1)}}), {1, 1});
  check_same(apply(OpKind::Hardtanh, {-5, 0.25, 5, kNaN}), {-1, 0.25, 1, kNaN});
  check_same(apply(OpKind::Hardtanh, {-5, 5}, {{"min_val", num(0)}, {"max_val", num(6)}}), {0, 5});
}

TEST_CASE("interpreter: elementary functions and their edge cases") {
  check_same(apply(OpKind::Exp, {0, 1, -kInfinity, 1000}), {1, M_E, 0, kInfinity});
  check_same(apply(OpKind::Log, {1, 0, -1, kInfinity}), {0, -kInfinity, kNaN, kInfinity});
  check_same(apply(OpKind::Abs, {-2, -0.0, kNaN, -kInfinity}), {2, 0, kNaN, kInfinity});
  check_same(apply(OpKind::Neg, {2, 0, -kInfinity}), {-2, -0.0, kInfinity});
  check_same(apply(OpKind::Sqrt, {4, 0, -1}), {2, 0, kNaN});
  check_same(apply(OpKind::Rsqrt, {4, 0, -1, kInfinity}), {0.5, kInfinity, kNaN, 0});
  check_same(apply(OpKind::Square, {-3, kNaN, -kInfinity}), {9, kNaN, kInfinity});
  check_same(apply(OpKind::Reciprocal, {4, 0, -0.0, kInfinity}), {0.25, kInfinity, -kInfinity, 0});
}

TEST_CASE("interpreter: binary pointwise ops, NaN-propagating maximum and minimum") {
  std::vector<double> a = {1, -2, kNaN, 3, 2};
  std::vector<double> b = {2, kNaN, 1, -kInfinity, 0.5};
  check_same(apply(OpKind::Maximum, a, {}, b), {2, kNaN, kNaN, 3, 2});
  check_same(apply(OpKind::Minimum, a, {}, b), {1, kNaN, kNaN, -kInfinity, 0.5});
  check_same(apply(OpKind::Pow, {2, -8, 0, 4, -2}, {}, {10, 1.0 / 3, -1, 0.5, 2}),
             {1024, kNaN, kInfinity, 2, 4});
  check_same(apply(OpKind::Div, {1, -1, 0}, {}, {0, 0, 0}), {kInfinity, -kInfinity, kNaN});
}

TEST_CASE("interpreter: every pointwise op of the table has semantics the interpreter runs") {
  // A forgotten op would throw or return the input unchanged; each must change some value.
  for (const OpInfo &op : all_ops()) {
    if (!is_pointwise(op.kind))
      continue;
    INFO(op.name);
    AttrMap attrs;
    if (op.kind == OpKind::Clamp)
      attrs["min"] = num(0);
    if (op.kind == OpKind::Cast)
      attrs["dtype"] = {0, "bf16"};
    std::vector<double> xs = {-2.5, -0.75, 0.3, 1.7, 4.2};
    std::vector<double> ys(xs.rbegin(), xs.rend());
    std::vector<double> got =
        op.cls == OpClass::Binary ? apply(op.kind, xs, attrs, ys) : apply(op.kind, xs, attrs);
    CHECK(got != xs);
  }
}

TEST_CASE("interpreter: random data is positive where a square root reads it, eps added or not") {
  // rsqrt(v + eps) is eval-mode batchnorm as a backward graph spells it; sqrt(w) bare; u is read
  // by a square root only after adding another declaration, so it may be negative.
  GraphBuilder b("roots", {});
  const ValueId v = b.declare(ValueKind::State, "v", f32({c(64)}));
  const ValueId w = b.declare(ValueKind::Input, "w", f32({c(64)}));
  const ValueId u = b.declare(ValueKind::Input, "u", f32({c(64)}));
  const ValueId eps =
      b.op(OpKind::Constant, {}, {{"value", num(1e-5)}, {"dtype", AttrValue(0, "f32")}});
  b.add_output(b.op(OpKind::Rsqrt, {b.op(OpKind::Add, {v, eps})}));
  b.add_output(b.op(OpKind::Sqrt, {w}));
  b.add_output(b.op(OpKind::Sqrt, {b.op(OpKind::Add, {u, w})}));
  const TensorMap t = random_tensors(b.finish(), {}, 11);
  auto positive = [&](const std::string &name) {
    const std::vector<double> &d = t.at(name).data;
    return std::all_of(d.begin(), d.end(), [](double x) { return x > 0; });
  };
  CHECK(positive("v"));
  CHECK(positive("w"));
  CHECK_FALSE(positive("u"));
}
