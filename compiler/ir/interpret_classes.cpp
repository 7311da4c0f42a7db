// The fp64 semantics of each op class (compiler/ir/class_rules.h), which the interpreter's
// driver (compiler/ir/interpreter.cpp) calls through the class traits.
#include "compiler/ir/class_rules.h"

#include "compiler/ir/infer.h"
#include "compiler/ir/pointwise.h"
#include "compiler/ir/views.h"
#include "templates/dropout.cuh"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace kfuse::ir {

HostTensor zeros(std::vector<int64_t> shape) {
  HostTensor t;
  t.shape = std::move(shape);
  t.data.assign(static_cast<size_t>(t.numel()), 0.0);
  return t;
}

namespace {

// A rank-3/4 tensor as the [rows, F] matrix the GEMM and broadcast kernels below take (the same
// row-major data, copied into `storage`); rank 1 and 2 as they are, not copied.
const HostTensor &matrix_view(const HostTensor &t, HostTensor &storage) {
  if (t.shape.size() <= 2)
    return t;
  storage = {{t.numel() / t.shape.back(), t.shape.back()}, t.data};
  return storage;
}

// Four independent partial sums hide the latency of the adds; the summation order is
// fixed, so the result is still deterministic.
double dot(const double *a, const double *b, int64_t k) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= k; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < k; ++i)
    s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// Rows of the left operand processed together: the block (kGemmRowBlock x K doubles) stays
// in cache while every row of the right operand streams past it once, so a large weight
// is read N / kGemmRowBlock times instead of N times.
constexpr int64_t kGemmRowBlock = 8;

// x[N,K] @ w[M,K]^T (+ bias[M]): both operands are read along K, contiguously.
HostTensor linear(const HostTensor &x, const HostTensor &w, const HostTensor *bias) {
  int64_t n = x.shape[0], k = x.shape[1], m = w.shape[0];
  HostTensor out = zeros({n, m});
  for (int64_t r0 = 0; r0 < n; r0 += kGemmRowBlock) {
    int64_t r1 = std::min(n, r0 + kGemmRowBlock);
    for (int64_t j = 0; j < m; ++j) {
      const double *wj = &w.data[j * k];
      double b = bias ? bias->data[j] : 0.0;
      for (int64_t i = r0; i < r1; ++i)
        out.data[i * m + j] = dot(&x.data[i * k], wj, k) + b;
    }
  }
  return out;
}

// x[N,M] -> [M,N].
HostTensor transposed(const HostTensor &x) {
  int64_t n = x.shape[0], m = x.shape[1];
  HostTensor out = zeros({m, n});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      out.data[j * n + i] = x.data[i * m + j];
  return out;
}

// a[N,K] @ b[K,M] in i-k-j order: the inner loop runs along rows of b and of the output,
// both contiguous. Four rows of b at a time: each output element is loaded and stored once per
// four products, not once per product (the loop was bound by those stores).
HostTensor matmul(const HostTensor &a, const HostTensor &b) {
  int64_t n = a.shape[0], k = a.shape[1], m = b.shape[1];
  HostTensor out = zeros({n, m});
  for (int64_t r0 = 0; r0 < n; r0 += kGemmRowBlock) {
    int64_t r1 = std::min(n, r0 + kGemmRowBlock);
    int64_t p = 0;
    for (; p + 4 <= k; p += 4) {
      const double *b0 = &b.data[p * m], *b1 = b0 + m, *b2 = b1 + m, *b3 = b2 + m;
      for (int64_t i = r0; i < r1; ++i) {
        const double *ai = &a.data[i * k + p];
        const double s0 = ai[0], s1 = ai[1], s2 = ai[2], s3 = ai[3];
        double *oi = &out.data[i * m];
        for (int64_t j = 0; j < m; ++j)
          oi[j] += (s0 * b0[j] + s1 * b1[j]) + (s2 * b2[j] + s3 * b3[j]);
      }
    }
    for (; p < k; ++p) {
      const double *bp = &b.data[p * m];
      for (int64_t i = r0; i < r1; ++i) {
        const double s = a.data[i * k + p];
        double *oi = &out.data[i * m];
        for (int64_t j = 0; j < m; ++j)
          oi[j] += s * bp[j];
      }
    }
  }
  return out;
}

