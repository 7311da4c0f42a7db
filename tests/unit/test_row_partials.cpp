// row_partials_epilogue without a GPU: a wide GEMM product read only by row reductions is
// reduced per column slice in the GEMM's epilogue and never stored; the plans that keep the row
// kernel over the stored product say why; every plan agrees with the fp64 interpreter; the
// generated CUDA compiles with NVRTC on every mainloop the GEMM may take.
#include "compiler/dsl/parser.h"
#include "compiler/passes/passes.h"
#include "compiler/plan/agreement.h"
#include "compiler/plan/plan_printer.h"
#include "compiler/plan/planner.h"
#include "kfuse/kfuse.h"
#include "tests/support/temp_cache.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>

using namespace kfuse;

namespace {

ir::Graph parse_text(const std::string &text) {
  dsl::SourceFile src("row_partials.kf", text);
  dsl::Diagnostics diags(src);
  return dsl::parse_kf(src, diags);
}

// linear(x, w) of `out` features, then the returned values `returns` of it (h).
std::string layer(int out, const std::string &returns) {
  return fmt::format("pipeline layer {{\n  dim N\n  input x: f32[N, 64]\n  param w: f32[{0}, 64]\n"
                     "  param b: f32[{0}]\n  h = linear(x, w, b)\n  return {1}\n}}\n",
                     out, returns);
}

bool has_rule(const plan::Kernel &k, const std::string &rule) {
  return std::count(k.rules.begin(), k.rules.end(), rule) != 0;
}

void expect_agreement(const std::string &text) {
  for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval})
    for (int64_t n : {1, 2, 5}) {
      auto worst = plan::first_failure(
          plan::check_planner(parse_text(text), mode, {{"N", n}}, 7, passes::pipeline()), 1e-9);
      INFO(text, " mode ", ir::mode_name(mode), " N=", n, " worst stage ", worst.stage);
      CHECK(worst.error <= 1e-9);
    }
}

// The reason `kfuse plan` gives for storing the product h.
std::string why_stored(const plan::Plan &p) {
  for (const auto &[v, why] : p.stored_because)
    if (p.graph[v].type.shape.size() == 2 && p.graph[v].type.shape[1].value > 128)
      return why;
  return "";
}

} // namespace

TEST_CASE("row partials: a wide product read only by row reductions is reduced in its GEMM's "
          "epilogue and never stored") {
  for (const char *returns :
       {"sum(h, dim=1, keepdim=true)", "sum(abs(h), dim=1)", "sum(div(h, 2), dim=1)",
        "mean(h, dim=-1), amax(h, dim=1), amin(relu(h), dim=1), max(h, dim=1), min(h, dim=1)",
        "amax(mul(h, 3), dim=1), mean(abs(h), dim=1, keepdim=true)",
        "neg(logsumexp(mean(max(sum(h, dim=1, keepdim=true), dim=1, keepdim=true), dim=1, "
        "keepdim=true), dim=1, keepdim=true))"})
    for (int out : {129, 1000, 4096}) {
      const std::string text = layer(out, returns);
      CAPTURE(text);
      for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
        const plan::Plan p = plan::make_plan(parse_text(text), mode);
        REQUIRE(p.kernels.size() == 2u);
        const plan::Kernel &gemm = p.kernels[0], &row = p.kernels[1];
        CHECK(gemm.kind == plan::KernelKind::Gemm);
        CHECK(gemm.row_partials);
        CHECK(has_rule(gemm, "row_partials_epilogue"));
        CHECK(gemm.stores.empty());
        CHECK(p.intermediates.empty());
        CHECK(row.kind == plan::KernelKind::Row);
        CHECK(row.row_partials);
        CHECK(row.reads.empty()); // the partials only: no matrix
        const std::string shown = plan::print_plan_text(p, {});
        CHECK(shown.find("writes   row partials(") != std::string::npos);
        CHECK(shown.find(fmt::format("[N, {}]", out)) == std::string::npos);
      }
      expect_agreement(text);
    }
}

TEST_CASE("row partials: the example's chain plans to a GEMM writing partials and one row kernel "
          "for every reduction and what follows them") {
  const plan::Plan p = plan::make_plan(
      dsl::parse_kf_file(std::string(KFUSE_SOURCE_DIR) + "/examples/linear_row_reductions.kf"),
      ir::Mode::Eval);
  REQUIRE(p.kernels.size() == 2u);
  CHECK(p.kernels[0].stores.empty());
  CHECK(p.kernels[0].row_stages.size() == 4u);
  CHECK(p.kernels[1].stores.size() == 5u);
  CHECK(has_rule(p.kernels[1], "row_result"));
}

TEST_CASE("row partials: a returned product is stored once, its reductions still merged from "
          "partials") {
  const std::string text = layer(1000, "h, amax(h, dim=1), sum(abs(h), dim=1)");
  const plan::Plan p = plan::make_plan(parse_text(text), ir::Mode::Eval);
  REQUIRE(p.kernels.size() == 2u);
  CHECK(p.kernels[0].stores.size() == 1u);
  CHECK(p.kernels[0].row_partials);
  CHECK(p.kernels[1].reads.empty());
  CHECK(why_stored(p) == "output");
  expect_agreement(text);
}

