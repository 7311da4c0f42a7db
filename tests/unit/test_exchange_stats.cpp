// Batch statistics exchanged across ranks (Options::batch_stats_ranks): the plan puts a Summary
// kernel before each Column kernel that merges partials, the code merges the gathered summaries
// in rank order, and the Executable says where the run all-gathers and how much.
#include "compiler/build_executable.h"
#include "compiler/codegen/program.h"
#include "compiler/dsl/parser.h"
#include "compiler/dsl/source.h"
#include "compiler/plan/plan_printer.h"
#include "compiler/plan/planner.h"
#include "compiler/plan/validate_plan.h"

#include <doctest/doctest.h>

#include <algorithm>

using namespace kfuse;
using plan::KernelKind;

namespace {

// Two batchnorms: one over a GEMM's product (epilogue partials), one over an elementwise value
// (a col_partials kernel).
const char *kTwoNorms = R"(pipeline two_norms {
  dim N
  input  x: f32[N, 64]
  param  weight: f32[48, 64]
  param  g1: f32[48]
  param  b1: f32[48]
  state  m1: f32[48]
  state  v1: f32[48]
  param  g2: f32[48]
  param  b2: f32[48]
  state  m2: f32[48]
  state  v2: f32[48]
  h = linear(x, weight)
  h = batchnorm(h, g1, b1, m1, v1)
  h = tanh(h)
  h = batchnorm(h, g2, b2, m2, v2)
  return h
}
)";

plan::Plan plan_of(ir::Mode mode, int ranks) {
  const dsl::SourceFile src("two_norms.kf", kTwoNorms);
  dsl::Diagnostics diags(src);
  return plan::make_plan(dsl::parse_kf(src, diags), mode, {}, true, ranks);
}

exec::Executable executable_of(int ranks) {
  LowerOptions o;
  o.target.arch = "sm_90a";
  o.target.batch_stats_ranks = ranks;
  return build_executable(lower(dsl::SourceFile("two_norms.kf", kTwoNorms), o));
}

std::vector<KernelKind> kinds(const plan::Plan &p) {
  std::vector<KernelKind> out;
  for (const plan::Kernel &k : p.kernels)
    out.push_back(k.kind);
  return out;
}

} // namespace

TEST_CASE("exchange stats: a summary kernel before every column kernel that merges partials") {
  const plan::Plan local = plan_of(ir::Mode::Train, 0);
  const plan::Plan p = plan_of(ir::Mode::Train, 2);
  CHECK(p.stats_ranks == 2);
  const std::vector<KernelKind> local_kinds = kinds(local);
  CHECK(std::count(local_kinds.begin(), local_kinds.end(), KernelKind::Summary) == 0);
  size_t summaries = 0;
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const plan::Kernel &k = p.kernels[i];
    CHECK(k.name == "k" + std::to_string(i) + "_" + std::string(plan::kernel_kind_name(k.kind)));
    if (k.kind != KernelKind::Summary)
      continue;
    ++summaries;
    REQUIRE(i + 1 < p.kernels.size());
    CHECK(p.kernels[i + 1].kind == KernelKind::Column);
    CHECK(p.kernels[i + 1].stats_of == k.stats_of);
    CHECK(k.computes.empty());
    CHECK(std::count(k.rules.begin(), k.rules.end(), "exchange_stats") == 1);
  }
  CHECK(summaries == 2);
  CHECK(p.kernels.size() == local.kernels.size() + 2);
  const std::string text = plan::print_plan_text(p, {});
  CHECK(text.find("summaries(") != std::string::npos);
  CHECK(text.find("of 2 ranks, all-gathered") != std::string::npos);
  // Eval mode merges no partials: nothing to exchange.
  CHECK(kinds(plan_of(ir::Mode::Eval, 2)) == kinds(plan_of(ir::Mode::Eval, 0)));
}

TEST_CASE("exchange stats: the validator requires the summary before its column kernel") {
  plan::Plan p = plan_of(ir::Mode::Train, 2);
  auto summary = std::find_if(p.kernels.begin(), p.kernels.end(),
                              [](const plan::Kernel &k) { return k.kind == KernelKind::Summary; });
  REQUIRE(summary != p.kernels.end());
  plan::Plan swapped = p;
  std::iter_swap(swapped.kernels.begin() + (summary - p.kernels.begin()),
                 swapped.kernels.begin() + (summary - p.kernels.begin()) + 1);
  CHECK_THROWS_WITH_AS(plan::validate_plan(swapped),
                       doctest::Contains("which no kernel before it summarized"), plan::PlanError);
  plan::Plan unranked = p;
  unranked.stats_ranks = 0;
  CHECK_THROWS_WITH_AS(plan::validate_plan(unranked),
                       doctest::Contains("in a plan that exchanges no statistics"),
                       plan::PlanError);
}

TEST_CASE("exchange stats: the code merges the gathered summaries, the executable all-gathers "
          "3 doubles per feature after each summary kernel") {
  const exec::Executable e = executable_of(2);
  REQUIRE(e.exchanges.size() == 2);
  for (const exec::Exchange &x : e.exchanges) {
    CHECK(e.kernels.at(x.after).entry.find("_summary") != std::string::npos);
    CHECK(x.count == Extent::constant(3 * 48));
    CHECK(e.buffers.at(x.send).home == exec::Buffer::Home::Workspace);
    CHECK(e.workspace.at(e.buffers.at(x.send).index).kind ==
          exec::WorkspaceEntry::Kind::StatsSummary);
    const exec::WorkspaceEntry &recv = e.workspace.at(e.buffers.at(x.recv).index);
    CHECK(recv.kind == exec::WorkspaceEntry::Kind::GatheredSummaries);
    CHECK(recv.ranks == 2);
  }
  CHECK(e.source.find("kf::merge_ranks(col, 48, 2, ") != std::string::npos);
  CHECK(e.source.find("kf::store_summary(col, 48, d_N, mean, m2, ") != std::string::npos);
  // The running variance's correction counts every rank's rows.
  CHECK(e.source.find("const float count = static_cast<float>(total_rows);") != std::string::npos);
  // A rank may hold one row of a batch across ranks (as SyncBatchNorm allows); alone it may not.
  auto more_than_one = [](const exec::Executable &x) {
    return std::count_if(x.constraints.begin(), x.constraints.end(), [](const exec::Constraint &c) {
      return c.kind == exec::Constraint::Kind::MoreThanOne;
    });
  };
  CHECK(more_than_one(e) == 0);
  CHECK(more_than_one(executable_of(1)) == 2);
  CHECK(executable_of(1).exchanges.size() == 2);
  CHECK(executable_of(0).exchanges.empty());
}
