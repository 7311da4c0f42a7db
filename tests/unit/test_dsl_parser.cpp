#include "compiler/dsl/parser.h"

#include "compiler/ir/verifier.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace kfuse;

namespace {

ir::Graph parse(const std::string &text) {
  dsl::SourceFile src("t.kf", text);
  dsl::Diagnostics diags(src);
  return dsl::parse_kf(src, diags);
}

// The DiagnosticError that parsing `text` throws.
dsl::DiagnosticError parse_error(const std::string &text) {
  try {
    parse(text);
  } catch (const dsl::DiagnosticError &e) {
    return e;
  }
  FAIL("parsed without an error: " << text);
  return dsl::DiagnosticError("", {}, "");
}

// A pipeline with the usual header around `body`.
std::string with_header(const std::string &body) {
  return "pipeline p {\n"
         "  dim N\n"
         "  input x: f32[N, 16]\n"
         "  param w: f32[16, 16]\n"
         "  param b: f32[16]\n"
         "  state rm: f32[16]\n"
         "  state rv: f32[16]\n" +
         body + "}\n";
}

std::string read_file(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

} // namespace

TEST_CASE("parser: the founding chain builds the expected graph") {
  ir::Graph g = parse(R"(# linear -> batchnorm -> scale -> softmax
pipeline gemm_bn_scale_softmax {
  dim N
  input  x: f32[N, 64]
  param  weight: f32[32, 64]
  param  bias: f32[32]
  param  bn_weight: f32[32]
  param  bn_bias: f32[32]
  state  running_mean: f32[32]
  state  running_var: f32[32]
  param  scale: f32[1]
  h = linear(x, weight, bias)
  h = batchnorm(h, bn_weight, bn_bias, running_mean, running_var, eps=1e-5, momentum=0.1)
  h = mul(scale, h)
  return softmax(h, dim=1)
}
)");
  CHECK(g.name == "gemm_bn_scale_softmax");
  CHECK(g.dims == std::vector<std::string>{"N"});
  CHECK(g.loc.line == 2);
  REQUIRE(g.values.size() == 12);
  CHECK(g[0].kind == ir::ValueKind::Input);
  CHECK(g[0].name == "x");
  CHECK(g[0].type.str() == "f32[N, 64]");
  CHECK(g[0].loc.line == 4);
  CHECK(g[0].loc.col == 10);
  CHECK(g[1].kind == ir::ValueKind::Param);
  CHECK(g[5].kind == ir::ValueKind::State);
  CHECK(g[7].type.str() == "f32[1]");

  const ir::Value &lin = g[8];
  CHECK(lin.op == ir::OpKind::Linear);
  CHECK(lin.name == "h");
  CHECK(lin.args == std::vector<ir::ValueId>{0, 1, 2});
  CHECK(lin.type.str() == "f32[N, 32]");
  CHECK(lin.origins == std::vector<std::string>{"linear@12"});
  CHECK(lin.loc.line == 12);
  CHECK(lin.loc.col == 7);

  const ir::Value &bn = g[9];
  CHECK(bn.op == ir::OpKind::BatchNorm);
  CHECK(bn.name == "h");
  CHECK(bn.args == std::vector<ir::ValueId>{8, 3, 4, 5, 6});
  CHECK(bn.attr("eps") == 1e-5);
  CHECK(bn.attr("momentum") == 0.1);

  CHECK(g[10].op == ir::OpKind::Mul);
  CHECK(g[10].args == std::vector<ir::ValueId>{7, 9});
  CHECK(g[11].op == ir::OpKind::Softmax);
  CHECK(g[11].name.empty()); // returned, never assigned
  CHECK(g[11].attr("dim") == 1);
  CHECK(g[11].origins == std::vector<std::string>{"softmax@15"});
  CHECK(g.outputs == std::vector<ir::ValueId>{11});
}

TEST_CASE("parser: names rebind, aliases share a value, nested calls are unnamed") {
  ir::Graph g = parse(with_header("  h = relu(x)\n"
                                  "  a = h\n"
                                  "  h = add(tanh(h), a)\n"
                                  "  return h, a, x\n"));
  REQUIRE(g.values.size() == 8);
  CHECK(g[5].op == ir::OpKind::Relu);
  CHECK(g[5].name == "h");
  CHECK(g[6].op == ir::OpKind::Tanh);
  CHECK(g[6].name.empty());
  CHECK(g[6].args == std::vector<ir::ValueId>{5});
  CHECK(g[7].op == ir::OpKind::Add);
  CHECK(g[7].name == "h");
  CHECK(g[7].args == std::vector<ir::ValueId>{6, 5});
  CHECK(g.outputs == std::vector<ir::ValueId>{7, 5, 0});
}

TEST_CASE("parser: attributes get defaults, negative numbers, dim and dtype names") {
  ir::Graph g = parse(with_header("  a = batchnorm(x, rm, rv)\n"
                                  "  s = log_softmax(a, dim=-1)\n"
                                  "  c = constant(value=-2.5, dtype=f16)\n"
                                  "  return s, c\n"));
  CHECK(g[5].attr("eps") == 1e-5);
  CHECK(g[5].attr("momentum") == 0.1);
  CHECK(g[6].attr("dim") == -1);
  CHECK(g[7].attr("value") == -2.5);
  CHECK(g[7].attrs.at("dtype").dim == "f16");
  CHECK(g[7].type.str() == "f16[1]");
}

TEST_CASE("parser: internal ops are .kf too (a lowered train-mode batchnorm)") {
  ir::Graph g = parse(with_header("  m = col_mean(x)\n"
                                  "  v = col_var(x)\n"
                                  "  bn_update(rm, rv, m, v, momentum=0.1, count=N)\n"
                                  "  alpha = rsqrt(add(v, constant(value=1e-5, dtype=f32)))\n"
                                  "  beta = sub(b, mul(m, alpha))\n"
                                  "  return col_affine(x, alpha, beta)\n"));
  const ir::Value &update = g[7];
  CHECK(update.op == ir::OpKind::BnUpdate);
  CHECK(update.is_effect());
  CHECK(update.attrs.at("count").shape == std::vector{ir::Dim::symbol("N")});
  CHECK(update.origins == std::vector<std::string>{"bn_update@10"});
  CHECK(g[g.outputs[0]].op == ir::OpKind::ColAffine);
  CHECK(g[g.outputs[0]].type.str() == "f32[N, 16]");

  ir::Graph counted = parse(with_header("  bn_update(rm, rv, col_mean(x), col_var(x), "
                                        "momentum=0.5, count=64)\n  return x\n"));
  CHECK(counted[7].attrs.at("count").shape == std::vector{ir::Dim::constant(64)});
}

TEST_CASE("parser: layout is free: newlines inside calls, declarations after ops, comments") {
  ir::Graph g = parse("pipeline p { dim N input x: f32[N, 4] h = relu(\n x # the input\n)\n"
                      "param s: f32[4] return mul(h,\ns) }");
  CHECK(g.values.size() == 4);
  CHECK(g[2].kind == ir::ValueKind::Param);
  CHECK(g[3].args == std::vector<ir::ValueId>{1, 2});
}

TEST_CASE("parser: nesting is bounded at 64 calls") {
  auto nested = [](int depth) {
    std::string e = "x";
    for (int i = 0; i < depth; ++i)
      e = "relu(" + e + ")";
    return with_header("  return " + e + "\n");
  };
  CHECK(parse(nested(dsl::kMaxCallNesting)).values.size() == 5 + dsl::kMaxCallNesting);
  dsl::DiagnosticError e = parse_error(nested(dsl::kMaxCallNesting + 1));
  CHECK(e.message == "calls are nested more than 64 deep");
  CHECK(e.loc.line == 8);
}

TEST_CASE("parser: errors and where they point") {
  struct Case {
    std::string body;
    std::string message;
    uint32_t line, col;
  };
  std::vector<Case> cases = {
      {"  return relu(x, x)\n", "too many arguments to relu: it takes 1, got 2", 8, 18},
      {"  return batchnorm(x, w, b, rm)\n",
       "batchnorm takes (x, running_mean, running_var) or (x, weight, bias, running_mean, "
       "running_var), got 4 arguments",
       8, 10},
      {"  return softmax(x, dim=99999999999)\n",
       "attribute 'dim' of softmax must be an integer in [-2147483647, 2147483647], got "
       "99999999999",
       8, 25},
      {"  return softmax(x, dim=N)\n", "attribute 'dim' of softmax must be an integer, got 'N'", 8,
       25},
      {"  return batchnorm(x, rm, rv, eps=N)\n",
       "attribute 'eps' of batchnorm must be a number, got 'N'", 8, 35},
      {"  return batchnorm(x, rm, rv, eps=-)\n", "expected a number after '-', found ')'", 8, 36},
      {"  return batchnorm(x, rm, rv, eps=relu(x))\n",
       "an attribute value is a number, a name or a string, not a call", 8, 35},
      {"  return relu(x, dim=1)\n", "relu takes no attributes", 8, 18},
      {"  bn_update(rm, rv, col_mean(x), col_var(x), momentum=0.1, count=M)\n",
       "undeclared dim 'M'", 8, 66},
      {"  bn_update(rm, rv, col_mean(x), col_var(x), momentum=0.1, count=x)\n",
       "'x' is an input, not a dim", 8, 66},
      {"  bn_update(rm, rv, col_mean(x), col_var(x), momentum=0.1, count=-2)\n",
       "attribute 'count' of bn_update must be a positive integer, a dim name or a product of "
       "them, got -2",
       8, 66},
      {"  bn_update(rm, rv, col_mean(x), col_var(x), momentum=0.1, count=2*M)\n",
       "undeclared dim 'M'", 8, 68},
      {"  bn_update(rm, rv, col_mean(x), col_var(x), momentum=0.1, count=N*0)\n",
       "attribute 'count' of bn_update must be positive, got 0", 8, 68},
      {"  bn_update(rm, rm, col_mean(x), col_var(x), momentum=0.1, count=N)\n",
       "state 'rm' is updated twice; a run updates a state at most once", 8, 17},
      {"  bn_update(rm, rv, col_mean(x), col_var(x), count=N)\n",
       "bn_update requires the attribute 'momentum'", 8, 3},
      {"  return batchnorm(x, rm, relu(rv))\n",
       "the running_var of batchnorm must be a state (train mode updates it), not a computed "
       "value",
       8, 27},
      {"  return constant(value=1, dtype=f64)\n",
       "attribute 'dtype' of constant must be an element type (f32, f16 or bf16), got 'f64'", 8,
       34},
      {"  return constant(x, value=1, dtype=f32)\n",
       "too many arguments to constant: it takes 0, got 1", 8, 19},
      {"  h = relu(x)\n  h(x)\n  return h\n", "unknown op 'h'", 9, 3},
      {"  h x\n", "expected '=' or '(' after 'h', found identifier 'x'", 8, 5},
      {"  12\n", "expected a statement, found number '12'", 8, 3},
      {"  h = 3\n", "expected a name or a call, found number '3'", 8, 7},
      {"  h = relu(x,)\n", "expected a name or a call, found ')'", 8, 14},
      {"  input y: f32[-3]\n", "an extent must be a positive integer, got -3", 8, 16},
      {"  input y: f32[0]\n", "extent must be positive, got 0", 8, 16},
      {"  input y: f32[2.5]\n", "an extent must be a positive integer, got 2.5", 8, 16},
      {"  input y: f32[]\n", "expected an extent (a positive integer or a dim name), found ']'", 8,
       16},
      {"  input y: f32[x]\n", "'x' is an input, not a dim", 8, 16},
      {"  input y f32[4]\n", "expected ':' after 'y', found identifier 'f32'", 8, 11},
      {"  dim N\n", "redefinition of 'N'", 8, 7},
      {"  dim x\n", "redefinition of 'x'", 8, 7},
      {"  h = relu(x)\n  input h: f32[4]\n", "redefinition of 'h'", 9, 9},
      {"  N = relu(x)\n", "cannot assign to dim 'N'", 8, 3},
      {"  rm = relu(rm)\n", "cannot assign to state 'rm'", 8, 3},
      {"  return x\n  return x\n", "statement after the return statement; return comes last", 9, 3},
  };
  for (const Case &c : cases) {
    INFO(c.body);
    dsl::DiagnosticError e = parse_error(with_header(c.body));
    CHECK(e.message == c.message);
    CHECK(e.loc.line == c.line);
    CHECK(e.loc.col == c.col);
  }
}

TEST_CASE("parser: errors outside the body") {
  CHECK(parse_error("").message == "expected 'pipeline', found end of file");
  CHECK(parse_error("pipe p {}").message == "expected 'pipeline', found identifier 'pipe'");
  CHECK(parse_error("pipeline {").message ==
        "expected a pipeline name after 'pipeline', found '{'");
  CHECK(parse_error("pipeline dim { return x }").message ==
        "'dim' is a keyword and cannot name a pipeline");
  CHECK(parse_error("pipeline p { input x: f32[4] return x } }").message ==
        "expected end of file after the pipeline's closing '}', found '}'");
  CHECK(parse_error("pipeline p {}").message == "missing return statement in pipeline 'p'");
}

TEST_CASE("parser: the parsed graph verifies, and so does every example") {
  for (const auto &entry : std::filesystem::directory_iterator(KFUSE_SOURCE_DIR "/examples")) {
    if (entry.path().extension() != ".kf")
      continue;
    INFO(entry.path().string());
    ir::Graph g = dsl::parse_kf_file(entry.path().string());
    CHECK_NOTHROW(ir::verify(g));
    CHECK(!g.outputs.empty());
  }
}

TEST_CASE("parser: every prefix of every example parses or fails with a diagnostic") {
  for (const auto &entry : std::filesystem::directory_iterator(KFUSE_SOURCE_DIR "/examples")) {
    if (entry.path().extension() != ".kf")
      continue;
    std::string text = read_file(entry.path());
    for (size_t n = 0; n <= text.size(); ++n) {
      try {
        parse(text.substr(0, n));
      } catch (const dsl::DiagnosticError &) {
        continue;
      }
      // Only the whole file parses, with or without the whitespace after its '}'.
      CHECK(text.find_first_not_of(" \t\r\n", n) == std::string::npos);
    }
  }
}

TEST_CASE("parser: element types follow PyTorch's rules") {
  std::string header = "pipeline p {\n"
                       "  dim N\n"
                       "  input x: bf16[N, 16]\n"
                       "  input y: f16[N, 16]\n"
                       "  input z: f32[N, 16]\n"
                       "  param w: bf16[16, 16]\n"
                       "  param w32: f32[16, 16]\n"
                       "  param g: f32[16]\n"
                       "  param g16: f16[16]\n"
                       "  state rm: f32[16]\n"
                       "  state rv: bf16[16]\n";
  auto type_of = [&](const std::string &expr) {
    ir::Graph g = parse(header + "  return " + expr + "\n}\n");
    return g[g.outputs[0]].type.str();
  };
  CHECK(type_of("linear(x, w)") == "bf16[N, 16]");
  CHECK(type_of("add(x, z)") == "f32[N, 16]");    // promotes to the wider float
  CHECK(type_of("mul(x, y)") == "f32[N, 16]");    // bf16 with f16: f32, as torch.result_type
  CHECK(type_of("mul(x, 0.5)") == "bf16[N, 16]"); // a number does not promote
  CHECK(type_of("softmax(x, dim=1)") == "bf16[N, 16]");
  CHECK(type_of("sum(y, dim=1)") == "f16[N]");
  CHECK(type_of("batchnorm(x, g, g, rm, rv)") == "bf16[N, 16]"); // f32 params, bf16 activations
  CHECK(type_of("layernorm(y, g16, g)") == "f16[N, 16]");
  CHECK(type_of("col_mean(x)") == "f32[16]"); // statistics are fp32

  struct Case {
    std::string expr, message;
    uint32_t col;
  };
  std::vector<Case> cases = {
      {"linear(x, w32)", "type mismatch in linear: bf16[N, 16] and f32[16, 16]", 20},
      {"linear(z, w32, g16)", "type mismatch in linear: f32[N, 16] and f16[16]", 25},
      {"batchnorm(x, g16, g, rm, rv)",
       "type mismatch in batchnorm: weight must be bf16 (as the input bf16[N, 16]) or f32, got "
       "f16[16]",
       23},
      {"layernorm(z, g, g16)",
       "type mismatch in layernorm: bias must be f32 as the input f32[N, 16], got f16[16]", 26},
  };
  for (const Case &c : cases) {
    INFO(c.expr);
    dsl::DiagnosticError e = parse_error(header + "  return " + c.expr + "\n}\n");
    CHECK(e.message == c.message);
    CHECK(e.loc.line == 12);
    CHECK(e.loc.col == c.col);
  }
}