struct ColumnStats {
  std::vector<double> mean;
  std::vector<double> var; // biased
};

// Two passes (mean, then squared deviations) rather than E[y^2] - E[y]^2, which cancels
// catastrophically when the mean is large against the spread. col_mean, col_var and
// batchnorm all use this one function, so their statistics agree bit for bit.
ColumnStats column_stats(const HostTensor &y) {
  int64_t n = y.shape[0], c = y.shape[1];
  ColumnStats s{std::vector<double>(static_cast<size_t>(c), 0.0),
                std::vector<double>(static_cast<size_t>(c), 0.0)};
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      s.mean[j] += y.data[i * c + j];
  for (double &m : s.mean)
    m /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) {
      double d = y.data[i * c + j] - s.mean[j];
      s.var[j] += d * d;
    }
  for (double &v : s.var)
    v /= static_cast<double>(n);
  return s;
}

// Numpy broadcasting of tensors of rank 1 or 2 (rank 3/4 as their matrix view): a rank-1 operand is
// a single row, and an extent of 1 is read with stride 0.
HostTensor binary(const Value &v, const HostTensor &a, const HostTensor &b) {
  const OpInfo &info = op_info(v.op);
  std::vector<double> attr = attr_numbers(info, v.attrs);
  auto rows = [](const HostTensor &t) { return t.shape.size() == 2 ? t.shape[0] : 1; };
  auto cols = [](const HostTensor &t) { return t.shape.back(); };
  int64_t n = std::max(rows(a), rows(b)), c = std::max(cols(a), cols(b));
  HostTensor out = zeros(a.shape.size() == 2 || b.shape.size() == 2 ? std::vector<int64_t>{n, c}
                                                                    : std::vector<int64_t>{c});
  int64_t a_row = rows(a) == 1 ? 0 : cols(a), a_col = cols(a) == 1 ? 0 : 1;
  int64_t b_row = rows(b) == 1 ? 0 : cols(b), b_col = cols(b) == 1 ? 0 : 1;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      out.data[i * c + j] =
          info.fp64(a.data[i * a_row + j * a_col], b.data[i * b_row + j * b_col], attr.data());
  return out;
}

// F.dropout: the identity in eval mode; in train mode the kernels' keep rule
// (templates/dropout.cuh) on the element's row-major index, kept values scaled by 1 / (1 - p).
HostTensor dropout(const Value &v, const HostTensor &x, Mode mode, RngState rng) {
  HostTensor out = x;
  if (mode == Mode::Eval)
    return out;
  const double p = v.attr("p");
  const unsigned threshold = kf::dropout_threshold(static_cast<float>(p));
  const auto stream = static_cast<unsigned>(v.attr("stream"));
  for (size_t i = 0; i < out.data.size(); ++i)
    out.data[i] *= kf::dropout_keep(rng.seed, rng.offset, stream, i, threshold) ? 1 / (1 - p) : 0.0;
  return out;
}

// Softmax along `dim`, viewing the tensor as [outer, len, inner]. Subtracting the maximum
// keeps exp() from overflowing; log_softmax is computed as (x - max) - log(sum) rather than
// log(softmax), which is -inf wherever exp(x - max) underflows to 0.
HostTensor softmax(const HostTensor &x, int dim, bool take_log) {
  int64_t outer = 1, inner = 1, len = x.shape[dim];
  for (int d = 0; d < dim; ++d)
    outer *= x.shape[d];
  for (size_t d = static_cast<size_t>(dim) + 1; d < x.shape.size(); ++d)
    inner *= x.shape[d];
  HostTensor out = zeros(x.shape);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      int64_t base = o * len * inner + in;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t l = 0; l < len; ++l)
        mx = std::max(mx, x.data[base + l * inner]);
      double sum = 0;
      for (int64_t l = 0; l < len; ++l)
        sum += std::exp(x.data[base + l * inner] - mx);
      for (int64_t l = 0; l < len; ++l) {
        double z = x.data[base + l * inner] - mx;
        out.data[base + l * inner] = take_log ? z - std::log(sum) : std::exp(z) / sum;
      }
    }
  return out;
}

