// Views (reshape, unsqueeze, squeeze): their types and errors, the interpreter, plans in which
// they cost no kernel, the code NVRTC compiles, and the runtime's shapes for a viewed output.
#include "compiler/build_executable.h"
#include "compiler/dsl/parser.h"
#include "compiler/ir/interpreter.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/views.h"
#include "compiler/lower.h"
#include "compiler/plan/agreement.h"
#include "compiler/plan/plan_printer.h"
#include "compiler/plan/planner.h"
#include "kfuse/kfuse.h"
#include "runtime/launch_table.h"
#include "runtime/pipeline.h"
#include "tests/support/kf_text.h"

#include <doctest/doctest.h>

using namespace kfuse;

namespace {

ir::Graph parse_text(const std::string &text) { return testing::parse_kf_text(text, "views.kf"); }

std::string error_of(const std::string &text) { return testing::kf_error(text, "views.kf"); }

// [B, T, 16] activations through their [B*T, 16] matrix: linear, rmsnorm, and back.
const char *kProjection = R"(pipeline projection {
  dim B, T
  input x: f32[B, T, 16]
  param w: f32[12, 16]
  param g: f32[12]
  h = reshape(x, shape=[B*T, 16])
  y = rmsnorm(linear(h, w), g)
  return reshape(y, shape=[B, T, -1])
}
)";

// The same chain on the rank-3 tensor itself, with no view.
const char *kProjectionNoViews = R"(pipeline projection {
  dim B, T
  input x: f32[B, T, 16]
  param w: f32[12, 16]
  param g: f32[12]
  return rmsnorm(linear(x, w), g)
}
)";

// A view of every kind, of inputs and of computed values, returned and read again.
const char *kEveryView = R"(pipeline every_view {
  dim N, T
  input x: f32[N, T, 8]
  input v: f32[8]
  input r: f32[N, 1, T, 1]
  h = add(reshape(x, shape=[-1, 8]), unsqueeze(v, dim=0))
  u = unsqueeze(h, dim=0)
  s = squeeze(u, dim=-3)
  k = reshape(s, shape=[N, 1, T, 8])
  m = mul(k, r)
  return softmax(squeeze(m, dim=1), dim=-1), u, reshape(x, shape=[T, N, 8])
}
)";

} // namespace

TEST_CASE("views: shapes as written, -1 inferred, negative dims, the printed form parses back") {
  ir::Graph g = parse_text(kEveryView);
  auto type_of = [&](const std::string &name) {
    for (const ir::Value &v : g.values)
      if (v.name == name)
        return v.type.str();
    return std::string("none");
  };
  CHECK(type_of("h") == "f32[N*T, 8]");
  CHECK(type_of("u") == "f32[1, N*T, 8]");
  CHECK(type_of("s") == "f32[N*T, 8]");
  CHECK(type_of("k") == "f32[N, 1, T, 8]");
  CHECK(g[g.outputs[0]].type.str() == "f32[N, T, 8]");
  CHECK(g[g.outputs[2]].type.str() == "f32[T, N, 8]");
  // T*N is N*T: products are compared as products.
  CHECK(parse_text(R"(pipeline p {
  dim N, T
  input x: f32[N, T, 8]
  return reshape(x, shape=[T*N, 8])
}
)")
            .values.back()
            .type.str() == "f32[N*T, 8]");
  const std::string printed = ir::print_kf(g);
  CHECK(printed.find("reshape(x, shape=[-1, 8])") != std::string::npos);
  CHECK(ir::print_kf(parse_text(printed)) == printed);
}

