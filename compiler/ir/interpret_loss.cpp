// The fp64 semantics of the loss classes (compiler/ir/class_rules.h): cross_entropy and its
// gradient for the logits, PyTorch's F.cross_entropy with class-index targets, and the per-row
// form its sum and mean are lowered to (cross_entropy_rows).
//
// Row i of logits x with class t: lse = max + log Σ exp(x - max), and
//   loss_i = (1 - ε) (lse - x[t]) + ε (lse - mean_j x[j]),
//   d loss_i / d x[j] = softmax(x)[j] - (1 - ε) [j = t] - ε / C,
// both 0 on a row whose target is ignore_index. "mean" divides by the count of rows not ignored
// (NaN for the loss where every row is, as PyTorch's 0 / 0; its gradient is then 0 everywhere).
#include "compiler/ir/class_rules.h"
#include "compiler/ir/op_class.h"
#include "compiler/ir/printer.h"

#include <fmt/format.h>

#include <cmath>

namespace kfuse::ir {
namespace {

// One row's statistics: the log-sum-exp, the mean of the logits and the target's class (-1
// where ignored).
struct RowLoss {
  double lse = 0, mean = 0;
  int64_t target = -1;
};

// Row r's target as a class index, -1 where it is ignore_index; anything else (a value outside
// [0, C), which PyTorch's kernels stop on with a device-side assert) is an error naming the row.
int64_t class_index(const OpRun &run, const HostTensor &target, int64_t r, int64_t c) {
  const double t = target.data[static_cast<size_t>(r)];
  if (t == run.v.attr("ignore_index"))
    return -1;
  if (t >= 0 && t < static_cast<double>(c) && t == std::floor(t))
    return static_cast<int64_t>(t);
  throw InterpretError(fmt::format("{}: target[{}] = {} is not a class index in [0, {}) nor the "
                                   "ignore_index {}",
                                   describe(run.g, run.id), r, format_number(t), c,
                                   format_number(run.v.attr("ignore_index"))));
}

RowLoss row_loss(const OpRun &run, const HostTensor &x, const HostTensor &target, int64_t r) {
  const int64_t c = x.shape[1];
  const double *row = &x.data[static_cast<size_t>(r * c)];
  RowLoss out;
  out.target = class_index(run, target, r, c);
  double max = -INFINITY, sum = 0, total = 0;
  for (int64_t j = 0; j < c; ++j) {
    max = std::fmax(max, row[j]);
    total += row[j];
  }
  const double shift = std::isfinite(max) ? max : 0; // logsumexp's rule for an infinite max
  for (int64_t j = 0; j < c; ++j)
    sum += std::exp(row[j] - shift);
  out.lse = shift + std::log(sum);
  out.mean = total / static_cast<double>(c);
  return out;
}

// The rows whose target is not ignore_index.
double counted_rows(const OpRun &run, const HostTensor &x, const HostTensor &target) {
  double n = 0;
  for (int64_t r = 0; r < x.shape[0]; ++r)
    n += class_index(run, target, r, x.shape[1]) >= 0 ? 1 : 0;
  return n;
}

// Each row's loss, 0 where ignored; with `weight`, each row's weight in the mean instead.
std::vector<double> row_losses(const OpRun &run, bool weight) {
  const HostTensor &x = run.arg(0), &target = run.arg(1);
  const double eps = run.v.attr("label_smoothing");
  const int64_t rows = x.shape[0], c = x.shape[1];
  std::vector<double> out(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    RowLoss l = row_loss(run, x, target, r);
    if (l.target >= 0)
      out[static_cast<size_t>(r)] =
          weight ? 1
                 : (1 - eps) * (l.lse - x.data[static_cast<size_t>(r * c + l.target)]) +
                       eps * (l.lse - l.mean);
  }
  return out;
}

} // namespace

namespace fp64 {

HostTensor loss(const OpRun &run) {
  const int64_t rows = run.arg(0).shape[0];
  if (run.v.op == OpKind::CrossEntropyRows)
    return HostTensor{{rows, 1}, row_losses(run, run.v.attr("weight") != 0)};
  const std::string &reduction = run.v.attrs.at("reduction").dim;
  std::vector<double> per_row = row_losses(run, false);
  if (reduction == "none")
    return HostTensor{{rows}, std::move(per_row)};
  double total = 0;
  for (double v : per_row)
    total += v;
  return HostTensor{
      {1}, {reduction == "mean" ? total / counted_rows(run, run.arg(0), run.arg(1)) : total}};
}

HostTensor loss_grad(const OpRun &run) {
  const HostTensor &x = run.arg(0), &target = run.arg(1), &g = run.arg(2);
  const double eps = run.v.attr("label_smoothing");
  const std::string &reduction = run.v.attrs.at("reduction").dim;
  const int64_t rows = x.shape[0], c = x.shape[1];
  const double count = reduction == "mean" ? counted_rows(run, x, target) : 1;
  HostTensor out = zeros(x.shape);
  for (int64_t r = 0; r < rows; ++r) {
    RowLoss l = row_loss(run, x, target, r);
    if (l.target < 0)
      continue;
    const double gr = (reduction == "none" ? g.data[static_cast<size_t>(r)] : g.data[0]) / count;
    for (int64_t j = 0; j < c; ++j) {
      const auto at = static_cast<size_t>(r * c + j);
      const double onehot = j == l.target ? 1 - eps : 0;
      out.data[at] = (std::exp(x.data[at] - l.lse) - onehot - eps / static_cast<double>(c)) * gr;
    }
  }
  return out;
}

} // namespace fp64
} // namespace kfuse::ir