// A reduction along `dim`, viewing the tensor as [outer, len, inner]; `shape` is the result's
// (the reduced axis kept as 1 or dropped: the same values in the same order).
HostTensor reduction(const Value &v, const HostTensor &x, int dim, std::vector<int64_t> shape) {
  const OpInfo &info = op_info(v.op);
  std::vector<double> attr = attr_numbers(info, v.attrs);
  int64_t outer = 1, inner = 1, len = x.shape[static_cast<size_t>(dim)];
  for (int d = 0; d < dim; ++d)
    outer *= x.shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(dim) + 1; d < x.shape.size(); ++d)
    inner *= x.shape[d];
  HostTensor out = zeros(std::move(shape));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in)
      out.data[o * inner + in] =
          info.reduce(&x.data[o * len * inner + in], len, inner, attr.data());
  return out;
}

// layernorm / rmsnorm / groupnorm / instancenorm over the last axis, as F.layer_norm,
// F.rms_norm, F.group_norm and F.instance_norm compute them (biased variance, two passes) over
// each of a row's groups (one, but for groupnorm), then the optional per-feature weight and bias.
HostTensor row_norm(const Graph &g, ValueId id, const std::vector<const HostTensor *> &args) {
  const Value &v = g[id];
  const HostTensor &x = *args[0];
  int64_t f = x.shape.back(), rows = x.numel() / f;
  if (v.op == OpKind::GroupNorm)
    if (auto problem = group_size_problem(op_info(v.op), v.attrs, f))
      throw InterpretError(fmt::format("{}: {}", describe(g, id), *problem));
  int64_t groups = v.op == OpKind::GroupNorm ? static_cast<int64_t>(v.attr("groups")) : 1;
  int64_t size = f / groups;
  double eps = v.attr("eps");
  bool centered = v.op != OpKind::RmsNorm;
  HostTensor out = zeros(x.shape);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t first = r * f; first < (r + 1) * f; first += size) {
      const double *group = &x.data[first];
      double mean = 0, m2 = 0;
      if (centered) {
        for (int64_t j = 0; j < size; ++j)
          mean += group[j];
        mean /= static_cast<double>(size);
      }
      for (int64_t j = 0; j < size; ++j)
        m2 += (group[j] - mean) * (group[j] - mean);
      double scale = 1.0 / std::sqrt(m2 / static_cast<double>(size) + eps);
      for (int64_t j = 0; j < size; ++j) {
        int64_t col = first - r * f + j;
        double y = (group[j] - mean) * scale;
        if (args.size() > 1)
          y *= args[1]->data[col];
        if (args.size() > 2)
          y += args[2]->data[col];
        out.data[first + j] = y;
      }
    }
  return out;
}

// max_pool1d / avg_pool1d over the last axis: the op's reduction over each window.
HostTensor pool(const Value &v, const HostTensor &x) {
  const OpInfo &info = op_info(v.op);
  std::vector<double> attr = attr_numbers(info, v.attrs);
  int64_t f = x.shape.back(), rows = x.numel() / f, width = pool_width(v.attrs, f),
          stride = pool_stride(v.attrs), k = static_cast<int64_t>(v.attr("kernel_size"));
  std::vector<int64_t> shape = x.shape;
  shape.back() = width;
  HostTensor out = zeros(shape);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j)
      out.data[r * width + j] = info.reduce(&x.data[r * f + j * stride], k, 1, attr.data());
  return out;
}

// The index in [0, k) PyTorch's max_pool1d_with_indices picks in a window: a value replaces the
// running maximum when greater or NaN, so the first maximum wins a tie and the last NaN a window
// that holds one.
int64_t window_argmax(const double *x, int64_t k) {
  int64_t at = 0;
  double best = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < k; ++i)
    if (x[i] > best || std::isnan(x[i])) {
      best = x[i];
      at = i;
    }
  return at;
}

