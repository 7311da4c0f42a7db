// cross_entropy with i64 class-index targets: the DSL's rules for i64 tensors, the fp64
// semantics by hand (PyTorch's F.cross_entropy), its gradient against finite differences, and
// what reverse mode does with the target.
#include "compiler/ir/grad.h"
#include "compiler/ir/interpreter.h"
#include "compiler/ir/printer.h"
#include "compiler/lower.h"
#include "runtime/tensor_checks.h"
#include "tests/support/grad_check.h"
#include "tests/support/kf_text.h"

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cmath>
#include <string>

using namespace kfuse;
using ir::HostTensor;

namespace {

std::string pipeline(const std::string &decls, const std::string &body) {
  return fmt::format("pipeline p {{\n  dim N\n  input x: f32[N, 3]\n  input t: i64[N]\n{}{}\n}}\n",
                     decls, body);
}

std::string error_of(const std::string &text) { return testing::kf_error(text, "ce.kf"); }

// The per-row loss of logits `row` and class t, as PyTorch's formula reads.
double row_loss(const std::vector<double> &row, int t, double eps) {
  double lse = 0, mean = 0;
  for (double v : row)
    lse += std::exp(v), mean += v / static_cast<double>(row.size());
  lse = std::log(lse);
  return (1 - eps) * (lse - row[static_cast<size_t>(t)]) + eps * (lse - mean);
}

std::vector<HostTensor> run(const std::string &attrs, const HostTensor &x, const HostTensor &t) {
  ir::Graph g =
      testing::parse_kf_text(pipeline("", "  return cross_entropy(x, t" + attrs + ")"), "ce.kf");
  ir::TensorMap m{{"x", x}, {"t", t}};
  return ir::interpret(g, ir::Mode::Train, {{"N", x.shape[0]}}, m);
}

} // namespace

TEST_CASE("cross_entropy: per row, summed and averaged over the rows not ignored") {
  const HostTensor x{{3, 3}, {1, 2, 3, -1, 0, 4, 0.5, 0.5, -2}};
  const HostTensor t{{3}, {2, -100, 0}};
  for (double eps : {0.0, 0.2}) {
    CAPTURE(eps);
    const std::string smoothing = fmt::format(", label_smoothing={}", eps);
    const double l0 = row_loss({1, 2, 3}, 2, eps), l2 = row_loss({0.5, 0.5, -2}, 0, eps);
    HostTensor none = run(", reduction=\"none\"" + smoothing, x, t)[0];
    REQUIRE(none.shape == std::vector<int64_t>{3});
    CHECK(none.data[0] == doctest::Approx(l0).epsilon(1e-14));
    CHECK(none.data[1] == 0); // ignored
    CHECK(none.data[2] == doctest::Approx(l2).epsilon(1e-14));
    CHECK(run(", reduction=\"sum\"" + smoothing, x, t)[0].data[0] ==
          doctest::Approx(l0 + l2).epsilon(1e-14));
    HostTensor mean = run(smoothing, x, t)[0];
    REQUIRE(mean.shape == std::vector<int64_t>{1});
    CHECK(mean.data[0] == doctest::Approx((l0 + l2) / 2).epsilon(1e-14));
  }
  // ignore_index may name a class: its rows are ignored.
  CHECK(run(", ignore_index=2", x, HostTensor{{3}, {2, 1, 0}})[0].data[0] ==
        doctest::Approx((row_loss({-1, 0, 4}, 1, 0) + row_loss({0.5, 0.5, -2}, 0, 0)) / 2)
            .epsilon(1e-14));
  // Every row ignored: the mean is 0 / 0, as PyTorch's; the sum is 0.
  const HostTensor ignored{{3}, {-100, -100, -100}};
  CHECK(std::isnan(run("", x, ignored)[0].data[0]));
  CHECK(run(", reduction=\"sum\"", x, ignored)[0].data[0] == 0);
}

