// The backward of batch statistics exchanged across ranks (Options::batch_stats_ranks,
// nn.SyncBatchNorm + DDP): two ranks, each with its part of a batch, run the forward that saves
// and the backward by the plan executor, which exchanges what their Summary kernels summarize
// as the run's all-gathers do. Each rank's input gradient is the rows of the one-rank backward's
// on the whole batch; each rank's parameter gradients are its own sums, which add up to the
// whole batch's (DDP averages them). The backward plan exchanges the means batchnorm's input
// gradient takes, and only those.
#include "compiler/build_executable.h"
#include "compiler/dsl/parser.h"
#include "compiler/ir/interpreter.h"
#include "compiler/plan/execute_plan.h"
#include "compiler/plan/plan_printer.h"
#include "compiler/plan/planner.h"

#include <doctest/doctest.h>

#include <algorithm>

using namespace kfuse;
using ir::HostTensor;
using ir::TensorMap;

namespace {

// A bias and a scale before a batchnorm (both absorbed into its statistics), a second
// batchnorm after a tanh: the input gradient crosses both normalizations.
const char *kTwoNorms = R"(pipeline two_norms {
  dim N
  input  x: f32[N, 12]
  param  weight: f32[10, 12]
  param  bias: f32[10]
  param  scale: f32[10]
  param  g1: f32[10]
  param  b1: f32[10]
  state  m1: f32[10]
  state  v1: f32[10]
  param  g2: f32[10]
  param  b2: f32[10]
  state  m2: f32[10]
  state  v2: f32[10]
  h = mul(linear(x, weight, bias), scale)
  h = tanh(batchnorm(h, g1, b1, m1, v1))
  return batchnorm(h, g2, b2, m2, v2, momentum=0.25)
}
)";

// Tokens [B, T, 8] normalized over their B*T rows (BatchNorm1d over tokens): a rank holds some
// of the B sequences.
const char *kTokens = R"(pipeline tokens {
  dim B, T
  input  x: f32[B, T, 8]
  param  w: f32[6, 8]
  param  gamma: f32[6]
  param  beta: f32[6]
  state  rm: f32[6]
  state  rv: f32[6]
  rows = reshape(x, shape=[B*T, 8])
  y = silu(batchnorm(linear(rows, w), gamma, beta, rm, rv))
  return reshape(y, shape=[B, T, -1])
}
)";

struct Case {
  const char *name;
  const char *text;
  std::string split;                 // the dim the ranks' batches divide
  ir::DimBindings fixed;             // the other dims
  std::vector<int64_t> rank_extents; // `split` on each rank
};

ir::Graph parsed(const dsl::SourceFile &src) {
  dsl::Diagnostics diags(src);
  return dsl::parse_kf(src, diags);
}

// Rows [first, first + count) of `t` along its first axis.
HostTensor rows_of(const HostTensor &t, int64_t first, int64_t count) {
  const int64_t per_row = t.numel() / t.shape.front();
  HostTensor out{t.shape, {}};
  out.shape.front() = count;
  out.data.assign(t.data.begin() + first * per_row, t.data.begin() + (first + count) * per_row);
  return out;
}

bool has_batch_rows(const ir::Graph &g, const std::string &name, const std::string &split) {
  const ir::TensorType &t = g[g.find(name)].type;
  return t.rank() >= 2 && t.shape.front().is_symbolic() && t.shape.front().sym == split;
}

// Rank r's part of a tensor whose first axis is the batch.
HostTensor rank_part(const HostTensor &t, const Case &c, size_t rank) {
  int64_t first = 0;
  for (size_t r = 0; r < rank; ++r)
    first += c.rank_extents[r];
  return rows_of(t, first, c.rank_extents[rank]);
}

// Rank r's part of every tensor of `g` whose first axis is the batch; the rest whole.
TensorMap part_of(const ir::Graph &g, const TensorMap &whole, const Case &c, size_t rank) {
  TensorMap out;
  for (const auto &[name, t] : whole)
    out[name] = has_batch_rows(g, name, c.split) ? rank_part(t, c, rank) : t;
  return out;
}

