// The size model: every extent, product, element and byte count is checked in int64 at `check`
// time; integer attributes stay within what the generated code's ints hold; every entry point
// that binds dims checks them with one function; the host memory of the fp64 interpreter is
// estimated before it allocates; and no kernel computes more than kMaxOpsPerKernel ops inline.
#include "compiler/dsl/diagnostics.h"
#include "compiler/dsl/parser.h"
#include "compiler/ir/host_memory.h"
#include "compiler/ir/interpreter.h"
#include "compiler/ir/ops.h"
#include "compiler/ir/verifier.h"
#include "compiler/lower.h"
#include "compiler/plan/agreement.h"
#include "compiler/plan/partition.h"
#include "compiler/plan/planner.h"
#include "kfuse/kfuse.h"
#include "tests/support/run_tool.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <limits>

using namespace kfuse;
using ir::Dim;
using kfuse::testing::run_kfuse;
using kfuse::testing::ToolRun;

namespace {

constexpr int64_t kMax = ir::kMaxExtent;

ir::Graph parse_text(const std::string &text) {
  dsl::SourceFile src("sizes.kf", text);
  dsl::Diagnostics diags(src);
  return dsl::parse_kf(src, diags);
}

// The first line of the diagnostic `text` gives.
std::string check_error(const std::string &text) {
  try {
    parse_text(text);
  } catch (const dsl::DiagnosticError &e) {
    std::string s = e.what();
    return s.substr(0, s.find('\n'));
  }
  return "";
}

std::string pipeline_with(const std::string &body) {
  return "pipeline p {\n  dim N\n" + body + "}\n";
}

// A chain of `n` ops after a relu: `h = OP` each, with h and w: f32[8] in scope.
std::string chain(int n, const std::string &op) {
  std::string s = "pipeline chain {\n  dim N\n  input x: f32[N, 8]\n  param w: f32[8]\n"
                  "  h = relu(x)\n";
  for (int i = 1; i < n; ++i)
    s += "  h = " + op + "\n";
  return s + "  return h\n}\n";
}

const char *kGemm = R"(pipeline gemm {
  dim N
  input  x: f32[N, 64]
  param  weight: f32[32, 64]
  return relu(linear(x, weight))
}
)";

} // namespace

TEST_CASE("sizes: a product that overflows int64 is an error, not undefined behaviour") {
  const Dim big = Dim::constant(kMax);
  CHECK(Dim::product({big, big}).value == kMax * kMax);
  CHECK_THROWS_WITH_AS(Dim::product({big, big, big}),
                       "the product of the extents [2147483647, 2147483647, 2147483647] "
                       "overflows int64",
                       Error);
  const Dim btu = Dim::product({Dim::symbol("B"), Dim::symbol("T"), Dim::symbol("U")});
  CHECK(btu.evaluate({{"B", kMax}, {"T", 2}, {"U", 3}}) == kMax * 6);
  CHECK_THROWS_WITH_AS(btu.evaluate({{"B", kMax}, {"T", kMax}, {"U", kMax}}),
                       "extent B*T*U overflows int64 at B=2147483647, T=2147483647, U=2147483647",
                       Error);
  const ir::TensorType t{ir::DType::F32, {Dim::symbol("N"), big, big}};
  CHECK(ir::element_count(t, {{"N", 1}}) == kMax * kMax);
  CHECK(ir::element_count(t, {{"N", 2}}) == 2 * kMax * kMax);
  CHECK(ir::element_count(t, {{"N", 3}}) == std::nullopt);
}

TEST_CASE("sizes: check refuses rows, elements and bytes beyond the size model, located") {
  CHECK(check_error(pipeline_with("  input x: f32[2147483647, 2147483647, 2147483647, 1]\n"
                                  "  return relu(x)\n")) ==
        "sizes.kf:3:12: error: f32[2147483647, 2147483647, 2147483647, 1] has "
        "2147483647*2147483647*2147483647 rows (the product of its leading extents); kfuse takes "
        "at most 2147483647");
  CHECK(check_error(pipeline_with("  input x: f32[N, 65536, 65536, 4]\n  return relu(x)\n")) ==
        "sizes.kf:3:12: error: f32[N, 65536, 65536, 4] has N*65536*65536 rows (the product of its "
        "leading extents), at least 4294967296; kfuse takes at most 2147483647");
  CHECK(check_error(pipeline_with("  input x: f32[2147483647, 2147483647]\n  return relu(x)\n")) ==
        "sizes.kf:3:12: error: f32[2147483647, 2147483647] has 4611686014132420609 elements of 4 "
        "bytes: more bytes than int64 holds (9223372036854775807)");
  // bf16 has 2 bytes an element: the same extents fit.
  CHECK(check_error(pipeline_with("  input x: bf16[2147483647, 2147483647]\n"
                                  "  return relu(x)\n")) == "");
  // A broadcast (or a GEMM) can make a result larger than its operands: checked at the op.
  CHECK(check_error(pipeline_with("  input a: f32[2147483647, 1]\n  input b: f32[1, 2147483647]\n"
                                  "  return add(a, b)\n")) ==
        "sizes.kf:5:10: error: add: the result f32[2147483647, 2147483647] has "
        "4611686014132420609 elements of 4 bytes: more bytes than int64 holds "
        "(9223372036854775807)");
}

