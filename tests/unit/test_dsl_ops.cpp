// The op table as the DSL sees it: the op reference in docs/DSL.md, numbers as operands,
// choices, queries by class, and NVRTC compiles of every pointwise op in every kernel kind.
#include "compiler/build_executable.h"
#include "compiler/dsl/parser.h"
#include "compiler/ir/op_reference.h"
#include "compiler/ir/ops.h"
#include "compiler/plan/planner.h"
#include "kfuse/kfuse.h"
#include "runtime/pipeline.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace kfuse;

namespace {

std::string read(const std::string &path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read ", path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The text between `<!-- begin NAME -->\n` and `<!-- end NAME -->` in `doc`.
std::string section(const std::string &doc, const std::string &name) {
  std::string begin = "<!-- begin " + name + " -->\n", end = "<!-- end " + name + " -->";
  size_t a = doc.find(begin), b = doc.find(end);
  REQUIRE_MESSAGE(a != std::string::npos, "docs/DSL.md has no '", begin, "'");
  REQUIRE_MESSAGE(b != std::string::npos, "docs/DSL.md has no '", end, "'");
  return doc.substr(a + begin.size(), b - a - begin.size());
}

ir::Graph parse(const std::string &text) {
  dsl::SourceFile src("t.kf", text);
  dsl::Diagnostics diags(src);
  return dsl::parse_kf(src, diags);
}

// linear -> `norm` -> every pointwise op of the table, binary ones against [F], [1], [N, 1]
// operands and numbers, taken from the table so that a new op is compiled here without a new
// test. `features` wide.
std::string every_pointwise_op(const std::string &tail, const std::string &norm = "",
                               int features = 48) {
  std::string body = "  h = linear(x, w, b)\n" + norm;
  std::vector<std::string> others = {"f", "s", "r", "0.75"};
  size_t k = 0;
  for (const ir::OpInfo &op : ir::all_ops()) {
    if (op.cls == ir::OpClass::Unary)
      body += fmt::format("  h = {}(h{})\n", op.name,
                          op.kind == ir::OpKind::Clamp  ? ", min=-4"
                          : op.kind == ir::OpKind::Cast ? ", dtype=bf16"
                                                        : "");
    else if (op.cls == ir::OpClass::Binary)
      body += fmt::format("  h = {}(h, {})\n", op.name, others[k++ % others.size()]);
  }
  return fmt::format("pipeline every_op {{\n  dim N\n  input x: f32[N, 32]\n  input r: f32[N, 1]\n"
                     "  param w: f32[{0}, 32]\n  param b: f32[{0}]\n  param f: f32[{0}]\n"
                     "  param s: f32[1]\n",
                     features) +
         body + tail + "}\n";
}

} // namespace

TEST_CASE("docs: DSL.md's op reference is the op table's") {
  std::string doc = read(KFUSE_SOURCE_DIR "/docs/DSL.md");
  for (bool internal : {false, true}) {
    std::string name = internal ? "internal ops" : "user ops";
    INFO("regenerate the section '", name, "' of docs/DSL.md from ir::op_reference_markdown(",
         internal, "):\n", ir::op_reference_markdown(internal));
    CHECK(section(doc, name) == ir::op_reference_markdown(internal));
  }
}

TEST_CASE("op table: names are unique, and ops are listed by class and arity") {
  for (const ir::OpInfo &op : ir::all_ops()) {
    CHECK(ir::op_by_name(op.name) == op.kind);
    CHECK(&ir::op_info(op.kind) == &op);
  }
  std::vector<ir::OpKind> binary = ir::ops_of_class(ir::OpClass::Binary, 2);
  CHECK(binary == std::vector<ir::OpKind>{ir::OpKind::Add, ir::OpKind::Sub, ir::OpKind::Mul,
                                          ir::OpKind::Div, ir::OpKind::Maximum, ir::OpKind::Minimum,
                                          ir::OpKind::Pow});
  CHECK(ir::ops_of_class(ir::OpClass::Binary, 1).empty());
  CHECK(ir::ops_of_class(ir::OpClass::Unary).size() == 24);
  CHECK(ir::ops_of_class(ir::OpClass::ColReduce).empty()); // internal only
  CHECK(ir::ops_of_class(ir::OpClass::ColReduce, -1, true).size() == 3);
  // The gradients of the pools and of groupnorm exist for backward graphs only.
  CHECK(ir::ops_of_class(ir::OpClass::PoolGrad).empty());
  CHECK(ir::ops_of_class(ir::OpClass::PoolGrad, -1, true) ==
        std::vector<ir::OpKind>{ir::OpKind::MaxPool1dBackward, ir::OpKind::AvgPool1dBackward});
  CHECK(ir::ops_of_class(ir::OpClass::NormGrad, -1, true) ==
        std::vector<ir::OpKind>{ir::OpKind::GroupNormBackward});
  CHECK(ir::ops_of_class(ir::OpClass::Gemm, 3) == std::vector<ir::OpKind>{ir::OpKind::Linear});
}

TEST_CASE("dsl: numbers as operands become constants of their tensor operand's type") {
  ir::Graph g = parse("pipeline p {\n  dim N\n  input x: f16[N, 4]\n"
                      "  return mul(x, 2.5), sub(-0.5, x), pow(x, 3)\n}\n");
  REQUIRE(g.outputs.size() == 3);
  auto constant_arg = [&](ir::ValueId out, size_t i) {
    const ir::Value &c = g[g[out].args.at(i)];
    REQUIRE(c.is_op());
    CHECK(c.op == ir::OpKind::Constant);
    CHECK(c.type.str() == "f16[1]");
    CHECK(c.attrs.at("dtype").dim == "f16");
    return c.attr("value");
  };
  CHECK(constant_arg(g.outputs[0], 1) == 2.5);
  CHECK(constant_arg(g.outputs[1], 0) == -0.5);
  CHECK(constant_arg(g.outputs[2], 1) == 3);
  CHECK(g[g.outputs[1]].type.str() == "f16[N, 4]");
}

TEST_CASE("dsl: choices and optional bounds parse, default and print back") {
  ir::Graph g = parse("pipeline p {\n  dim N\n  input x: f32[N, 4]\n"
                      "  return gelu(x), gelu(x, approximate=\"tanh\"), clamp(x, max=1)\n}\n");
  CHECK(g[g.outputs[0]].attrs.at("approximate").dim == "none");
  CHECK(g[g.outputs[1]].attrs.at("approximate").dim == "tanh");
  CHECK(g[g.outputs[2]].attrs.at("min").number == -ir::kInf);
  CHECK(g[g.outputs[2]].attrs.at("max").number == 1);
}

TEST_CASE("nvrtc: every pointwise op compiles in a GEMM epilogue, a row prologue, after a "
          "normalization and alone") {
  char tmpl[] = "/tmp/kfuse-ops-cache-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  setenv("KFUSE_CACHE_DIR", tmpl, 1);
  for (bool fuse : {true, false}) {
    INFO(std::string(fuse ? "fused" : "unfused"));
    Options o;
    o.arch = "sm_90a";
    // fused: one GEMM kernel whose epilogue holds every op; then a row kernel whose prologue
    // does (the GEMM stores its product: softmax reads the chain per row).
    auto compile = [&](const std::string &text) {
      return rt::PipelineAccess::compile(
          build_executable(lower(dsl::SourceFile("every_op.kf", text),
                                 lower_options(rt::PipelineAccess::request(o, fuse)))));
    };
    Pipeline epilogue = compile(every_pointwise_op("  return h\n"));
    Pipeline prologue = compile(every_pointwise_op("  return softmax(h, dim=1)\n"));
    // fused: the ops in the normalization's pass (row_tail), in a row kernel (200 features) and
    // in the GEMM's epilogue (48).
    const std::string norm = "  h = layernorm(h, eps=1e-5)\n";
    Pipeline tail = compile(every_pointwise_op("  return h\n", norm, 200));
    Pipeline staged_tail = compile(every_pointwise_op("  return h\n", norm));
    if (fuse) { // the GEMM, and its variant with the other SIMT tile
      REQUIRE(epilogue.report().kernels.size() == 2);
      CHECK(epilogue.report().kernels[1].variant);
      CHECK(tail.report().kernels.size() == 3); // the GEMM, its variant, the row kernel
      CHECK(staged_tail.report().kernels.size() == 1);
    }
    for (const Pipeline *p : {&epilogue, &prologue, &tail, &staged_tail})
      for (const KernelReport &k : p->report().kernels) {
        INFO(k.name);
        CHECK(k.spill_stores == 0);
      }
  }
  unsetenv("KFUSE_CACHE_DIR");
  std::filesystem::remove_all(tmpl);
}