// max_pool1d_backward / avg_pool1d_backward: each window's gradient added to the features it
// goes to, windows in order (the order in which a feature's gather sums them).
HostTensor pool_grad(const OpRun &run) {
  const HostTensor &g = run.arg(0);
  const bool max = run.v.op == OpKind::MaxPool1dBackward;
  const auto k = static_cast<int64_t>(run.v.attr("kernel_size"));
  const int64_t stride = pool_stride(run.v.attrs), width = g.shape.back(), rows = g.numel() / width;
  HostTensor out = zeros(run.shape());
  const int64_t f = out.shape.back();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t w = 0; w < width; ++w) {
      const double gw = g.data[r * width + w];
      double *dx = &out.data[r * f + w * stride];
      if (max)
        dx[window_argmax(&run.arg(1).data[r * f + w * stride], k)] += gw;
      else
        for (int64_t i = 0; i < k; ++i)
          dx[i] += gw / static_cast<double>(k);
    }
  return out;
}

// groupnorm_backward: per row and group, x̂ = (x - mean) rstd (two passes, as groupnorm), gx = g *
// weight, dx = rstd (gx - mean(gx) - x̂ mean(gx x̂)).
HostTensor groupnorm_grad(const Graph &graph, ValueId id,
                          const std::vector<const HostTensor *> &args) {
  const Value &v = graph[id];
  const HostTensor &g = *args[0], &x = *args[1];
  const int64_t f = x.shape.back(), rows = x.numel() / f;
  if (auto problem = group_size_problem(op_info(v.op), v.attrs, f))
    throw InterpretError(fmt::format("{}: {}", describe(graph, id), *problem));
  const int64_t size = f / static_cast<int64_t>(v.attr("groups"));
  const auto n = static_cast<double>(size);
  HostTensor out = zeros(x.shape);
  std::vector<double> gx(static_cast<size_t>(size)), xhat(static_cast<size_t>(size));
  for (int64_t first = 0; first < rows * f; first += size) {
    double mean = 0, m2 = 0, mean_gx = 0, mean_gx_xhat = 0;
    for (int64_t j = 0; j < size; ++j)
      mean += x.data[first + j];
    mean /= n;
    for (int64_t j = 0; j < size; ++j)
      m2 += (x.data[first + j] - mean) * (x.data[first + j] - mean);
    const double rstd = 1.0 / std::sqrt(m2 / n + v.attr("eps"));
    for (int64_t j = 0; j < size; ++j) {
      const size_t i = static_cast<size_t>(j);
      gx[i] = g.data[first + j] * (args.size() > 2 ? args[2]->data[(first + j) % f] : 1.0);
      xhat[i] = (x.data[first + j] - mean) * rstd;
      mean_gx += gx[i];
      mean_gx_xhat += gx[i] * xhat[i];
    }
    mean_gx /= n;
    mean_gx_xhat /= n;
    for (int64_t j = 0; j < size; ++j) {
      const size_t i = static_cast<size_t>(j);
      out.data[first + j] = rstd * (gx[i] - mean_gx - xhat[i] * mean_gx_xhat);
    }
  }
  return out;
}

// (y - shift[j]) * alpha[j] + beta[j]; the vectors are [C] or [1], no shift is a shift of 0.
HostTensor col_affine(const HostTensor &y, const HostTensor &alpha, const HostTensor &beta,
                      const HostTensor *shift) {
  int64_t c = y.shape.back(), n = y.numel() / c; // the rows of a rank-3/4 y too
  int64_t sa = alpha.numel() == 1 ? 0 : 1, sb = beta.numel() == 1 ? 0 : 1;
  int64_t ss = shift && shift->numel() != 1 ? 1 : 0;
  HostTensor out = zeros(y.shape);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      out.data[i * c + j] =
          (y.data[i * c + j] - (shift ? shift->data[j * ss] : 0.0)) * alpha.data[j * sa] +
          beta.data[j * sb];
  return out;
}

// (1 - m) * running + m * batch, with the batch variance made unbiased by count/(count-1),
// as torch.nn.BatchNorm1d does.
void momentum_update(std::vector<double> &running, const std::vector<double> &batch,
                     double momentum, double unbias) {
  for (size_t j = 0; j < running.size(); ++j)
    running[j] = (1.0 - momentum) * running[j] + momentum * batch[j] * unbias;
}