TEST_CASE("views: what would change the feature axis or the rows is refused at its location") {
  auto body = [](const std::string &line) {
    return "pipeline p {\n  dim B, T, N\n  input x: f32[B, T, 16]\n  input v: f32[16]\n"
           "  input m: f32[N, 16]\n" +
           line + "\n  return y\n}\n";
  };
  CHECK(error_of(body("  y = reshape(x, shape=[B, T*16])")) ==
        "views.kf:6:7: error: reshape of f32[B, T, 16] to [B, 16*T] is not a view kfuse runs: it "
        "would change the feature axis (the last) from 16 to 16*T; a view keeps the last extent\n"
        "  y = reshape(x, shape=[B, T*16])\n"
        "      ^~~~~~~\n");
  CHECK(error_of(body("  y = unsqueeze(x, dim=-1)")) ==
        "views.kf:6:7: error: unsqueeze of f32[B, T, 16] to [B, T, 16, 1] is not a view kfuse "
        "runs: dim=-1 adds a new last axis, which would become the feature axis; a view keeps the "
        "last axis\n"
        "  y = unsqueeze(x, dim=-1)\n"
        "      ^~~~~~~~~\n");
  // The first line of each diagnostic: the line of the view, and its file:line:col: error.
  const std::pair<const char *, const char *> refused[] = {
      {"  y = reshape(x, shape=[B, -1])",
       "views.kf:6:7: error: reshape of f32[B, T, 16] to [B, -1] is not a view kfuse runs: it "
       "would change the feature axis (the last) from 16 to 16*T; a view keeps the last extent"},
      {"  y = reshape(x, shape=[T, 8])",
       "views.kf:6:7: error: reshape of f32[B, T, 16] to [T, 8] is not a view kfuse runs: it would "
       "change the feature axis (the last) from 16 to 8; a view keeps the last extent"},
      {"  y = reshape(v, shape=[4, 4])",
       "views.kf:6:7: error: reshape of f32[16] to [4, 4] is not a view kfuse runs: it would "
       "change the feature axis (the last) from 16 to 4; a view keeps the last extent"},
      {"  y = reshape(m, shape=[16])",
       "views.kf:6:7: error: reshape of f32[N, 16] to [16] is not a view kfuse runs: it would "
       "change the number of rows from N to 1"},
      {"  y = reshape(x, shape=[-1, N, 16])",
       "views.kf:6:7: error: reshape of f32[B, T, 16] to [-1, N, 16] is not a view kfuse runs: the "
       "-1 cannot be inferred: 16*B*T elements are not a multiple of 16*N"},
      {"  y = reshape(x, shape=[-1, -1, 16])",
       "views.kf:6:29: error: only one extent of a shape can be -1"},
      {"  y = reshape(x, shape=[B, -2, 16])",
       "views.kf:6:28: error: an extent of a shape is a positive integer, a dim name, a product of "
       "them, or -1; got -2"},
      {"  y = reshape(x, shape=[B, U, 16])", "views.kf:6:28: error: undeclared dim 'U'"},
      {"  y = reshape(x, [B*T, 16])", "views.kf:6:18: error: expected a name or a call, found '['"},
      {"  y = unsqueeze(x, dim=5)",
       "views.kf:6:7: error: unsqueeze: dim=5 is out of range for f32[B, T, 16] (rank 3): it must "
       "be in [-4, 3]"},
      {"  y = unsqueeze(unsqueeze(x, dim=0), dim=0)",
       "views.kf:6:7: error: unsqueeze of f32[1, B, T, 16] to [1, 1, B, T, 16] is not a view kfuse "
       "runs: tensors have rank 1 to 4"},
      {"  y = squeeze(x, dim=2)",
       "views.kf:6:7: error: squeeze of f32[B, T, 16] to [B, T] is not a view kfuse runs: dim=2 is "
       "the feature axis (the last); a view keeps the last axis"},
      {"  y = squeeze(x, dim=0)",
       "views.kf:6:7: error: squeeze of f32[B, T, 16] to [T, 16] is not a view kfuse runs: axis 0 "
       "has extent B, not 1; PyTorch would leave the tensor as it is, kfuse refuses a squeeze that "
       "may or may not remove an axis"},
      {"  y = squeeze(x)", "views.kf:6:7: error: squeeze requires the attribute 'dim'"},
  };
  for (const auto &[line, first] : refused) {
    std::string e = error_of(body(line));
    CHECK(e.substr(0, e.find('\n')) == first);
  }
  CHECK(error_of("pipeline p {\n  input c: f32[2, 3, 16]\n  return reshape(c, shape=[5, 16])\n}\n")
            .rfind("views.kf:3:10: error: reshape of f32[2, 3, 16] to [5, 16] is not a view kfuse "
                   "runs: it would change the number of rows from 6 to 5\n",
                   0) == 0);
}

