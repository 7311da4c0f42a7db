// dropout: the Philox stream against its published answers, the interpreter's train and eval
// semantics, the errors of bad attributes, and plans that fuse it into a GEMM epilogue and into
// a row kernel agreeing with the interpreter.
#include "compiler/codegen/program.h"
#include "compiler/dsl/parser.h"
#include "compiler/ir/interpreter.h"
#include "compiler/passes/passes.h"
#include "compiler/plan/agreement.h"
#include "compiler/plan/planner.h"
#include "templates/dropout.cuh"
#include "tests/support/kf_text.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <string>

using namespace kfuse;
using ir::Mode;

namespace {

ir::Graph parse_text(const std::string &text) { return testing::parse_kf_text(text, "drop.kf"); }

// The first line of the diagnostic that parsing `text` throws.
std::string error_of(const std::string &text) {
  std::string s = testing::kf_error(text, "drop.kf");
  return s.substr(0, s.find('\n'));
}

std::string pipeline_with(const std::string &call) {
  return "pipeline p {\n  dim N\n  input x: f32[N, 8]\n  return " + call + "\n}\n";
}

// dropout(x, p) of a [rows, cols] input of ones, in `mode`, drawing at `rng`.
ir::HostTensor drop_ones(double p, int64_t rows, int64_t cols, Mode mode, ir::RngState rng) {
  ir::Graph g = parse_text(fmt::format(
      "pipeline p {{\n  dim N\n  input x: f32[N, {}]\n  return dropout(x, p={})\n}}\n", cols, p));
  ir::TensorMap t = {
      {"x", {{rows, cols}, std::vector<double>(static_cast<size_t>(rows * cols), 1.0)}}};
  return ir::interpret(g, mode, {{"N", rows}}, t, rng).at(0);
}

} // namespace

TEST_CASE("dropout: Philox4x32-10 gives the published known answers") {
  // Random123's kat_vectors for philox4x32_10.
  struct Kat {
    kf::Philox4x32 ctr;
    unsigned k0, k1;
    kf::Philox4x32 out;
  };
  for (const Kat &k :
       {Kat{{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
        Kat{{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
            0xffffffff,
            0xffffffff,
            {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
        Kat{{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
            0xa4093822,
            0x299f31d0,
            {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}}}) {
    kf::Philox4x32 r = kf::philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i)
      CHECK(r.v[i] == k.out.v[i]);
  }
}

TEST_CASE("dropout: eval mode is the identity, train mode keeps 1 - p scaled by 1 / (1 - p)") {
  const double p = 0.3;
  ir::HostTensor eval = drop_ones(p, 256, 256, Mode::Eval, {7, 0});
  for (double v : eval.data)
    CHECK(v == 1.0);
  ir::HostTensor train = drop_ones(p, 256, 256, Mode::Train, {7, 0});
  size_t dropped = 0;
  for (double v : train.data) {
    CHECK((v == 0.0 || v == 1.0 / (1.0 - p)));
    dropped += v == 0.0;
  }
  // 65536 Bernoulli(0.3) draws: the standard deviation of the fraction is 0.0018.
  CHECK(std::fabs(static_cast<double>(dropped) / 65536.0 - p) < 0.01);
  // p = 0 keeps everything.
  for (double v : drop_ones(0.0, 16, 16, Mode::Train, {7, 0}).data)
    CHECK(v == 1.0);
}

TEST_CASE("dropout: the mask is a function of (seed, offset), new for another offset or seed") {
  auto mask = [](ir::RngState rng) { return drop_ones(0.5, 32, 64, Mode::Train, rng).data; };
  CHECK(mask({3, 5}) == mask({3, 5}));
  CHECK(mask({3, 5}) != mask({3, 6}));
  CHECK(mask({3, 5}) != mask({4, 5}));
}

TEST_CASE("dropout: two dropouts draw independent streams") {
  ir::Graph g = parse_text("pipeline p {\n  dim N\n  input x: f32[N, 64]\n"
                           "  a = dropout(x, p=0.5)\n  b = dropout(x, p=0.5)\n  return a, b\n}\n");
  ir::TensorMap t = {{"x", {{32, 64}, std::vector<double>(32 * 64, 1.0)}}};
  auto out = ir::interpret(g, Mode::Train, {{"N", 32}}, t, {1, 0});
  CHECK(out.at(0).data != out.at(1).data);
}

TEST_CASE("dropout: bad attributes are errors at their location") {
  CHECK(error_of(pipeline_with("dropout(x, p=1)")) ==
        "drop.kf:4:23: error: attribute 'p' of dropout must be a number in [0, 1), got 1");
  CHECK(error_of(pipeline_with("dropout(x, p=-0.1)")) ==
        "drop.kf:4:23: error: attribute 'p' of dropout must be a number in [0, 1), got -0.1");
  CHECK(error_of(pipeline_with("dropout(x, p=half)")) ==
        "drop.kf:4:23: error: attribute 'p' of dropout must be a number, got 'half'");
  CHECK(error_of("pipeline p {\n  dim N\n  input x: f32[N, 8]\n  a = dropout(x, p=0.1, stream=3)\n"
                 "  return dropout(a, stream=3)\n}\n")
            .find("dropout stream 3 is drawn by another dropout already") != std::string::npos);
}

TEST_CASE("dropout: fused into a GEMM epilogue and into a row kernel, plans agree") {
  const char *gemm = R"(pipeline drop_gemm {
  dim N
  input  x: f32[N, 6]
  param  weight: f32[5, 6]
  param  bias: f32[5]
  h = linear(x, weight, bias)
  h = gelu(h)
  return dropout(h, p=0.25)
}
)";
  const char *row = R"(pipeline drop_row {
  dim N
  input  x: f32[N, 6]
  param  weight: f32[5, 6]
  h = linear(x, weight)
  h = dropout(h, p=0.5)
  h = layernorm(h)
  return dropout(h, p=0.125)
}
)";
  for (Mode mode : {Mode::Train, Mode::Eval}) {
    for (const char *text : {gemm, row}) {
      ir::Graph g = parse_text(text);
      INFO(g.name, " ", ir::mode_name(mode));
      auto worst = plan::first_failure(
          plan::check_planner(g, mode, {{"N", 9}}, 5, passes::pipeline(), {}), 1e-9);
      CHECK(worst.error <= 1e-9);
      plan::Plan p = plan::make_plan(g, mode);
      // Train: the dropouts stay, inside the GEMM's epilogue or the row kernel; eval: gone.
      size_t dropouts = 0;
      for (const plan::Kernel &k : p.kernels)
        for (ir::ValueId id : k.computes)
          dropouts += p.graph[id].op == ir::OpKind::Dropout;
      CHECK(dropouts == (mode == Mode::Train ? (g.name == "drop_gemm" ? 1u : 2u) : 0u));
      // drop_row: the GEMM, whose epilogue runs the layernorm's row kernel (5 features:
      // gemm_row_epilogue): in train mode its prologue the first dropout, its row_tail the
      // second.
      CHECK(p.kernels.size() == 1);
      codegen::Program prog = codegen::generate(p);
      CHECK((prog.source.find("kf::dropout(") != std::string::npos) == (mode == Mode::Train));
    }
  }
}
