#include "compiler/plan/agreement.h"

#include "compiler/ir/verifier.h"
#include "compiler/plan/execute_plan.h"
#include "compiler/plan/partition.h"

#include <cmath>
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

std::vector<StageError> check_planner(const Graph &g, Mode mode, const DimBindings &dims,
                                      uint64_t seed, const std::vector<passes::Pass> &passes,
                                      const std::function<void(TensorMap &)> &tweak,
                                      std::string *file_error) {
  TensorMap tensors = random_tensors(g, dims, seed);
  if (tweak)
    tweak(tensors);
  RunResult reference = run_graph(g, mode, dims, tensors);
  if (file_error)
    *file_error = reference.error;
  std::vector<StageError> stages;
  Graph cur = g;
  for (const passes::Pass &p : passes) {
    cur = p.run(cur, mode);
    verify(cur);
    stages.push_back(
        {std::string(p.name), disagreement(reference, run_graph(cur, mode, dims, tensors))});
  }
  stages.push_back(
      {"plan", disagreement(reference, run_plan(partition(cur, mode), dims, tensors))});
  return stages;
}

StageError first_failure(const std::vector<StageError> &stages, double tolerance) {
  StageError worst{"", 0};
  for (const StageError &s : stages) {
    if (!(s.error <= tolerance))
      return s;
    if (worst.stage.empty() || s.error > worst.error)
      worst = s;
  }
  return worst;
}

} // namespace kfuse::plan
