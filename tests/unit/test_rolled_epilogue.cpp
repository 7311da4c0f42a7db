// Heavy GEMM epilogues on the Hopper mainloop apply their functor in a rolled loop over staged
// accumulators (select's rolled_epilogue, gemm_epilogue.cuh's Apply::Rolled): which epilogues
// take it, how the GEMM config names it, and that NVRTC compiles it without spills into less
// code than the functor inlined once per accumulator.
#include "compiler/codegen/embedded_templates.h"
#include "compiler/codegen/program.h"
#include "compiler/ir/ops.h"
#include "compiler/plan/planner.h"
#include "compiler/target.h"
#include "runtime/nvrtc_compiler.h"
#include "tests/support/kf_text.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

using namespace kfuse;

namespace {

// N rows through linear(x, w, b) of `in` -> `out` features, then `body` (statements on h, which
// it returns); r: an [N, out] input, s: a per-feature param, g and v: batchnorm's.
plan::Plan chain(const std::string &body, ir::Mode mode = ir::Mode::Eval, const char *dtype = "f32",
                 int in = 1024, int out = 4096) {
  const std::string text = fmt::format(
      "pipeline chain {{\n  dim N\n  input x: {0}[N, {1}]\n  input r: {0}[N, {2}]\n"
      "  param w: {0}[{2}, {1}]\n  param b: {0}[{2}]\n  param s: {0}[{2}]\n"
      "  state g: f32[{2}]\n  state v: f32[{2}]\n  h = linear(x, w, b)\n{3}  return h\n}}\n",
      dtype, in, out, body);
  return plan::make_plan(testing::parse_kf_text(text, "chain.kf"), mode);
}

const Target kHopperTf32{"sm_90a", Precision::TF32};

bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

// The GEMM config text of `p`'s first kernel and of each of its variants.
std::vector<std::string> gemm_configs(const codegen::Program &p) {
  std::vector<std::string> configs = {p.launches.at(0).config};
  for (const codegen::KernelLaunch &v : p.launches.at(0).by_rows)
    configs.push_back(v.config);
  return configs;
}

} // namespace

TEST_CASE("ops: transcendental calls per element, as the CUDA expressions make them") {
  using ir::OpKind;
  for (auto [op, calls] :
       {std::pair{OpKind::Relu, 0}, std::pair{OpKind::Div, 0}, std::pair{OpKind::Sqrt, 0},
        std::pair{OpKind::Gelu, 1}, std::pair{OpKind::Silu, 1}, std::pair{OpKind::Sigmoid, 1},
        std::pair{OpKind::Tanh, 1}, std::pair{OpKind::Elu, 1}, std::pair{OpKind::Erf, 1},
        std::pair{OpKind::Softplus, 2}, std::pair{OpKind::LogSigmoid, 2}, std::pair{OpKind::Pow, 2},
        std::pair{OpKind::Mish, 3}, std::pair{OpKind::Linear, 0}}) {
    CAPTURE(ir::op_info(op).name);
    CHECK(ir::op_info(op).transcendental_calls == calls);
  }
}

TEST_CASE("codegen: a Hopper GEMM's epilogue of two or more transcendental calls per element "
          "applies its functor in a rolled loop, and its config says so") {
  struct Heavy {
    const char *body;
    int calls;
  };
  for (const char *dtype : {"f32", "bf16"})
    for (int out : {4096, 2048}) // the 128 x 256 tile; the 64 x 128 one with two variants
      for (auto [body, calls] :
           {Heavy{"  h = mish(mish(h))\n", 6}, Heavy{"  h = selu(add(elu(h), r))\n", 2},
            Heavy{"  h = mul(tanh(softplus(h)), h)\n", 3},
            Heavy{"  h = hardtanh(gelu(tanh(silu(mul(h, s)))))\n", 3}}) {
        CAPTURE(std::string(dtype));
        CAPTURE(out);
        CAPTURE(std::string(body));
        const codegen::Program p =
            codegen::generate(chain(body, ir::Mode::Eval, dtype, 2048, out), kHopperTf32);
        CHECK(contains(p.source, fmt::format("kf::GemmEpilogue<k0_gemm_functor, {}, false, "
                                             "kf::NoRows, kf::Apply::Rolled>",
                                             dtype == std::string("f32") ? "float" : "kf::bf16")));
        CHECK(gemm_configs(p).size() == (out == 4096 ? 1 : 3));
        for (const std::string &config : gemm_configs(p))
          CHECK(contains(config, fmt::format("; epilogue applied in a rolled loop: {} "
                                             "transcendental calls per element (>= 2)",
                                             calls)));
      }
}