TEST_CASE("cross_entropy: a target outside the classes is an error naming the row and the value") {
  const HostTensor x{{2, 3}, {1, 2, 3, 4, 5, 6}};
  for (double bad : {3.0, -1.0, 0.5}) {
    CAPTURE(bad);
    std::string message;
    try {
      run("", x, HostTensor{{2}, {0, bad}});
    } catch (const ir::InterpretError &e) {
      message = e.what();
    }
    CHECK(message.find(fmt::format("target[1] = {} is not a class index in [0, 3) nor the "
                                   "ignore_index -100",
                                   ir::format_number(bad))) != std::string::npos);
  }
}

TEST_CASE("cross_entropy: i64 tensors are class indices only, with errors at their place") {
  // Read by another op.
  CHECK(error_of(pipeline("", "  return add(x, t)")) ==
        "ce.kf:5:17: error: add cannot take the i64 tensor i64[N] as its argument 2 ('b'): an i64 "
        "tensor holds class indices, which only a loss's target reads\n"
        "  return add(x, t)\n"
        "                ^\n");
  CHECK(error_of(pipeline("", "  return cross_entropy(t, t)"))
            .find("cross_entropy cannot take the i64 tensor i64[N] as its argument 1 ('logits')") !=
        std::string::npos);
  CHECK(error_of(pipeline("", "  return reshape(t, shape=[N])"))
            .find("reshape cannot take the i64 tensor") != std::string::npos);
  // A target that is not i64, or not one per row.
  CHECK(error_of(pipeline("", "  return cross_entropy(x, x)"))
            .find("cross_entropy takes i64 class indices as its argument 2 ('target'), got "
                  "f32[N, 3]") != std::string::npos);
  CHECK(error_of(pipeline("  input u: i64[3]\n", "  return cross_entropy(x, u)"))
            .find("target must be i64[N], one class index per row of the logits f32[N, 3], got "
                  "i64[3]") != std::string::npos);
  // No param, state or output is i64, and no op computes one.
  CHECK(error_of(pipeline("  param w: i64[3]\n", "  return x")) ==
        "ce.kf:5:12: error: param 'w' cannot be i64: an i64 tensor is only an input read as "
        "class indices\n"
        "  param w: i64[3]\n"
        "           ^~~\n");
  CHECK(error_of(pipeline("  state s: i64[3]\n", "  return x")).find("state 's' cannot be i64") !=
        std::string::npos);
  CHECK(error_of(pipeline("", "  return x, t")) ==
        "ce.kf:5:13: error: a pipeline cannot return the i64 tensor 't': an i64 tensor is only "
        "an input read as class indices\n"
        "  return x, t\n"
        "            ^\n");
  CHECK(error_of(pipeline("", "  return cast(x, dtype=i64)"))
            .find("must be an element type (f32, f16 or bf16), got 'i64'") != std::string::npos);
  // The attributes' ranges.
  CHECK(error_of(pipeline("", "  return cross_entropy(x, t, label_smoothing=1.5)"))
            .find("label_smoothing") != std::string::npos);
  CHECK(error_of(pipeline("", "  return cross_entropy(x, t, reduction=\"max\")"))
            .find("\"mean\", \"none\" or \"sum\"") != std::string::npos);
}

TEST_CASE("cross_entropy: the IR prints back to what parses, i64 declarations included") {
  const std::string text =
      pipeline("", "  return cross_entropy(x, t, ignore_index=1, reduction=\"none\", "
                   "label_smoothing=0.1)");
  const std::string printed = ir::print_kf(testing::parse_kf_text(text, "ce.kf"));
  INFO(printed);
  CHECK(printed.find("input  t: i64[N]") != std::string::npos);
  CHECK(printed.find("cross_entropy(x, t, ignore_index=1, reduction=\"none\", "
                     "label_smoothing=0.1)") != std::string::npos);
  CHECK(ir::print_kf(testing::parse_kf_text(printed, "printed.kf")) == printed);
}