TEST_CASE("views: the interpreter gives a view its source's elements in the view's shape") {
  ir::Graph g = parse_text(kEveryView);
  ir::DimBindings dims = {{"N", 3}, {"T", 2}};
  ir::TensorMap tensors = ir::random_tensors(g, dims, 7);
  std::vector<ir::HostTensor> out = ir::interpret(g, ir::Mode::Eval, dims, tensors);
  REQUIRE(out.size() == 3);
  CHECK(out[0].shape == std::vector<int64_t>{3, 2, 8});
  CHECK(out[1].shape == std::vector<int64_t>{1, 6, 8});
  CHECK(out[2].shape == std::vector<int64_t>{2, 3, 8});
  CHECK(out[2].data == tensors.at("x").data);
  for (size_t i = 0; i < 8; ++i) // row 0 of h = x[0, 0, :] + v
    CHECK(out[1].data[i] == tensors.at("x").data[i] + tensors.at("v").data[i]);
}

TEST_CASE("views: every pass and the plan agree with the interpreter on pipelines with views") {
  for (const char *text : {kProjection, kEveryView})
    for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval})
      for (int64_t n : {1, 3}) {
        ir::Graph g = parse_text(text);
        ir::DimBindings dims = {{"B", n}, {"T", 5}, {"N", n}};
        for (auto it = dims.begin(); it != dims.end();)
          it = std::count(g.dims.begin(), g.dims.end(), it->first) ? std::next(it) : dims.erase(it);
        auto worst =
            plan::first_failure(plan::check_planner(g, mode, dims, 11, passes::pipeline()), 1e-12);
        INFO(g.name, " ", ir::mode_name(mode), " worst stage ", worst.stage);
        CHECK(worst.error <= 1e-12);
      }
}

TEST_CASE("views: dims a view equates with a product of others are bound to that product") {
  // N = B*T through the first reshape; M = 2*N through the second, bound once N is.
  ir::Graph regroup = parse_text("pipeline regroup {\n  dim M, N, B, T\n  input x: f32[N, 4]\n"
                                 "  input y: f32[B, T, 4]\n  input z: f32[M, 4]\n"
                                 "  return add(reshape(x, shape=[B, T, 4]), y), "
                                 "reshape(z, shape=[2, N, 4])\n}\n");
  CHECK(ir::view_consistent_dims(regroup, 3) ==
        ir::DimBindings{{"B", 3}, {"T", 3}, {"N", 9}, {"M", 18}});
  for (int64_t n : {1, 2, 5}) {
    const ir::DimBindings dims = ir::view_consistent_dims(regroup, n);
    for (size_t v = 0; v < regroup.values.size(); ++v)
      if (regroup.values[v].is_op() && ir::op_info(regroup.values[v].op).cls == ir::OpClass::View)
        CHECK_FALSE(ir::view_rows_problem(regroup, static_cast<ir::ValueId>(v), dims));
  }
  // Views whose rows are the same extent, and files with no view, bind every dim to the size.
  CHECK(ir::view_consistent_dims(parse_text(kProjection), 5) ==
        ir::DimBindings{{"B", 5}, {"T", 5}});
  // Two dims equated with each other: one is bound to the other.
  ir::Graph pair =
      parse_text("pipeline pair {\n  dim N, M\n  input x: f32[N, 4]\n"
                 "  input y: f32[M, 4]\n  return add(reshape(x, shape=[M, 4]), y)\n}\n");
  CHECK(ir::view_consistent_dims(pair, 2) == ir::DimBindings{{"M", 2}, {"N", 2}});
}

TEST_CASE("views: a view is no kernel and no copy, `kfuse plan` lists it as the buffer it views") {
  LowerOptions o;
  o.target.arch = "sm_90a";
  Lowered with = lower(dsl::SourceFile("projection.kf", kProjection), o);
  Lowered without = lower(dsl::SourceFile("projection.kf", kProjectionNoViews), o);
  CHECK(with.plan.kernels.size() == without.plan.kernels.size());
  CHECK(with.plan.intermediates.size() == without.plan.intermediates.size());
  CHECK(with.program.launches.size() == without.program.launches.size());
  const std::string text = plan::print_plan_text(with.plan, {});
  CHECK(text.find("views (no kernel: each is the buffer it views, under its own shape)\n"
                  "  h f32[B*T, 16] = reshape(x, shape=[B*T, 16]): the buffer of x\n"
                  "  t2 f32[B, T, 12] = reshape(y, shape=[B, T, -1]): the buffer of y\n") !=
        std::string::npos);
  CHECK(
      plan::print_plan_json(with.plan, {})
          .find("\"views\": [\"h f32[B*T, 16] = reshape(x, shape=[B*T, 16]): the buffer of x\"") !=
      std::string::npos);
  // The GEMM reads x itself, and the row kernel writes the output's memory.
  CHECK(text.find("reads    x f32[B, T, 16], w f32[12, 16]") != std::string::npos);
  CHECK(text.find("stored   y: output") != std::string::npos);
}

