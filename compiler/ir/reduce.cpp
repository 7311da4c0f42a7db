#include "compiler/ir/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kfuse::ir::reduce {

double sum(const double *x, int64_t n, int64_t stride, const double *) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i)
    s += x[i * stride];
  return s;
}

double mean(const double *x, int64_t n, int64_t stride, const double *a) {
  return sum(x, n, stride, a) / static_cast<double>(n);
}

namespace {

// The first NaN, else the extreme by `pick` (std::max / std::min) from `start`: torch.max /
// amax and min / amin propagate NaN.
template <class Pick>
double extreme(const double *x, int64_t n, int64_t stride, double start, Pick pick) {
  double m = start;
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i * stride];
    if (std::isnan(v))
      return v;
    m = pick(m, v);
  }
  return m;
}

constexpr double kInfinity = std::numeric_limits<double>::infinity();

} // namespace

double max(const double *x, int64_t n, int64_t stride, const double *) {
  return extreme(x, n, stride, -kInfinity, [](double a, double b) { return std::max(a, b); });
}

double min(const double *x, int64_t n, int64_t stride, const double *) {
  return extreme(x, n, stride, kInfinity, [](double a, double b) { return std::min(a, b); });
}

// As torch.logsumexp: the maximum is subtracted unless it is infinite (a row of -inf gives
// -inf, a row holding +inf gives +inf), and a NaN anywhere gives NaN.
double logsumexp(const double *x, int64_t n, int64_t stride, const double *a) {
  double m = max(x, n, stride, a);
  if (std::isnan(m))
    return m;
  double shift = std::isinf(m) ? 0.0 : m, s = 0;
  for (int64_t i = 0; i < n; ++i)
    s += std::exp(x[i * stride] - shift);
  return std::log(s) + shift;
}

// Two passes (mean, then squared deviations); the divisor is max(0, n - correction) as in
// torch.var, so correction >= n gives inf (or NaN for a constant row).
double var(const double *x, int64_t n, int64_t stride, const double *a) {
  double m = mean(x, n, stride, a), m2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = x[i * stride] - m;
    m2 += d * d;
  }
  return m2 / std::max(0.0, static_cast<double>(n) - a[2]);
}

double std(const double *x, int64_t n, int64_t stride, const double *a) {
  return std::sqrt(var(x, n, stride, a));
}

} // namespace kfuse::ir::reduce
