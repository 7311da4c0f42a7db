// The planner: kernel counts of the founding workloads, and proof by interpretation that
// every pass and the final partition compute what the user wrote.
#include "compiler/dsl/parser.h"
#include "compiler/passes/rewriter.h"
#include "compiler/plan/agreement.h"
#include "compiler/plan/planner.h"
#include "compiler/plan/validate_plan.h"
#include "tests/support/random_pipelines.h"

#include <doctest/doctest.h>

#include <filesystem>

using namespace kfuse;
using ir::Mode;

namespace {

constexpr double kTolerance = 1e-9;

ir::Graph parse_text(const std::string &text) {
  dsl::SourceFile src("test.kf", text);
  dsl::Diagnostics diags(src);
  return dsl::parse_kf(src, diags);
}

ir::Graph example(const std::string &name) {
  return dsl::parse_kf_file(std::string(KFUSE_SOURCE_DIR) + "/examples/" + name);
}

std::vector<std::string> kinds(const plan::Plan &p) {
  std::vector<std::string> out;
  for (const plan::Kernel &k : p.kernels)
    out.push_back(std::string(plan::kernel_kind_name(k.kind)));
  return out;
}

using Kinds = std::vector<std::string>;

// linear -> per-feature scale -> batchnorm, at a size the interpreter runs instantly.
const char *kSmallScaleBn = R"(pipeline small_scale_bn {
  dim N
  input  x: f32[N, 6]
  param  weight: f32[5, 6]
  param  bias: f32[5]
  param  scale: f32[5]
  param  bn_weight: f32[5]
  param  bn_bias: f32[5]
  state  running_mean: f32[5]
  state  running_var: f32[5]
  h = linear(x, weight, bias)
  h = mul(h, scale)
  return batchnorm(h, bn_weight, bn_bias, running_mean, running_var, eps=1e-5, momentum=0.1)
}
)";

const char *kSmallSoftmax = R"(pipeline small_softmax {
  dim N
  input  x: f32[N, 7]
  param  weight: f32[4, 7]
  param  bias: f32[4]
  param  bn_weight: f32[4]
  param  bn_bias: f32[4]
  state  running_mean: f32[4]
  state  running_var: f32[4]
  param  scale: f32[1]
  h = linear(x, weight, bias)
  h = batchnorm(h, bn_weight, bn_bias, running_mean, running_var)
  h = mul(scale, h)
  return softmax(h, dim=1)
}
)";

void set(ir::TensorMap &t, const std::string &name, std::vector<double> values) {
  REQUIRE(t.at(name).data.size() == values.size());
  t.at(name).data = std::move(values);
}

void expect_agreement(const ir::Graph &g, Mode mode, int64_t n, uint64_t seed,
                      const std::function<void(ir::TensorMap &)> &tweak = {}) {
  auto worst = plan::first_failure(
      plan::check_planner(g, mode, {{"N", n}}, seed, passes::pipeline(), tweak), kTolerance);
  INFO(g.name, " mode ", ir::mode_name(mode), " N=", n, " worst stage ", worst.stage);
  CHECK(worst.error <= kTolerance);
}

} // namespace

TEST_CASE("planner: founding workloads meet their kernel counts") {
  struct Case {
    const char *file;
    Mode mode;
    Kinds expected;
  };
  for (const Case &c : {Case{"gemm_scale_bn.kf", Mode::Eval, {"gemm"}},
                        Case{"gemm_scale_bn_4096.kf", Mode::Eval, {"gemm"}},
                        Case{"gemm_bn_scale_softmax.kf", Mode::Eval, {"gemm", "row"}},
                        Case{"gemm_scale_bn.kf", Mode::Train, {"gemm", "column", "elementwise"}},
                        Case{"gemm_bn_scale_softmax.kf", Mode::Train, {"gemm", "column", "row"}}}) {
    INFO(c.file, " ", ir::mode_name(c.mode));
    plan::Plan p = plan::make_plan(example(c.file), c.mode);
    CHECK(kinds(p) == c.expected);
    if (c.mode == Mode::Train)
      CHECK(p.kernels[0].stats_of >= 0); // statistics come from the GEMM's epilogue
  }
}

