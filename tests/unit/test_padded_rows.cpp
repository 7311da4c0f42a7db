// Half-precision GEMM operands that kernels write with rows padded to 16 bytes
// (select::padded_rows), so that the Hopper GEMM's TMA reads them at any inner dim: a row
// kernel's or a GEMM row epilogue's rows, and the transposes and column sums that read them too.
#include "compiler/build_executable.h"
#include "compiler/dsl/diagnostics.h"
#include "compiler/ir/printer.h"
#include "compiler/lower.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>

using namespace kfuse;

namespace {

// A 10-class classifier head in training: the backward's dX = dlogits W multiplies over the
// classes, and dlogits (the cross-entropy gradient, a row kernel's) is also read by the
// transpose feeding dW and by the column sum of the bias gradient.
std::string classifier_head(const std::string &dtype) {
  return fmt::format("pipeline lce {{\n  dim N\n  input x: {0}[N, 16]\n  input target: i64[N]\n"
                     "  param w: {0}[10, 16]\n  param b: {0}[10]\n"
                     "  return cross_entropy(linear(x, w, b), target, label_smoothing=0.1)\n}}\n",
                     dtype);
}

LowerOptions bf16_on_hopper() {
  LowerOptions o;
  o.mode = ir::Mode::Train;
  o.target.arch = "sm_90a";
  o.target.precision = Precision::BF16;
  return o;
}

// The printed name of the value of `op` in `l`'s plan graph that a kernel stores padded.
std::string padded_value(const Lowered &l, ir::OpKind op) {
  const ir::Graph &g = l.plan.graph;
  for (const auto &[v, multiple] : l.program.row_multiples)
    if (g[v].is_op() && g[v].op == op && multiple == 8)
      return ir::printed_names(g)[static_cast<size_t>(v)];
  return "";
}

bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("lower: the bf16 backward of a 10-class linear -> cross_entropy writes dlogits with "
          "rows padded for dX's GEMM, read at that pitch by dW's transpose and db's column sum") {
  const LoweredTraining t =
      lower_training(dsl::SourceFile("lce.kf", classifier_head("bf16")), bf16_on_hopper());
  const std::string &cu = t.backward.program.source;
  const std::string dlogits = padded_value(t.backward, ir::OpKind::CrossEntropyBackward);
  REQUIRE(dlogits != "");
  // The row kernel writes each row of 10 at a pitch of 8-element multiples; the tensor map of
  // dX's GEMM reads that pitch, the transpose and the column partials read it too.
  CHECK(contains(cu, fmt::format(", p_{}, 16, ", dlogits)));
  CHECK(contains(cu, "kf::row_cross_entropy_grad<"));
  CHECK(contains(cu, fmt::format("kf::transpose_tile(p_{}, 16, ", dlogits)));
  CHECK(contains(cu, fmt::format("kf::col_partials(d_N, 10, p_{}, 16, ", dlogits)));
  CHECK(contains(cu, "kf::Sm90Gemm<kf::sm90::Operand::Bf16"));
  bool map_reads_pitch = false;
  for (const codegen::KernelLaunch &l : t.backward.program.launches)
    for (const codegen::LaunchParam &p : l.params)
      if (p.kind == codegen::LaunchParam::Kind::TensorMap &&
          ir::printed_names(t.backward.plan.graph)[static_cast<size_t>(p.value)] == dlogits)
        map_reads_pitch = p.map.row_multiple == 8;
  CHECK(map_reads_pitch);
  // The GEMM's config says who writes its operands padded and who else reads them so.
  bool said = false;
  for (const codegen::KernelLaunch &l : t.backward.program.launches)
    said = said || contains(l.config, fmt::format("its operands {} (by k3_row, read at that "
                                                  "pitch by k6_transpose and k9_col_partials)",
                                                  dlogits));
  CHECK(said);
}

TEST_CASE("lower: the f32 head at precision bf16 rounds dlogits into a padded copy for dX") {
  const LoweredTraining t =
      lower_training(dsl::SourceFile("lce.kf", classifier_head("f32")), bf16_on_hopper());
  const std::string rounded = padded_value(t.backward, ir::OpKind::Cast);
  REQUIRE(rounded != "");
  CHECK(contains(t.backward.program.source, "kf::map_elements<1>(d_N, 10, 16, "));
  CHECK(contains(t.backward.program.source, "kf::Sm90Gemm<kf::sm90::Operand::Bf16"));
}

TEST_CASE("lower: a softmax's rows feed a bf16 matmul over 10 features, from a row kernel and "
          "from a GEMM's row epilogue") {
  LowerOptions o = bf16_on_hopper();
  o.target.precision = Precision::FP32;
  const Lowered row = lower(dsl::SourceFile("s.kf", "pipeline s {\n  dim N\n"
                                                    "  input x: bf16[N, 10]\n"
                                                    "  param w: bf16[10, 4]\n"
                                                    "  y = softmax(x, dim=1)\n"
                                                    "  return matmul(y, w)\n}\n"),
                            o);
  CHECK(contains(row.program.source, "kf::row_softmax<128, false>(row, 10, p_x, 10, p_y, 16, "));
  const Lowered staged = lower(dsl::SourceFile("s.kf", "pipeline s {\n  dim N\n"
                                                       "  input x: bf16[N, 16]\n"
                                                       "  param w1: bf16[10, 16]\n"
                                                       "  param w2: bf16[10, 4]\n"
                                                       "  h = softmax(linear(x, w1), dim=1)\n"
                                                       "  return matmul(h, w2)\n}\n"),
                               o);
  CHECK(contains(staged.program.source, "p_h + static_cast<long long>(row) * 16, "));
  CHECK(padded_value(staged, ir::OpKind::Softmax) == "h");
}

TEST_CASE("lower: rows another kernel reads packed, or the caller gets, are not padded: an "
          "error at the GEMM's location") {
  // The softmax is returned as well: its rows stay packed, and the GEMM over 10 cannot run.
  const std::string text = "pipeline s {\n  dim N\n  input x: bf16[N, 10]\n"
                           "  param w: bf16[10, 4]\n  y = softmax(x, dim=1)\n"
                           "  return matmul(y, w), y\n}\n";
  LowerOptions o = bf16_on_hopper();
  o.target.precision = Precision::FP32;
  CHECK_THROWS_WITH_AS(lower(dsl::SourceFile("s.kf", text), o),
                       doctest::Contains("s.kf:6:10: error: linear of bf16 operands runs on the "
                                         "Hopper GEMM, which needs the inner dim a constant "
                                         "multiple of 8"),
                       dsl::DiagnosticError);
  // A pointwise op of the softmax reads it element by element at the packed pitch.
  const std::string pointwise = "pipeline s {\n  dim N\n  input x: bf16[N, 10]\n"
                                "  param w: bf16[10, 4]\n  y = softmax(x, dim=1)\n"
                                "  return matmul(y, w), sum(exp(y), dim=1)\n}\n";
  CHECK_THROWS_WITH_AS(lower(dsl::SourceFile("s.kf", pointwise), o),
                       doctest::Contains("s.kf:6:10: error: linear of bf16 operands"),
                       dsl::DiagnosticError);
}

TEST_CASE("lower: a dropout that eval mode removes leaves its GEMM reading the declared tensor: "
          "an error at the GEMM's location, as in any mode where no kernel writes the operand") {
  // In train mode the dropout's kernel writes the operand with padded rows; in eval mode the
  // planner removes the dropout, and the GEMM would read x's packed rows.
  const std::string text = "pipeline d {\n  dim N\n  input x: bf16[N, 10]\n"
                           "  param w: bf16[10, 16]\n  return matmul(dropout(x, p=0.1), w)\n}\n";
  LowerOptions o = bf16_on_hopper();
  o.target.precision = Precision::FP32;
  CHECK_NOTHROW(lower(dsl::SourceFile("d.kf", text), o));
  o.mode = ir::Mode::Eval;
  CHECK_THROWS_WITH_AS(lower(dsl::SourceFile("d.kf", text), o),
                       doctest::Contains("d.kf:5:10: error: linear of bf16 operands runs on the "
                                         "Hopper GEMM, which needs the inner dim a constant "
                                         "multiple of 8"),
                       dsl::DiagnosticError);
}