TEST_CASE("codegen: light epilogues, per-column transcendental ops, statistics, row passes and "
          "other mainloops keep the functor inlined per accumulator") {
  auto inlined = [](const codegen::Program &p) {
    CHECK_FALSE(contains(p.source, "kf::Apply::Rolled"));
    for (const std::string &config : gemm_configs(p))
      CHECK_FALSE(contains(config, "rolled loop"));
  };
  // One transcendental call per element, or none.
  for (const char *body :
       {"", "  h = relu(h)\n", "  h = gelu(h)\n", "  h = silu(h)\n", "  h = mul(h, sigmoid(h))\n",
        "  h = gelu(h, approximate=\"tanh\")\n", "  h = div(sqrt(relu(h)), add(h, r))\n"}) {
    CAPTURE(std::string(body));
    inlined(codegen::generate(chain(body), kHopperTf32));
  }
  // Transcendental ops of per-column values run once per column, in Column.
  inlined(codegen::generate(chain("  h = add(h, mish(mish(s)))\n"), kHopperTf32));
  // The GEMM writes h's column statistics (train-mode batchnorm reads them).
  const codegen::Program stats = codegen::generate(
      chain("  h = mish(mish(h))\n  h = batchnorm(h, g, v)\n", ir::Mode::Train), kHopperTf32);
  CHECK(contains(stats.source, "k0_gemm_functor, float, true>"));
  inlined(stats);
  // A narrow GEMM whose epilogue runs the softmax's row passes over its staged tile.
  const codegen::Program rows = codegen::generate(
      chain("  h = softmax(mish(mish(h)), dim=1)\n", ir::Mode::Eval, "f32", 64, 100), kHopperTf32);
  CHECK(contains(rows.source, "k0_gemm_rows"));
  inlined(rows);
  // The SIMT mainloop (fp32) stages the tile and applies in a rolled loop already; mma.sync.
  inlined(codegen::generate(chain("  h = mish(mish(h))\n"), Target{"sm_90a", Precision::FP32}));
  inlined(codegen::generate(chain("  h = mish(mish(h))\n"), Target{"sm_80", Precision::TF32}));
}

TEST_CASE("nvrtc: a rolled heavy epilogue compiles without spills, into less code than the "
          "functor inlined per accumulator") {
  for (const char *dtype : {"f32", "bf16"})
    for (int out : {4096, 2048}) {
      CAPTURE(std::string(dtype));
      CAPTURE(out);
      const codegen::Program p = codegen::generate(
          chain("  h = mish(mish(add(h, r)))\n", ir::Mode::Eval, dtype, 2048, out), kHopperTf32);
      const std::string rolled = ", kf::NoRows, kf::Apply::Rolled>";
      REQUIRE(contains(p.source, rolled));
      rt::CompileRequest req;
      req.source = p.source;
      req.file_name = p.file_name;
      req.arch = "sm_90a";
      req.headers = codegen::embedded_templates();
      const rt::CompiledModule m = rt::compile(req, nullptr);
      REQUIRE(m.kernels.size() == (out == 4096 ? 1 : 3));
      for (const rt::KernelResources &k : m.kernels) {
        CAPTURE(k.name);
        CHECK(k.spill_stores == 0);
        CHECK(k.spill_loads == 0);
      }
      // ptxas keeps the mainloop's wgmma asynchronous (no C7515/C7520 warning).
      CHECK_FALSE(contains(m.log, "serialized"));
      // The same kernels with the functor inlined once per accumulator.
      if (out == 4096) {
        req.source.replace(req.source.find(rolled), rolled.size(), ">");
        const rt::CompiledModule inlined = rt::compile(req, nullptr);
        MESSAGE(std::string(dtype), ": cubin ", m.cubin.size(), " B rolled, ", inlined.cubin.size(),
                " B inlined");
        CHECK(m.cubin.size() * 3 < inlined.cubin.size());
      }
    }
}