TEST_CASE("views: the unfused baseline's GEMM reads a viewed operand where its source lies") {
  // `kfuse bench` runs the unfused plan's GEMMs through cuBLAS with these pointers.
  Options o;
  o.arch = "sm_90a";
  Lowered l = lower(dsl::SourceFile("projection.kf", kProjection),
                    lower_options(rt::PipelineAccess::request(o, /*fuse=*/false)));
  const exec::Executable exe = build_executable(l);
  auto slot = [&](const std::string &name) {
    const int i = exe.interface.find(name);
    REQUIRE(i >= 0);
    return static_cast<size_t>(i);
  };
  rt::LaunchTable table(exe, 0);
  table.prepare({{"B", 3}, {"T", 5}}, 132);
  std::vector<CUdeviceptr> tensors(table.slots());
  for (size_t i = 0; i < tensors.size(); ++i)
    tensors[i] = 0x100000 * (i + 1);
  const CUdeviceptr workspace = 0x40000000;
  table.point(tensors.data(), workspace, "projection");
  const std::vector<rt::GemmCall> calls = table.gemm_calls();
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].a == reinterpret_cast<const void *>(tensors[slot("x")]));
  CHECK(calls[0].b == reinterpret_cast<const void *>(tensors[slot("w")]));
  CHECK(calls[0].m == 15);
  CHECK(calls[0].n == 12);
  CHECK(calls[0].k == 16);
  CHECK(reinterpret_cast<CUdeviceptr>(calls[0].c) >= workspace); // the product, an intermediate
}

TEST_CASE("views: every kind of view compiles with NVRTC, the GPU refuses a vector viewed as a "
          "GEMM's or row kernel's matrix at its location") {
  Options o;
  o.arch = "sm_90a";
  for (const char *text : {kProjection, kEveryView})
    for (Mode mode : {Mode::Train, Mode::Eval}) {
      o.mode = mode;
      CHECK_NOTHROW(Pipeline::from_string(text, "views.kf", o));
    }
  CHECK_THROWS_WITH_AS(Pipeline::from_string(R"(pipeline p {
  input v: f32[16]
  param w: f32[8, 16]
  return linear(unsqueeze(v, dim=0), w)
}
)",
                                             "vector.kf", o),
                       doctest::Contains("vector.kf:4:10: error: linear of f32[1, 16], a view of "
                                         "f32[16], is not supported on the GPU: a view between a "
                                         "vector and a matrix is an operand of pointwise ops only"),
                       dsl::DiagnosticError);
}

TEST_CASE("views: a viewed output has the view's shape, rows that the bound dims make differ are "
          "refused naming the view and both shapes") {
  Options o;
  o.arch = "sm_90a";
  Pipeline p = Pipeline::from_string(kProjection, "projection.kf", o);
  CHECK(p.output_shape(0, {{"B", 3}, {"T", 5}}) == std::vector<int64_t>{3, 5, 12});
  alignas(256) static float memory[2048];
  Tensor w{memory, {12, 16}}, g{memory + 256, {12}};
  p.bind("w", w);
  p.bind("g", g);
  Tensor x{memory + 512, {3, 5, 16}}, flat{memory + 1536, {15, 12}};
  CHECK_THROWS_WITH_AS(p.run({{"x", x}}, {flat}),
                       doctest::Contains("pipeline 'projection': tensor 'output 0' must be f32[B, "
                                         "T, 12], got shape [15, 12]"),
                       Error);

  Pipeline q = Pipeline::from_string(R"(pipeline regroup {
  dim N, B, T
  input x: f32[N, 4]
  input y: f32[B, T, 4]
  return add(reshape(x, shape=[B, T, 4]), y)
}
)",
                                     "regroup.kf", o);
  Tensor x2{memory, {7, 4}}, y{memory + 256, {2, 3, 4}}, out{memory + 512, {2, 3, 4}};
  CHECK_THROWS_WITH_AS(
      q.run({{"x", x2}, {"y", y}}, {out}),
      doctest::Contains("pipeline 'regroup': %2 (reshape) (line 5) views input 'x' "
                        "(%0) f32[N, 4] as f32[B, T, 4], but the bound dims give "
                        "N = 7 rows and B*T = 6"),
      Error);
}