TEST_CASE("grad: cross_entropy at every reduction, ignored rows and label smoothing") {
  for (const char *reduction : {"none", "sum", "mean"})
    for (const char *smoothing : {"0", "0.3"})
      for (const char *ignore : {"-100", "1"}) {
        const std::string text =
            pipeline("  param w: f32[3]\n",
                     fmt::format("  h = mul(x, w)\n  return cross_entropy(h, t, ignore_index={}, "
                                 "reduction=\"{}\", label_smoothing={})",
                                 ignore, reduction, smoothing));
        CAPTURE(text);
        const ir::Graph f = testing::parse_kf_text(text, "ce.kf");
        // 16 rows: with the random targets of seed 11, rows of every class and ignored rows.
        const ir::DimBindings dims{{"N", 16}};
        const ir::TensorMap drawn = ir::random_tensors(f, dims, 11);
        int ignored = 0;
        for (double v : drawn.at("t").data)
          ignored += v == std::stod(ignore);
        CHECK(ignored > 0);
        CHECK(ignored < 16);
        testing::GradReport r = testing::check_gradients(f, ir::Mode::Train, dims, 11);
        CAPTURE(ir::print_kf(r.result.backward));
        CHECK(r.checked > 0);
        CHECK(r.error <= 1e-6);
        // The target is a class index: no gradient, and not perturbed.
        CHECK(ir::gradient_names(r.result) == std::vector<std::string>{"x", "w"});
      }
}

TEST_CASE("cross_entropy: the API takes an i64 target and names a tensor of another dtype") {
  const exec::TensorType declared{DType::I64, {Extent::symbol("N")}};
  alignas(8) static int64_t targets[4] = {0, 1, 2, -100};
  Tensor t{targets, {4}, DType::I64};
  CHECK_NOTHROW(rt::check_layout("pipeline 'lce'", "target", declared, t));
  t.dtype = DType::F32;
  CHECK_THROWS_WITH(rt::check_layout("pipeline 'lce'", "target", declared, t),
                    "pipeline 'lce': tensor 'target' is f32[4], declared i64[N]: kfuse takes i64 "
                    "tensors here");
  // Misaligned for its 8-byte elements.
  Tensor shifted{reinterpret_cast<char *>(targets) + 4, {2}, DType::I64};
  CHECK_THROWS_WITH(rt::check_layout("pipeline 'lce'", "target", declared, shifted),
                    doctest::Contains("is not 8-byte aligned"));
}

TEST_CASE("cross_entropy: the code generator reads the reduction of a loss pass, every reduction "
          "that reaches it") {
  // The reduction reaches the row pass as an attribute of the op (the plan fuzzer found the
  // generator reading a copy of it that no longer existed).
  for (const char *body :
       {"  return cross_entropy_backward(x, t, g, reduction=\"sum\", label_smoothing=0.1)",
        "  return cross_entropy_backward(x, t, h, reduction=\"none\")",
        "  return cross_entropy(x, t, reduction=\"none\")"}) {
    INFO(body);
    const std::string text = pipeline("  input g: f32[1]\n  input h: f32[N]\n", body);
    LowerOptions o;
    o.target.arch = "sm_90a";
    const Lowered l = lower(dsl::SourceFile("ce.kf", text), o);
    CHECK(l.program.source.find("row_cross_entropy") != std::string::npos);
  }
}

TEST_CASE("cross_entropy: a loss pass in a GEMM's row epilogue reads each row's own target") {
  // The epilogue hands the pass a staged row (row argument 0); the target and a per-row
  // gradient are still indexed by the row's place in the tensor.
  const std::string text = "pipeline lce {\n  dim N\n  input x: f32[N, 16]\n  input t: i64[N]\n"
                           "  param w: f32[10, 16]\n  param b: f32[10]\n"
                           "  return cross_entropy(linear(x, w, b), t, label_smoothing=0.1)\n}\n";
  LowerOptions o;
  o.target.arch = "sm_90a";
  const Lowered l = lower(dsl::SourceFile("lce.kf", text), o);
  const std::string &src = l.program.source;
  REQUIRE(src.find("kf::Staged") != std::string::npos); // the GEMM row epilogue's path
  CHECK(src.find("row_cross_entropy<1>(0, 10, x, 0, p_t[row],") != std::string::npos);
  CHECK(src.find("x, 0, p_t,") == std::string::npos);
}
