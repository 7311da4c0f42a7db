#include "compiler/plan/agreement.h"

#include "compiler/ir/verifier.h"
#include "compiler/plan/execute_plan.h"
#include "compiler/plan/partition.h"

#include <cmath>
#include <iterator>
#include <limits>

namespace kfuse::plan {

using namespace ir;

RunResult run_graph(const Graph &g, Mode mode, const DimBindings &dims, TensorMap tensors) {
  RunResult r;
  try {
    r.outputs = interpret(g, mode, dims, tensors);
  } catch (const InterpretError &e) {
    r.error = e.what();
  }
  r.tensors = std::move(tensors);
  return r;
}

RunResult run_plan(const Plan &p, const DimBindings &dims, TensorMap tensors) {
  RunResult r;
  try {
    r.outputs = execute_plan(p, dims, tensors);
  } catch (const InterpretError &e) {
    r.error = e.what();
  }
  r.tensors = std::move(tensors);
  return r;
}

namespace {

// Values that are zero in exact arithmetic (the column mean of a batchnorm's output, x - x
// computed two ways) come out as rounding noise whose norm-wise relative error is 1. Norms
// below this floor per element count as the floor, so such noise (absolute error well below
// 1e-12 at the default tolerance) is not a disagreement, while any real change of a value
// larger than about 1e-3 still is.
constexpr double kNormFloor = 1e-3;

// Over the elements both runs computed as the same value, infinities and NaN included (an f16
// chain that overflows does so in both), the error is 0; a non-finite value on one side only is
// a disagreement (infinity).
double error_over_floor(const std::vector<double> &a, const std::vector<double> &b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) {
      if (std::isfinite(b[i]))
        norm += b[i] * b[i];
      continue;
    }
    if (!std::isfinite(a[i]) || !std::isfinite(b[i]))
      return std::numeric_limits<double>::infinity();
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  double floor = kNormFloor * std::sqrt(static_cast<double>(a.size()));
  return std::sqrt(diff) / std::max(std::sqrt(norm), floor);
}

} // namespace

double disagreement(const RunResult &a, const RunResult &b) {
  const double inf = std::numeric_limits<double>::infinity();
  if (a.error.empty() != b.error.empty())
    return inf;
  if (!a.error.empty())
    return 0;
  if (a.outputs.size() != b.outputs.size() || a.tensors.size() != b.tensors.size())
    return inf;
  double worst = 0;
  auto compare = [&](const HostTensor &x, const HostTensor &y) {
    if (x.shape != y.shape) {
      worst = inf;
      return;
    }
    double e = error_over_floor(x.data, y.data);
    worst = std::isnan(e) ? inf : std::max(worst, e);
  };
  for (size_t i = 0; i < a.outputs.size(); ++i)
    compare(a.outputs[i], b.outputs[i]);
  for (const auto &[name, t] : a.tensors) {
    auto it = b.tensors.find(name);
    if (it == b.tensors.end())
      return inf;
    compare(t, it->second);
  }
  return worst;
}

TensorMap with_special_values(const Graph &g, TensorMap tensors, uint64_t seed) {
  static const double inf = std::numeric_limits<double>::infinity();
  // Zeros of both signs most often: they are what a fold's sign errors show on.
  static const double specials[] = {0.0,   -0.0,   0.0, -0.0, inf,  -inf,
                                    1e-30, -1e-30, NAN, 1e30, -1e30};
  uint64_t state = seed * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
  auto next = [&state] { // splitmix64: fixed by its definition on every platform
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  for (const Value &v : g.values) {
    auto it = v.kind == ValueKind::Input ? tensors.find(v.name) : tensors.end();
    if (it == tensors.end() || !is_float(v.type.dtype)) // class indices have no special values
      continue;
    for (double &x : it->second.data)
      if (uint64_t r = next(); r % 8 == 0)
        x = round_to(v.type.dtype, specials[(r >> 3) % std::size(specials)]);
  }
  return tensors;
}

std::vector<StageError> check_planner(const Graph &g, Mode mode, const DimBindings &dims,
                                      uint64_t seed, const std::vector<passes::Pass> &passes,
                                      const std::function<void(TensorMap &)> &tweak,
                                      std::string *file_error) {
  std::vector<std::pair<std::string, Graph>> rewritten;
  Graph cur = g;
  for (const passes::Pass &p : passes) {
    cur = p.run(cur, mode);
    verify(cur);
    rewritten.emplace_back(p.name, cur);
  }
  const Plan plan = partition(cur, mode);
  TensorMap tensors = random_tensors(g, dims, seed);
  if (tweak)
    tweak(tensors);
  const std::pair<const char *, TensorMap> draws[] = {
      {"random", tensors}, {"special values", with_special_values(g, tensors, seed)}};
  std::vector<StageError> stages;
  for (const auto &[draw, values] : draws) {
    RunResult reference = run_graph(g, mode, dims, values);
    if (file_error && stages.empty())
      *file_error = reference.error;
    std::vector<double> errors;
    for (const auto &[name, graph] : rewritten)
      errors.push_back(disagreement(reference, run_graph(graph, mode, dims, values)));
    errors.push_back(disagreement(reference, run_plan(plan, dims, values)));
    for (size_t i = 0; i < errors.size(); ++i) {
      if (i == stages.size())
        stages.push_back({i < rewritten.size() ? rewritten[i].first : "plan", 0, draw, errors[i]});
      // The first draw that shows a stage's worst error names it.
      if (!(errors[i] <= stages[i].error))
        stages[i].error = errors[i], stages[i].draw = draw;
    }
  }
  return stages;
}

StageError first_failure(const std::vector<StageError> &stages, double tolerance) {
  StageError worst{"", 0, "", 0};
  for (const StageError &s : stages) {
    if (!(s.error <= tolerance))
      return s;
    if (worst.stage.empty() || s.error > worst.error)
      worst = s;
  }
  return worst;
}

} // namespace kfuse::plan