TEST_CASE("planner: fused and unfused plans of every example pass the validator") {
  for (const auto &entry :
       std::filesystem::directory_iterator(std::string(KFUSE_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() != ".kf")
      continue;
    INFO(entry.path().string());
    ir::Graph g = dsl::parse_kf_file(entry.path().string());
    for (Mode mode : {Mode::Train, Mode::Eval})
      for (bool fuse : {true, false})
        CHECK_NOTHROW(plan::make_plan(g, mode, {}, fuse)); // make_plan validates
  }
}

TEST_CASE("planner: founding workloads agree with the interpreter after every pass") {
  for (const char *file : {"gemm_scale_bn.kf", "gemm_bn_scale_softmax.kf", "gemm_scale_bn_4096.kf"})
    for (Mode mode : {Mode::Train, Mode::Eval})
      expect_agreement(example(file), mode, 2, 11);
}

// Every dim of `g` bound to `n`, but a second dim to a small width.
ir::DimBindings bind_dims(const ir::Graph &g, int64_t n) {
  ir::DimBindings dims;
  for (const std::string &d : g.dims)
    dims[d] = d == "N" ? n : 3;
  return dims;
}

TEST_CASE("planner: random pipelines agree with the interpreter after every pass") {
  std::map<std::string, int> ops_seen;
  for (uint64_t seed = 1; seed <= 240; ++seed) {
    testing::SeededChoices choices(seed);
    std::string text = testing::random_pipeline(choices, {}, "random_" + std::to_string(seed));
    INFO(text);
    ir::Graph g = parse_text(text);
    for (const ir::Value &v : g.values)
      if (v.is_op())
        ++ops_seen[std::string(ir::op_info(v.op).name)];
    Mode mode = seed % 2 ? Mode::Train : Mode::Eval;
    int64_t n = seed % 17 == 0 ? 1 : std::vector<int64_t>{2, 3, 7, 16, 64}[seed % 5];
    auto worst = plan::first_failure(
        plan::check_planner(g, mode, bind_dims(g, n), seed, passes::pipeline()), kTolerance);
    INFO("mode ", ir::mode_name(mode), " N=", n, " worst stage ", worst.stage);
    CHECK(worst.error <= kTolerance);
    CHECK_NOTHROW(plan::make_plan(g, mode, {}, /*fuse=*/false)); // the bench baseline, validated
  }
  // The generator reaches every op of the table.
  for (const ir::OpInfo &op : ir::all_ops()) {
    INFO(op.name);
    CHECK(ops_seen[std::string(op.name)] > 0);
  }
}

TEST_CASE("planner: long random chains plan validly and agree") {
  testing::PipelineShape shape;
  shape.min_ops = 300;
  shape.max_ops = 2000;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    testing::SeededChoices choices(seed);
    std::string text = testing::random_pipeline(choices, shape, "long_" + std::to_string(seed));
    ir::Graph g = parse_text(text);
    CHECK(g.values.size() > 300);
    Mode mode = seed % 2 ? Mode::Train : Mode::Eval;
    // Hundreds of stacked batchnorms amplify rounding chaotically, so the passes are proven
    // on short pipelines (above); here the plan must compute what the rewritten graph does.
    plan::Plan p = plan::make_plan(g, mode);
    // Tensors drawn for the file (running variances positive), not for the rewritten graph.
    ir::DimBindings dims = bind_dims(g, 5);
    auto worst = plan::first_failure(
        plan::check_planner(p.graph, mode, dims, seed, {},
                            [&](ir::TensorMap &t) { t = ir::random_tensors(g, dims, seed); }),
        kTolerance);
    INFO(text.substr(0, 2000));
    INFO("mode ", ir::mode_name(mode), " worst stage ", worst.stage);
    CHECK(worst.error <= kTolerance);
  }
}

namespace {

ir::Graph issue_case(const std::string &name) {
  return dsl::parse_kf_file(std::string(KFUSE_SOURCE_DIR) + "/tests/support/pipelines/" + name);
}

size_t kernel_storing(const plan::Plan &p, const std::string &name) {
  for (size_t k = 0; k < p.kernels.size(); ++k)
    for (ir::ValueId s : p.kernels[k].stores)
      if (p.graph[s].name == name)
        return k;
  FAIL("no kernel stores '", name, "'");
  return 0;
}

size_t kernel_updating(const plan::Plan &p, const std::string &state) {
  for (size_t k = 0; k < p.kernels.size(); ++k)
    for (ir::ValueId id : p.kernels[k].computes)
      if (p.graph[id].is_effect() && p.graph[p.graph[id].args[0]].name == state)
        return k;
  FAIL("no kernel updates '", state, "'");
  return 0;
}

size_t first_kernel_reading(const plan::Plan &p, const std::string &name) {
  for (size_t k = 0; k < p.kernels.size(); ++k)
    for (ir::ValueId r : p.kernels[k].reads)
      if (p.graph[r].name == name)
        return k;
  FAIL("no kernel reads '", name, "'");
  return 0;
}

size_t last_kernel_reading(const plan::Plan &p, const std::string &name, size_t except) {
  size_t last = 0;
  for (size_t k = 0; k < p.kernels.size(); ++k)
    for (ir::ValueId r : p.kernels[k].reads)
      if (p.graph[r].name == name && k != except)
        last = k;
  return last;
}

} // namespace