// Each value is computed as on one rank, but for the order of a column sum's terms and the
// rounding of the stored result to f32.
constexpr double kAgree = 1e-6;

double error(const HostTensor &a, const HostTensor &b) {
  REQUIRE(a.shape == b.shape);
  return ir::relative_error(a.data, b.data);
}

// The backward's tensors: the output gradients, the saved values (the forward's further
// outputs, a [B*T, F] value in the backward's declared [B, T, F]) and the forward's
// declarations it reads.
TensorMap backward_tensors(const ir::Graph &backward, const TrainingSources &s,
                           const ir::DimBindings &dims, const TensorMap &forward_tensors,
                           const std::vector<HostTensor> &outs, const TensorMap &grads) {
  TensorMap t;
  for (const ir::Value &v : backward.values) {
    if (v.is_op())
      continue;
    auto saved = std::find(s.saved.begin(), s.saved.end(), v.name);
    if (grads.count(v.name)) {
      t[v.name] = grads.at(v.name);
    } else if (saved != s.saved.end()) {
      t[v.name] = outs.at(s.outputs + static_cast<size_t>(saved - s.saved.begin()));
      t[v.name].shape = ir::concrete_shape(v.type, dims);
    } else {
      t[v.name] = forward_tensors.at(v.name);
    }
  }
  return t;
}

void check_two_ranks_against_one(const Case &c) {
  INFO(c.name);
  const TrainingSources s = training_sources(dsl::SourceFile(c.name, c.text), ir::Mode::Train, {});
  const ir::Graph forward = parsed(s.forward), backward = parsed(s.backward);
  const int ranks = static_cast<int>(c.rank_extents.size());
  ir::DimBindings whole_dims = c.fixed;
  whole_dims[c.split] = 0;
  for (int64_t e : c.rank_extents)
    whole_dims[c.split] += e;
  std::vector<ir::DimBindings> rank_dims;
  for (int64_t e : c.rank_extents) {
    rank_dims.push_back(c.fixed);
    rank_dims.back()[c.split] = e;
  }

  // One rank, the whole batch.
  const TensorMap inputs = ir::random_tensors(forward, whole_dims, 11);
  TensorMap one = inputs;
  const std::vector<HostTensor> outs =
      plan::execute_plan(plan::make_plan(forward, ir::Mode::Train), whole_dims, one);
  const TensorMap backward_random = ir::random_tensors(backward, whole_dims, 12);
  TensorMap grads;
  for (const std::string &name : s.grad_inputs)
    grads[name] = backward_random.at(name);
  TensorMap one_bw = backward_tensors(backward, s, whole_dims, inputs, outs, grads);
  const std::vector<HostTensor> gradients =
      plan::execute_plan(plan::make_plan(backward, ir::Mode::Train), whole_dims, one_bw);

  // Two ranks, a part of the batch each.
  const plan::Plan forward_ranked = plan::make_plan(forward, ir::Mode::Train, {}, true, ranks);
  const plan::Plan backward_ranked = plan::make_plan(backward, ir::Mode::Train, {}, true, ranks);
  std::vector<TensorMap> rank_inputs, rank_bw;
  for (int r = 0; r < ranks; ++r)
    rank_inputs.push_back(part_of(forward, inputs, c, static_cast<size_t>(r)));
  std::vector<TensorMap> rank_states = rank_inputs;
  const std::vector<std::vector<HostTensor>> rank_outs =
      plan::execute_plan_ranks(forward_ranked, rank_dims, rank_states);
  for (size_t r = 0; r < c.rank_extents.size(); ++r) {
    const TensorMap rank_grads = part_of(backward, grads, c, r);
    rank_bw.push_back(
        backward_tensors(backward, s, rank_dims[r], rank_inputs[r], rank_outs[r], rank_grads));
    // The forward normalized with the whole batch's statistics and updated the running ones
    // from them, as the one rank did.
    CHECK(error(rank_outs[r][0], rank_part(outs[0], c, r)) <= kAgree);
    for (const ir::Value &v : forward.values)
      if (v.kind == ir::ValueKind::State)
        CHECK(error(rank_states[r].at(v.name), one.at(v.name)) <= kAgree);
  }
  const std::vector<std::vector<HostTensor>> rank_gradients =
      plan::execute_plan_ranks(backward_ranked, rank_dims, rank_bw);

  for (size_t i = 0; i < s.gradients.size(); ++i) {
    const std::string &name = s.gradients[i];
    INFO("the gradient of ", name);
    if (has_batch_rows(forward, name, c.split)) { // an input: each rank has its rows
      for (size_t r = 0; r < rank_gradients.size(); ++r)
        CHECK(error(rank_gradients[r][i], rank_part(gradients[i], c, r)) <= kAgree);
      continue;
    }
    HostTensor sum = rank_gradients[0][i]; // a param: the ranks' own sums add up
    for (int r = 1; r < ranks; ++r)
      for (size_t j = 0; j < sum.data.size(); ++j)
        sum.data[j] += rank_gradients[static_cast<size_t>(r)][i].data[j];
    CHECK(error(sum, gradients[i]) <= kAgree);
  }
}

} // namespace