TEST_CASE("sizes: the verifier applies the size model to graphs built in code") {
  ir::GraphBuilder b("big");
  ir::ValueId x = b.declare(ir::ValueKind::Input, "x",
                            {ir::DType::F32, {Dim::constant(kMax), Dim::constant(kMax)}});
  b.add_output(x);
  CHECK_THROWS_WITH_AS(ir::verify(b.graph()), doctest::Contains("more bytes than int64 holds"),
                       ir::VerifyError);
}

TEST_CASE("attributes: every integer attribute is range-checked against an int by the op table") {
  int checked = 0;
  for (const ir::OpInfo &op : ir::all_ops())
    for (const ir::AttrSpec &spec : op.attrs) {
      if (spec.kind != ir::AttrKind::Int && !spec.range.integer)
        continue;
      INFO(op.name, " ", spec.name);
      ++checked;
      for (double beyond : {2147483648.0, 4294967296.0, 1e19, -1e19})
        CHECK(ir::check_attr(spec, ir::AttrValue(beyond)).has_value());
    }
  CHECK(checked >= 5); // dim, groups, kernel_size, stride, stream
  const ir::OpInfo &pool = ir::op_info(ir::OpKind::MaxPool1d);
  CHECK(ir::check_attr(pool.attrs[1], ir::AttrValue(4294967296.0)) ==
        "must be an integer in [1, 2147483647], got 4294967296");
  CHECK(ir::check_attr(pool.attrs[1], ir::AttrValue(1.5)) ==
        "must be an integer in [1, 2147483647], got 1.5");
  CHECK(ir::check_attr(pool.attrs[1], ir::AttrValue(ir::kInf)) == std::nullopt); // none
  CHECK(ir::check_attr(pool.attrs[1], ir::AttrValue(2147483647.0)) == std::nullopt);
  CHECK(ir::check_attr(pool.attrs[0], ir::AttrValue(0.0)) ==
        "must be an integer in [1, 2147483647], got 0");
}

TEST_CASE("attributes: out-of-range strides, windows and groups are located diagnostics") {
  CHECK(check_error(pipeline_with("  input x: f32[N, 8]\n"
                                  "  return max_pool1d(x, kernel_size=1, stride=1e19)\n")) ==
        "sizes.kf:4:46: error: attribute 'stride' of max_pool1d must be an integer in [1, "
        "2147483647], got 1e19");
  CHECK(check_error(pipeline_with("  input x: f32[N, 8]\n"
                                  "  return max_pool1d(x, kernel_size=1, stride=4294967296)\n")) ==
        "sizes.kf:4:46: error: attribute 'stride' of max_pool1d must be an integer in [1, "
        "2147483647], got 4294967296");
  CHECK(check_error(pipeline_with("  input x: f32[N, 8]\n"
                                  "  return avg_pool1d(x, kernel_size=4294967296)\n")) ==
        "sizes.kf:4:36: error: attribute 'kernel_size' of avg_pool1d must be an integer in [1, "
        "2147483647], got 4294967296");
  CHECK(check_error(pipeline_with("  input x: f32[N, 64]\n"
                                  "  return groupnorm(x, groups=4294967296)\n")) ==
        "sizes.kf:4:30: error: attribute 'groups' of groupnorm must be an integer in [1, "
        "2147483647], got 4294967296");
}

TEST_CASE("dims: every entry point refuses a dim outside [1, 2^31 - 1] with the same message") {
  Options o;
  o.arch = "sm_90a";
  Pipeline p = Pipeline::from_string(kGemm, "gemm.kf", o);
  const ir::Graph g = parse_text(kGemm);
  const ir::TensorMap no_tensors;
  for (int64_t n :
       {int64_t{0}, int64_t{-1}, kMax + 1, int64_t{1} << 60, std::numeric_limits<int64_t>::max()}) {
    INFO(n);
    const std::string problem =
        fmt::format("dim N = {} is out of range; dims are integers in [1, 2147483647]", n);
    CHECK(ir::dim_value_problem("N", n) == problem);
    CHECK_THROWS_WITH_AS(p.workspace_size({{"N", n}}), doctest::Contains(problem.c_str()), Error);
    CHECK_THROWS_WITH_AS(p.shape("x", {{"N", n}}), doctest::Contains(problem.c_str()), Error);
    CHECK_THROWS_WITH_AS(p.output_shape(0, {{"N", n}}), doctest::Contains(problem.c_str()), Error);
    CHECK_THROWS_WITH_AS(p.dims({{"x", {n, 64}}}), doctest::Contains(problem.c_str()), Error);
    CHECK_THROWS_WITH_AS(ir::Interpreter(g, ir::Mode::Eval, {{"N", n}}, no_tensors),
                         doctest::Contains(problem.c_str()), ir::InterpretError);
  }
  // The largest dim is sized without wrapping around or looping.
  CHECK(p.workspace_size({{"N", kMax}}) >= p.workspace_size({{"N", 4096}}));
  CHECK(p.output_shape(0, {{"N", kMax}}) == std::vector<int64_t>{kMax, 32});
}