TEST_CASE("row partials: reductions that read the row again, softmax, and transcendental math per "
          "element keep the row kernel over the stored product, and the plan says why") {
  struct Case {
    const char *returns, *why;
  };
  for (const Case &c :
       {Case{"sub(h, max(h, dim=1, keepdim=true))", "reads the row again with its per-row results"},
        Case{"sum(exp(sub(h, max(h, dim=1, keepdim=true))), dim=1)", "reads the row again after"},
        Case{"softmax(h, dim=1), sum(h, dim=1)", "needs whole rows"},
        Case{"logsumexp(h, dim=1)", "would compute exp of every element in the GEMM's epilogue"},
        Case{"h, sum(exp(h), dim=1)", "would compute exp of every element in the GEMM's "
                                      "epilogue"},
        Case{"var(h, dim=1), sum(h, dim=1)", "would compute Welford's update (a division) of "
                                             "every element"}}) {
    const std::string text = layer(1000, c.returns);
    CAPTURE(text);
    const plan::Plan p = plan::make_plan(parse_text(text), ir::Mode::Eval);
    for (const plan::Kernel &k : p.kernels) {
      CHECK_FALSE(k.row_partials);
      CHECK_FALSE(has_rule(k, "row_partials_epilogue"));
    }
    CHECK(why_stored(p).find(c.why) != std::string::npos);
    expect_agreement(text);
  }
  // A softmax alone has no reduction for the rule: its reason is unchanged.
  const plan::Plan soft =
      plan::make_plan(parse_text(layer(1000, "softmax(h, dim=1)")), ir::Mode::Eval);
  CHECK(why_stored(soft).find("its row kernel") == std::string::npos);
}

TEST_CASE("row partials: a narrow product's reductions stay in its GEMM's row epilogue, and a "
          "GEMM writing column statistics keeps its row kernel") {
  const plan::Plan narrow =
      plan::make_plan(parse_text(layer(100, "sum(h, dim=1), logsumexp(h, dim=1)")), ir::Mode::Eval);
  REQUIRE(narrow.kernels.size() == 1u);
  CHECK(has_rule(narrow.kernels[0], "gemm_row_epilogue"));
  CHECK_FALSE(narrow.kernels[0].row_partials);
  const std::string bn =
      "pipeline bn {\n  dim N\n  input x: f32[N, 64]\n  param w: f32[1000, 64]\n"
      "  param g: f32[1000]\n  param b: f32[1000]\n  state rm: f32[1000]\n  state rv: f32[1000]\n"
      "  return sum(batchnorm(linear(x, w), g, b, rm, rv, eps=1e-5), dim=1)\n}\n";
  const plan::Plan train = plan::make_plan(parse_text(bn), ir::Mode::Train);
  for (const plan::Kernel &k : train.kernels)
    CHECK_FALSE(k.row_partials);
}

TEST_CASE("nvrtc: row partials compile on every GEMM mainloop and operand type") {
  TempCache cache;
  struct Case {
    const char *arch;
    Precision precision;
    const char *mainloop; // a word of the GEMM's configuration
  };
  // The partials are folded from the accumulators: each GEMM keeps the tile it has without them
  // (128 x 256 for a layer this wide), none staged.
  for (const Case &c :
       {Case{"sm_90a", Precision::FP32, "SIMT"}, Case{"sm_90a", Precision::TF32, "tf32 128 x 256"},
        Case{"sm_90a", Precision::FP32x3, "3xtf32 128 x 128"},
        Case{"sm_90a", Precision::BF16, "bf16 128 x 256"},
        Case{"sm_80", Precision::TF32, "mma.sync"}})
    for (Mode mode : {Mode::Train, Mode::Eval}) {
      INFO(c.arch, " ", static_cast<int>(c.precision), mode == Mode::Train ? " train" : " eval");
      Options o;
      o.mode = mode;
      o.arch = c.arch;
      o.precision = c.precision;
      Pipeline p = Pipeline::from_file(
          std::string(KFUSE_SOURCE_DIR) + "/examples/linear_row_reductions.kf", o);
      const std::string src = p.cuda_source();
      CHECK(src.find("kf::partial_add<kf::Reduce::Max>") != std::string::npos);
      CHECK(src.find("kf::partial_add<kf::Reduce::Mean>") != std::string::npos);
      CHECK(src.find("kf::RowPartials<kf::Reduce::Sum, kf::Reduce::Max, kf::Reduce::Sum, "
                     "kf::Reduce::Mean>") != std::string::npos);
      CHECK(src.find(", 1, true>") == std::string::npos); // no Sm90Gemm<..., StagedRows = true>
      CHECK(src.find("kf::row_merge<") != std::string::npos);
      CHECK(p.report().kernels.size() >= 2u);
      for (const KernelReport &k : p.report().kernels) {
        INFO(k.name);
        CHECK(k.registers > 0);
        CHECK(k.spill_stores == 0);
        CHECK(k.spill_loads == 0);
        if (k.name.find("gemm") != std::string::npos)
          CHECK(k.config.find(c.mainloop) != std::string::npos);
      }
    }
}

TEST_CASE("nvrtc: a returned product keeps its GEMM's tile and store beside the row partials") {
  TempCache cache;
  for (Precision precision : {Precision::TF32, Precision::BF16}) {
    INFO(static_cast<int>(precision));
    Options o;
    o.mode = Mode::Eval;
    o.arch = "sm_90a";
    o.precision = precision;
    Pipeline p = Pipeline::from_string(
        layer(4096, "h, sum(h, dim=1), mean(h, dim=1), amax(h, dim=1)"), "layer.kf", o);
    const std::string src = p.cuda_source();
    CHECK(src.find("kf::partial_add<kf::Reduce::Mean>") != std::string::npos);
    CHECK(src.find(", 1, true>") == std::string::npos); // no Sm90Gemm<..., StagedRows = true>
    for (const KernelReport &k : p.report().kernels) {
      INFO(k.name);
      CHECK(k.spill_stores == 0);
      CHECK(k.spill_loads == 0);
      if (k.name.find("gemm") != std::string::npos)
        CHECK(k.config.find("128 x 256 tile") != std::string::npos);
    }
  }
}