TEST_CASE("exchange stats backward: two ranks' gradients on parts of a batch are one rank's on "
          "the whole batch") {
  check_two_ranks_against_one({"two_norms.kf", kTwoNorms, "N", {}, {3, 5}});
  check_two_ranks_against_one({"tokens.kf", kTokens, "B", {{"T", 3}}, {1, 2}});
}

TEST_CASE("exchange stats backward: the plan exchanges the means of batchnorm's input gradient, "
          "not the parameter gradients' sums") {
  const TrainingSources s =
      training_sources(dsl::SourceFile("two_norms.kf", kTwoNorms), ir::Mode::Train, {});
  const plan::Plan p = plan::make_plan(parsed(s.backward), ir::Mode::Train, {}, true, 2);
  INFO(plan::print_plan_text(p, {}));
  int exchanged = 0, summaries = 0, local = 0;
  for (const plan::Kernel &k : p.kernels) {
    summaries += k.kind == plan::KernelKind::Summary;
    if (k.kind != plan::KernelKind::Column || k.stats_of < 0)
      continue;
    for (ir::ValueId id : k.computes) {
      const ir::Value &v = p.graph[id];
      if (!v.is_op() || ir::op_info(v.op).cls != ir::OpClass::ColReduce)
        continue;
      CHECK(ir::is_batch_statistic(v) == k.exchanged);
      CHECK((v.op == ir::OpKind::ColMean) == k.exchanged); // the means; sums are the rank's
      (k.exchanged ? exchanged : local) += 1;
    }
  }
  CHECK(exchanged == 4); // mean(gx) and mean(gx x̂) of each batchnorm
  CHECK(summaries == exchanged);
  CHECK(local >= 4); // each batchnorm's dweight and dbias, the linear's dbias, scale's gradient
  // Without the exchange, one column kernel per matrix merges its statistics, as before.
  const plan::Plan alone = plan::make_plan(parsed(s.backward), ir::Mode::Train);
  for (const plan::Kernel &k : alone.kernels)
    CHECK(!k.exchanged);
}

TEST_CASE("exchange stats backward: a plan run by another number of ranks than it exchanges "
          "across is refused") {
  const TrainingSources s =
      training_sources(dsl::SourceFile("two_norms.kf", kTwoNorms), ir::Mode::Train, {});
  const ir::Graph forward = parsed(s.forward);
  const plan::Plan p = plan::make_plan(forward, ir::Mode::Train, {}, true, 2);
  std::vector<TensorMap> tensors = {ir::random_tensors(forward, {{"N", 4}}, 1)};
  CHECK_THROWS_WITH_AS(plan::execute_plan_ranks(p, {{{"N", 4}}}, tensors),
                       "plan 'two_norms' exchanges statistics across 2 ranks, but is run with "
                       "the dims of 1 and the tensors of 1",
                       plan::PlanError);
}