TEST_CASE("host memory: the interpreter's memory is estimated and refused above the limit") {
  ir::Graph g = parse_text(kGemm);
  // x [N, 64], weight [32, 64], three copies; the linear and the relu [N, 32] once each.
  CHECK(ir::fp64_host_bytes(g, {{"N", 10}}, 3, false) == 8 * 3 * (10 * 64 + 32 * 64));
  CHECK(ir::fp64_host_bytes(g, {{"N", 10}}, 3, true) ==
        8 * (3 * (10 * 64 + 32 * 64) + 2 * 10 * 32));
  ::setenv(ir::kHostMemoryVariable, "0.001", 1); // 1 MB
  CHECK_NOTHROW(ir::check_host_memory("kfuse run", {{"N", 10}}, 1000000));
  CHECK_THROWS_WITH_AS(ir::check_host_memory("kfuse run", {{"N", 10}}, 2500000),
                       "kfuse run at N=10 needs 0.0 GB of host memory, more than the limit of 0.0 "
                       "GB (KFUSE_HOST_MEMORY_GB); set KFUSE_HOST_MEMORY_GB=<GB> to raise it",
                       Error);
  ::setenv(ir::kHostMemoryVariable, "lots", 1);
  CHECK_THROWS_WITH_AS(
      ir::check_host_memory("kfuse run", {}, 1),
      doctest::Contains(
          "KFUSE_HOST_MEMORY_GB must be a positive number of GB (1e9 bytes), got 'lots'"),
      Error);
  ::unsetenv(ir::kHostMemoryVariable);
  // No machine holds a petabyte: refused by the machine's own limit.
  CHECK_THROWS_WITH_AS(ir::check_host_memory("kfuse run", {}, int64_t{1} << 50),
                       doctest::Contains("GB of host memory, more than the limit of"), Error);
}

TEST_CASE("host memory: plan --prove and run say what they need before they allocate") {
  const std::string kf = "examples/gemm_bn_scale_softmax.kf --dim N=2147483647";
  ToolRun prove = run_kfuse("plan " + kf + " --prove");
  CHECK(prove.exit_code == 1);
  CHECK(prove.err.find("kfuse plan: error: kfuse plan --prove at N=2147483647 needs ") == 0);
  CHECK(prove.err.find(" GB of host memory, more than the limit of ") != std::string::npos);
  CHECK(prove.err.find("set KFUSE_HOST_MEMORY_GB=<GB> to raise it") != std::string::npos);
  // Without a GPU, run says so before any host work; with one, what the reference needs.
  ToolRun run = run_kfuse("run " + kf);
  CHECK(run.exit_code == 1);
  INFO(run.err);
  CHECK((run.err.find("kfuse run: error: CUDA driver unavailable") == 0 ||
         run.err.find("kfuse run: error: kfuse run at N=2147483647 needs ") == 0));
}

TEST_CASE("planner: no kernel computes more than kMaxOpsPerKernel ops inline") {
  // tanh: a chain of matrix ops; mul by w: folded into one per-column scale, a chain of column
  // values (w * w * ...) that the scaling kernel would compute inline.
  for (const char *op : {"tanh(h)", "mul(h, w)"})
    for (int n : {40, 1000}) {
      INFO(std::string(op), " ", n);
      const std::string text = chain(n, op);
      ir::Graph g = parse_text(text);
      for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
        plan::Plan p = plan::make_plan(g, mode);
        for (const plan::Kernel &k : p.kernels)
          CHECK(static_cast<int64_t>(k.computes.size()) <= plan::kMaxOpsPerKernel);
        CHECK((p.kernels.size() > 1) == (n > 40));
        plan::StageError worst = plan::first_failure(
            plan::check_planner(g, mode, {{"N", 3}}, 7, passes::pipeline()), 1e-9);
        CHECK(worst.error <= 1e-9);
      }
      LowerOptions o;
      CHECK_NOTHROW(lower(dsl::SourceFile("chain.kf", text), o)); // every kernel emits
    }
}