// Train mode normalizes with the batch's statistics and updates the running ones (the unbiased
// variance), eval mode normalizes with the running statistics.
HostTensor batchnorm(const OpRun &run) {
  const Value &v = run.v;
  bool affine = v.args.size() == 5;
  const HostTensor &x = run.arg(0);
  size_t rm_at = affine ? 3 : 1, rv_at = affine ? 4 : 2;
  const HostTensor &rm = run.arg(rm_at), &rv = run.arg(rv_at);
  int64_t n = x.shape[0], c = x.shape[1];
  double eps = v.attr("eps"), momentum = v.attr("momentum");

  ColumnStats stats;
  if (run.mode == Mode::Train) {
    if (n < 2) {
      const Dim &rows = v.type.shape[0];
      throw InterpretError(
          fmt::format("batchnorm in train mode needs more than 1 row, got {}{} (in {})",
                      rows.is_symbolic() ? rows.str() + "=" : "", n, describe(run.g, run.id)));
    }
    stats = column_stats(x);
    HostTensor new_rm = rm, new_rv = rv;
    momentum_update(new_rm.data, stats.mean, momentum, 1.0);
    momentum_update(new_rv.data, stats.var, momentum,
                    static_cast<double>(n) / static_cast<double>(n - 1));
    run.update(v.args[rm_at], std::move(new_rm));
    run.update(v.args[rv_at], std::move(new_rv));
  } else {
    stats = {rm.data, rv.data};
  }

  HostTensor out = zeros(x.shape);
  for (int64_t j = 0; j < c; ++j) {
    double scale = 1.0 / std::sqrt(stats.var[j] + eps), shift = 0.0;
    if (affine) {
      scale *= run.arg(1).data[j];
      shift = run.arg(2).data[j];
    }
    for (int64_t i = 0; i < n; ++i)
      out.data[i * c + j] = (x.data[i * c + j] - stats.mean[j]) * scale + shift;
  }
  return out;
}

// `dim` as an axis in [0, rank).
int axis(const OpRun &run) {
  int rank = static_cast<int>(run.arg(0).shape.size());
  int dim = static_cast<int>(run.v.attr("dim"));
  return dim < 0 ? dim + rank : dim;
}

} // namespace