TEST_CASE("planner: a kernel runs after the kernels that store what it reads") {
  ir::Graph g = issue_case("read_before_store.kf");
  plan::Plan p = plan::make_plan(g, Mode::Train);
  CHECK(kernel_storing(p, "g") < first_kernel_reading(p, "g"));
  for (Mode mode : {Mode::Train, Mode::Eval})
    for (int64_t n : {2, 5, 64})
      expect_agreement(g, mode, n, 31);
}

TEST_CASE("planner: reads of a state see its value on entry") {
  ir::Graph g = issue_case("state_read_after_update.kf");
  plan::Plan p = plan::make_plan(g, Mode::Train);
  size_t update = kernel_updating(p, "rm");
  CHECK(last_kernel_reading(p, "rm", update) < update);
  CHECK(std::count(p.kernels[update].rules.begin(), p.kernels[update].rules.end(),
                   "state_update_after_readers") == 1);
  for (Mode mode : {Mode::Train, Mode::Eval})
    for (int64_t n : {2, 5, 64})
      expect_agreement(g, mode, n, 37);
}

TEST_CASE("planner: a chain of 50,000 ops plans without deep recursion") {
  std::string text = "pipeline long_chain {\n  dim N\n  input x: f32[N, 4]\n  h = relu(x)\n";
  for (int i = 0; i < 50000; ++i)
    text += "  h = relu(h)\n";
  ir::Graph g = parse_text(text + "  return h\n}\n");
  for (Mode mode : {Mode::Train, Mode::Eval}) {
    plan::Plan p = plan::make_plan(g, mode);
    REQUIRE(p.kernels.size() == 1);
    CHECK(p.kernels[0].computes.size() == 50001);
  }
}

TEST_CASE("planner: the validator names the kernels of an invalid plan") {
  plan::Plan good = plan::make_plan(issue_case("state_read_after_update.kf"), Mode::Train);
  REQUIRE(good.kernels.size() >= 3);
  SUBCASE("a read before the store") {
    plan::Plan p = good;
    std::swap(p.kernels[0], p.kernels[1]);
    CHECK_THROWS_WITH_AS(plan::validate_plan(p),
                         "internal error: invalid plan for 'state_read_after_update': kernel "
                         "k1_column computes %4 (col_mean) without partials of input 'x' (%0)",
                         plan::PlanError);
  }
  SUBCASE("a state read after the update") {
    plan::Plan p = good;
    size_t update = kernel_updating(p, "rm");
    REQUIRE(update == 4);
    std::rotate(p.kernels.begin() + 2, p.kernels.begin() + 4, p.kernels.end());
    CHECK_THROWS_WITH_AS(
        plan::validate_plan(p),
        doctest::Contains("kernel k3_elementwise reads state 'rm' after kernel k4_column "
                          "updated it in place"),
        plan::PlanError);
  }
  SUBCASE("two kernels store one buffer") {
    plan::Plan p = good;
    p.kernels.push_back(p.kernels[0]);
    p.kernels.back().name = "k9_copy";
    CHECK_THROWS_WITH_AS(plan::validate_plan(p), doctest::Contains("kernel k9_copy"),
                         plan::PlanError);
  }
  SUBCASE("an op no kernel computes") {
    plan::Plan p = good;
    p.kernels.pop_back();
    CHECK_THROWS_AS(plan::validate_plan(p), plan::PlanError);
  }
  CHECK_NOTHROW(plan::validate_plan(good));
}