namespace fp64 {

HostTensor gemm(const OpRun &run) {
  HostTensor storage;
  const HostTensor &x = matrix_view(run.arg(0), storage);
  HostTensor out = run.v.op == OpKind::Linear
                       ? linear(x, run.arg(1), run.args.size() == 3 ? &run.arg(2) : nullptr)
                   : run.v.op == OpKind::MatmulTN ? matmul(transposed(x), run.arg(1))
                                                  : matmul(x, run.arg(1));
  out.shape = run.shape();
  return out;
}

HostTensor norm(const OpRun &run) { return batchnorm(run); }

// Inference allows only operands that are matrices in the view.
HostTensor binary(const OpRun &run) {
  HostTensor a, b;
  HostTensor out = ir::binary(run.v, matrix_view(run.arg(0), a), matrix_view(run.arg(1), b));
  out.shape = run.shape();
  return out;
}

HostTensor unary(const OpRun &run) {
  const OpInfo &info = op_info(run.v.op);
  std::vector<double> attr = attr_numbers(info, run.v.attrs);
  HostTensor out = run.arg(0);
  for (double &x : out.data)
    x = info.fp64(x, 0, attr.data());
  return out;
}

HostTensor random(const OpRun &run) { return dropout(run.v, run.arg(0), run.mode, run.rng); }

// The same row-major elements; equal rows are the run's to check.
HostTensor view(const OpRun &run) {
  HostTensor out = run.arg(0);
  out.shape = run.shape();
  if (out.numel() != run.arg(0).numel())
    throw InterpretError(fmt::format("{} views {} {} as {} {}: the bound dims give them "
                                     "different element counts",
                                     describe(run.g, run.id), run.g[run.v.args[0]].type.str(),
                                     shape_text(run.arg(0).shape), run.v.type.str(),
                                     shape_text(out.shape)));
  return out;
}

HostTensor row(const OpRun &run) {
  return softmax(run.arg(0), axis(run), run.v.op == OpKind::LogSoftmax);
}

HostTensor row_norm(const OpRun &run) { return ir::row_norm(run.g, run.id, run.args); }

HostTensor reduce(const OpRun &run) { return reduction(run.v, run.arg(0), axis(run), run.shape()); }

HostTensor pool(const OpRun &run) { return ir::pool(run.v, run.arg(0)); }

HostTensor pool_grad(const OpRun &run) { return ir::pool_grad(run); }

HostTensor norm_grad(const OpRun &run) { return groupnorm_grad(run.g, run.id, run.args); }

// Every rank's rows of the matrix batch statistic `stat` is of, where they were exchanged
// (Interpreter::exchange); else null.
const HostTensor *every_rank(const OpRun &run, ValueId stat) {
  const Value &v = run.g[stat];
  if (!is_batch_statistic(v))
    return nullptr;
  return run.interpreter.exchanged(view_source(run.g, v.args[0]));
}

HostTensor col_reduce(const OpRun &run) {
  const HostTensor *whole = every_rank(run, run.id);
  const HostTensor &y = whole ? *whole : run.arg(0);
  ColumnStats stats = column_stats(y);
  HostTensor out;
  out.shape = {y.shape[1]};
  out.data = run.v.op == OpKind::ColVar ? stats.var : stats.mean;
  if (run.v.op == OpKind::ColSum) // mean times rows, in double, as the column kernel does
    for (double &x : out.data)
      x *= static_cast<double>(y.shape[0]);
  return out;
}

// The rows a bn_update's statistics were taken over where they are batch statistics of
// exchanged rows (the batch of every rank, whose unbiased variance PyTorch's SyncBatchNorm
// takes), else -1: the statistics its mean and variance are computed from, searched through
// the ops between.
int64_t exchanged_rows(const OpRun &run) {
  std::vector<ValueId> todo = {run.v.args[2], run.v.args[3]};
  std::set<ValueId> seen;
  while (!todo.empty()) {
    ValueId id = todo.back();
    todo.pop_back();
    const Value &v = run.g[id];
    if (!v.is_op() || !seen.insert(id).second)
      continue;
    if (op_info(v.op).cls == OpClass::ColReduce) {
      if (const HostTensor *whole = every_rank(run, id))
        return whole->shape[0];
      continue;
    }
    todo.insert(todo.end(), v.args.begin(), v.args.end());
  }
  return -1;
}

HostTensor col_affine(const OpRun &run) {
  return ir::col_affine(run.arg(0), run.arg(1), run.arg(2),
                        run.args.size() == 4 ? &run.arg(3) : nullptr);
}

HostTensor transpose(const OpRun &run) { return transposed(run.arg(0)); }

// bn_update: the running statistics from a batch's, unbiased by count / (count - 1).
HostTensor effect(const OpRun &run) {
  const Value &v = run.v;
  const Dim &rows = v.attrs.at("count").shape.front();
  const int64_t exchanged = exchanged_rows(run);
  auto count = static_cast<double>(
      exchanged >= 0
          ? exchanged
          : concrete_extent(rows, run.dims,
                            fmt::format("{}: count={}", describe(run.g, run.id), rows.str())));
  if (count <= 1)
    throw InterpretError(fmt::format("{}: count must be more than 1 to unbias the variance, got {}",
                                     describe(run.g, run.id), count));
  double momentum = v.attr("momentum");
  HostTensor new_rm = run.arg(0), new_rv = run.arg(1);
  momentum_update(new_rm.data, run.arg(2).data, momentum, 1.0);
  momentum_update(new_rv.data, run.arg(3).data, momentum, count / (count - 1));
  run.update(v.args[0], std::move(new_rm));
  run.update(v.args[1], std::move(new_rv));
  return {}; // an effect has no value
}

HostTensor constant(const OpRun &run) { return HostTensor{{1}, {run.v.attr("value")}}; }

} // namespace fp64

} // namespace kfuse::ir