TEST_CASE("planner: adversarial parameters") {
  ir::Graph scale_bn = parse_text(kSmallScaleBn);
  ir::Graph softmax = parse_text(kSmallSoftmax);
  for (Mode mode : {Mode::Train, Mode::Eval}) {
    SUBCASE("zero and negative per-feature scales") {
      expect_agreement(scale_bn, mode, 4, 3, [](ir::TensorMap &t) {
        set(t, "scale", {0.0, -2.5, 1.0, 0.0, -1e-3});
      });
    }
    SUBCASE("zero and negative scalar scale") {
      for (double s : {0.0, -3.0})
        expect_agreement(softmax, mode, 3, 5, [s](ir::TensorMap &t) { set(t, "scale", {s}); });
    }
    SUBCASE("running variance near zero") {
      expect_agreement(scale_bn, mode, 3, 7, [](ir::TensorMap &t) {
        set(t, "running_var", {1e-12, 0.0, 1e-30, 2.0, 1e-7});
      });
    }
    SUBCASE("constant columns") {
      expect_agreement(scale_bn, mode, 5, 9, [](ir::TensorMap &t) {
        for (int j = 0; j < 6; ++j) { // rows 1 and 3 of the weight are zero: columns = bias
          t.at("weight").data[static_cast<size_t>(6 + j)] = 0;
          t.at("weight").data[static_cast<size_t>(18 + j)] = 0;
        }
      });
    }
    SUBCASE("a single row") {
      // Eval runs; train mode rejects N=1 in the reference and in every stage alike.
      expect_agreement(scale_bn, mode, 1, 13);
      expect_agreement(softmax, mode, 1, 17);
    }
  }
}

namespace {

// A wrong rewrite: the variance of a*y taken as a*var(y) instead of a^2*var(y).
ir::Graph absorb_with_wrong_variance(const ir::Graph &g, Mode) {
  return passes::Rewriter(g, "broken_absorb")
      .run([](passes::Rewriter &r, ir::ValueId old) -> ir::ValueId {
        const ir::Value &v = r.old_graph()[old];
        const ir::Value &in = r.old_graph()[v.args.empty() ? old : v.args[0]];
        if (v.op != ir::OpKind::ColVar || !in.is_op() || in.op != ir::OpKind::ColAffine)
          return -1;
        return r.op(ir::OpKind::Mul,
                    {r.op(ir::OpKind::ColVar, {r.map(in.args[0])}), r.map(in.args[1])});
      });
}

} // namespace

TEST_CASE("planner: the harness rejects a wrong rewrite") {
  std::vector<passes::Pass> broken = passes::pipeline();
  for (passes::Pass &p : broken)
    if (p.name == "absorb_affine_into_stats")
      p = {"broken_absorb", absorb_with_wrong_variance};
  ir::Graph g = parse_text(kSmallScaleBn);
  auto worst =
      plan::first_failure(plan::check_planner(g, Mode::Train, {{"N", 4}}, 21, broken), kTolerance);
  CHECK(worst.stage == "broken_absorb");
  CHECK(worst.error > 1e-3);
  // The real pass on the same inputs agrees.
  CHECK(plan::first_failure(plan::check_planner(g, Mode::Train, {{"N", 4}}, 21, passes::pipeline()),
                            kTolerance)
            .error <= kTolerance);
}

TEST_CASE("planner: the unfused baseline stores each intermediate in its type, fused in f32") {
  // PyTorch eager runs a bf16 chain op by op, each result a bf16 tensor; a fused kernel hands
  // values on in fp32. f32 batchnorm parameters keep their derived per-column values f32.
  const ir::Graph g = example("gemm_bn_scale_softmax_bf16.kf");
  for (Mode mode : {Mode::Train, Mode::Eval}) {
    INFO(ir::mode_name(mode));
    plan::Plan unfused = plan::make_plan(g, mode, {}, /*fuse=*/false);
    REQUIRE(!unfused.intermediates.empty());
    int half = 0;
    for (const plan::Intermediate &i : unfused.intermediates) {
      INFO(i.name);
      CHECK(i.type.dtype == unfused.graph[i.value].type.dtype);
      CHECK(plan::buffer_type(unfused, i.value).dtype == i.type.dtype);
      half += i.type.dtype == ir::DType::BF16;
    }
    CHECK(half >= 3); // the GEMM's product, the bias sum, batchnorm's and the scale's results
    for (const plan::Intermediate &i : plan::make_plan(g, mode, {}).intermediates)
      CHECK(i.type.dtype == ir::DType::F32);
  }
}
