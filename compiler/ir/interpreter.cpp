#include "compiler/ir/interpreter.h"

#include "compiler/ir/infer.h"
#include "compiler/ir/pointwise.h"
#include "templates/dropout.cuh"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

namespace kfuse::ir {

std::string shape_text(const std::vector<int64_t> &shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

namespace {

// The concrete shape of a declaration, with errors that name it.
std::vector<int64_t> declared_shape(const Graph &g, ValueId id, const DimBindings &dims) {
  const Value &v = g[id];
  if (v.type.rank() < 1 || v.type.rank() > 4)
    throw InterpretError(
        fmt::format("{} is declared {}; tensors have rank 1 to 4", describe(g, id), v.type.str()));
  try {
    return concrete_shape(v.type, dims);
  } catch (const InterpretError &e) {
    throw InterpretError(fmt::format("{}: {}", describe(g, id), e.what()));
  }
}

// A rank-3/4 tensor as the [rows, F] matrix the GEMM and broadcast kernels below take (the same
// row-major data, copied into `storage`); rank 1 and 2 as they are, not copied.
const HostTensor &matrix_view(const HostTensor &t, HostTensor &storage) {
  if (t.shape.size() <= 2)
    return t;
  storage = {{t.numel() / t.shape.back(), t.shape.back()}, t.data};
  return storage;
}

HostTensor zeros(std::vector<int64_t> shape) {
  HostTensor t;
  t.shape = std::move(shape);
  t.data.assign(static_cast<size_t>(t.numel()), 0.0);
  return t;
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

// a[N,K] @ b[K,M] in i-k-j order: the inner loop runs along rows of b and of the output,
// both contiguous.
HostTensor matmul(const HostTensor &a, const HostTensor &b) {
  int64_t n = a.shape[0], k = a.shape[1], m = b.shape[1];
  HostTensor out = zeros({n, m});
  for (int64_t r0 = 0; r0 < n; r0 += kGemmRowBlock) {
    int64_t r1 = std::min(n, r0 + kGemmRowBlock);
    for (int64_t p = 0; p < k; ++p) {
      const double *bp = &b.data[p * m];
      for (int64_t i = r0; i < r1; ++i) {
        double s = a.data[i * k + p];
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

// splitmix64 (Steele, Lea, Flood 2014): a tiny generator whose output is fixed by its
// definition, unlike the distributions of <random>, so random_tensors gives the same
// values with every standard library.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
};

// FNV-1a: a name hash that, unlike std::hash, is the same on every platform.
uint64_t fnv1a(const std::string &s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char ch : s)
    h = (h ^ ch) * 0x100000001b3ULL;
  return h;
}

} // namespace

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t e : shape)
    n *= e;
  return n;
}

int64_t concrete_extent(const Dim &d, const DimBindings &dims, const std::string &where) {
  // A dim, or a product of dims and a constant (a reshape's B*T, a count=B*T).
  int64_t extent = d.sym.empty() ? d.value : 1;
  for (const std::string &name : d.sym.empty() ? d.factors : std::vector<std::string>{d.sym}) {
    auto it = dims.find(name);
    if (it == dims.end())
      throw InterpretError(fmt::format("dim '{}' of {} is not bound", name, where));
    if (auto problem = dim_value_problem(name, it->second))
      throw InterpretError(fmt::format("{}: {}", where, *problem));
    std::optional<int64_t> product = checked_mul(extent, it->second);
    if (!product)
      throw InterpretError(fmt::format("{}: extent {} overflows int64", where, d.str()));
    extent = *product;
  }
  return extent;
}

std::vector<int64_t> concrete_shape(const TensorType &t, const DimBindings &dims) {
  std::vector<int64_t> shape;
  for (const Dim &d : t.shape)
    shape.push_back(concrete_extent(d, dims, t.str()));
  return shape;
}

Interpreter::Interpreter(const Graph &g, Mode mode, DimBindings dims, const TensorMap &tensors,
                         RngState rng)
    : g_(g), mode_(mode), rng_(rng), dims_(std::move(dims)), declared_(g.values.size(), nullptr),
      values_(g.values.size()), done_(g.values.size(), false) {
  for (size_t i = 0; i < g_.values.size(); ++i) {
    const Value &v = g_.values[i];
    if (v.is_op())
      continue;
    ValueId id = static_cast<ValueId>(i);
    std::vector<int64_t> shape = declared_shape(g_, id, dims_);
    auto it = tensors.find(v.name);
    if (it == tensors.end())
      throw InterpretError(fmt::format("missing tensor '{}' for {} {}", v.name,
                                       value_kind_name(v.kind), v.type.str()));
    const HostTensor &t = it->second;
    if (t.shape != shape)
      throw InterpretError(fmt::format("tensor '{}' has shape {}, expected {} for {} {}", v.name,
                                       shape_text(t.shape), shape_text(shape),
                                       value_kind_name(v.kind), v.type.str()));
    if (static_cast<int64_t>(t.data.size()) != t.numel())
      throw InterpretError(fmt::format("tensor '{}' has shape {} but holds {} values", v.name,
                                       shape_text(t.shape), t.data.size()));
    declared_[i] = &t;
    done_[i] = true;
  }
}

bool Interpreter::computed(ValueId id) const {
  return id >= 0 && static_cast<size_t>(id) < done_.size() && done_[static_cast<size_t>(id)];
}

const HostTensor &Interpreter::value(ValueId id) const {
  if (!computed(id))
    throw InterpretError(id >= 0 && static_cast<size_t>(id) < g_.values.size()
                             ? fmt::format("{} has not been computed", describe(g_, id))
                             : fmt::format("no value %{} in pipeline '{}'", id, g_.name));
  return tensor(id);
}

const HostTensor &Interpreter::tensor(ValueId id) const {
  size_t i = static_cast<size_t>(id);
  return declared_[i] ? *declared_[i] : values_[i];
}

void Interpreter::eval_all() {
  for (size_t i = 0; i < g_.values.size(); ++i)
    if (g_.values[i].is_op())
      eval(static_cast<ValueId>(i));
}

void Interpreter::record_update(ValueId op, ValueId state, HostTensor t) {
  const Value &s = g_[state];
  if (s.kind != ValueKind::State)
    throw InterpretError(
        fmt::format("{} updates {}, which is not a state", describe(g_, op), describe(g_, state)));
  auto [it, inserted] = updated_by_.emplace(s.name, op);
  if (!inserted && it->second != op)
    throw InterpretError(fmt::format("state '{}' is updated by both {} and {}; a run updates a "
                                     "state at most once",
                                     s.name, describe(g_, it->second), describe(g_, op)));
  for (double &x : t.data)
    x = round_to(s.type.dtype, x);
  updates_[s.name] = std::move(t);
}

HostTensor Interpreter::output(ValueId id) const {
  HostTensor t = value(id);
  for (double &x : t.data)
    x = round_to(g_[id].type.dtype, x);
  return t;
}

HostTensor Interpreter::batchnorm(ValueId id) {
  const Value &v = g_[id];
  bool affine = v.args.size() == 5;
  const HostTensor &x = tensor(v.args[0]);
  ValueId rm_id = v.args[affine ? 3 : 1], rv_id = v.args[affine ? 4 : 2];
  const HostTensor &rm = tensor(rm_id), &rv = tensor(rv_id);
  int64_t n = x.shape[0], c = x.shape[1];
  double eps = v.attr("eps"), momentum = v.attr("momentum");

  ColumnStats stats;
  if (mode_ == Mode::Train) {
    if (n < 2) {
      const Dim &rows = v.type.shape[0];
      throw InterpretError(
          fmt::format("batchnorm in train mode needs more than 1 row, got {}{} (in {})",
                      rows.is_symbolic() ? rows.str() + "=" : "", n, describe(g_, id)));
    }
    stats = column_stats(x);
    HostTensor new_rm = rm, new_rv = rv;
    momentum_update(new_rm.data, stats.mean, momentum, 1.0);
    momentum_update(new_rv.data, stats.var, momentum,
                    static_cast<double>(n) / static_cast<double>(n - 1));
    record_update(id, rm_id, std::move(new_rm));
    record_update(id, rv_id, std::move(new_rv));
  } else {
    stats = {rm.data, rv.data};
  }

  HostTensor out = zeros(x.shape);
  for (int64_t j = 0; j < c; ++j) {
    double scale = 1.0 / std::sqrt(stats.var[j] + eps), shift = 0.0;
    if (affine) {
      scale *= tensor(v.args[1]).data[j];
      shift = tensor(v.args[2]).data[j];
    }
    for (int64_t i = 0; i < n; ++i)
      out.data[i * c + j] = (x.data[i * c + j] - stats.mean[j]) * scale + shift;
  }
  return out;
}

void Interpreter::bn_update(ValueId id) {
  const Value &v = g_[id];
  const Dim &rows = v.attrs.at("count").shape.front();
  auto count = static_cast<double>(
      concrete_extent(rows, dims_, fmt::format("{}: count={}", describe(g_, id), rows.str())));
  if (count <= 1)
    throw InterpretError(fmt::format("{}: count must be more than 1 to unbias the variance, got {}",
                                     describe(g_, id), count));
  double momentum = v.attr("momentum");
  HostTensor new_rm = tensor(v.args[0]), new_rv = tensor(v.args[1]);
  momentum_update(new_rm.data, tensor(v.args[2]).data, momentum, 1.0);
  momentum_update(new_rv.data, tensor(v.args[3]).data, momentum, count / (count - 1));
  record_update(id, v.args[0], std::move(new_rm));
  record_update(id, v.args[1], std::move(new_rv));
}

void Interpreter::eval(ValueId id) {
  if (id < 0 || static_cast<size_t>(id) >= g_.values.size())
    throw InterpretError(fmt::format("no value %{} in pipeline '{}'", id, g_.name));
  const Value &v = g_[id];
  if (!v.is_op())
    return; // declarations are bound by the constructor
  std::vector<TensorType> arg_types;
  for (ValueId a : v.args) {
    if (!computed(a))
      throw InterpretError(fmt::format("cannot evaluate {}: its argument {} has not been computed",
                                       describe(g_, id), describe(g_, a)));
    arg_types.push_back(g_[a].type);
  }
  // The kernels below index by the argument shapes without checking them: a graph whose
  // recorded types are not what inference gives (a pass that built a Value by hand) must
  // stop here rather than read out of bounds.
  TensorType inferred;
  try {
    inferred = infer_type(v.op, arg_types, v.attrs);
  } catch (const TypeError &e) {
    throw InterpretError(fmt::format("{} is ill-typed: {}", describe(g_, id), e.what()));
  }
  if (inferred != v.type)
    throw InterpretError(fmt::format("{} is recorded as {} but its arguments give {}",
                                     describe(g_, id), v.type.str(), inferred.str()));

  auto arg = [&](size_t i) -> const HostTensor & { return tensor(v.args[i]); };
  HostTensor out;
  // By class, so that a new op of an existing class needs no case here; within a class,
  // by kind, every kind named.
  switch (op_info(v.op).cls) {
  case OpClass::Gemm: {
    HostTensor storage;
    const HostTensor &x = matrix_view(arg(0), storage);
    out = v.op == OpKind::Linear ? linear(x, arg(1), v.args.size() == 3 ? &arg(2) : nullptr)
                                 : matmul(x, arg(1));
    out.shape = concrete_shape(v.type, dims_);
    break;
  }
  case OpClass::Norm:
    out = batchnorm(id);
    break;
  case OpClass::Binary: { // inference allows only operands that are matrices in the view
    HostTensor a, b;
    out = binary(v, matrix_view(arg(0), a), matrix_view(arg(1), b));
    out.shape = concrete_shape(v.type, dims_);
    break;
  }
  case OpClass::Unary: {
    const OpInfo &info = op_info(v.op);
    std::vector<double> attr = attr_numbers(info, v.attrs);
    out = arg(0);
    for (double &x : out.data)
      x = info.fp64(x, 0, attr.data());
    break;
  }
  case OpClass::Random:
    out = dropout(v, arg(0), mode_, rng_);
    break;
  case OpClass::View: // the same row-major elements; equal rows are the run's to check
    out = arg(0);
    out.shape = concrete_shape(v.type, dims_);
    if (out.numel() != arg(0).numel())
      throw InterpretError(fmt::format("{} views {} {} as {} {}: the bound dims give them "
                                       "different element counts",
                                       describe(g_, id), g_[v.args[0]].type.str(),
                                       shape_text(arg(0).shape), v.type.str(),
                                       shape_text(out.shape)));
    break;
  case OpClass::Row: {
    int rank = static_cast<int>(arg(0).shape.size());
    int dim = static_cast<int>(v.attr("dim"));
    out = softmax(arg(0), dim < 0 ? dim + rank : dim, v.op == OpKind::LogSoftmax);
    break;
  }
  case OpClass::RowNorm: {
    std::vector<const HostTensor *> args;
    for (size_t i = 0; i < v.args.size(); ++i)
      args.push_back(&arg(i));
    out = row_norm(g_, id, args);
    break;
  }
  case OpClass::Reduce: {
    int rank = static_cast<int>(arg(0).shape.size());
    int dim = static_cast<int>(v.attr("dim"));
    out = reduction(v, arg(0), dim < 0 ? dim + rank : dim, concrete_shape(v.type, dims_));
    break;
  }
  case OpClass::Pool:
    out = pool(v, arg(0));
    break;
  case OpClass::ColReduce: {
    ColumnStats stats = column_stats(arg(0));
    out.shape = {arg(0).shape[1]};
    out.data = v.op == OpKind::ColMean ? stats.mean : stats.var;
    break;
  }
  case OpClass::ColAffine:
    out = col_affine(arg(0), arg(1), arg(2), v.args.size() == 4 ? &arg(3) : nullptr);
    break;
  case OpClass::Effect:
    bn_update(id); // an effect: `out` stays empty
    break;
  case OpClass::Constant:
    out = HostTensor{{1}, {v.attr("value")}};
    break;
  }
  values_[static_cast<size_t>(id)] = std::move(out);
  done_[static_cast<size_t>(id)] = true;
}

std::vector<HostTensor> interpret(const Graph &g, Mode mode, const DimBindings &dims,
                                  TensorMap &tensors, RngState rng) {
  Interpreter in(g, mode, dims, tensors, rng);
  in.eval_all();
  std::vector<HostTensor> outputs;
  for (ValueId id : g.outputs)
    outputs.push_back(in.output(id));
  for (const auto &[name, t] : in.state_updates())
    tensors[name] = t;
  return outputs;
}

TensorMap random_tensors(const Graph &g, const DimBindings &dims, uint64_t seed) {
  // Declarations read as a running variance must be positive, or eval-mode batchnorm takes
  // the square root of a negative number.
  // Weights are scaled like PyTorch's Linear initialization (standard deviation
  // 1/sqrt(fan_in)), so products stay O(1) as in a real model; with unit weights a K=8192
  // product is ~90 and a following softmax turns fp32's last-bit differences into 1e-5.
  std::set<ValueId> running_vars;
  std::map<ValueId, double> weight_scale;
  for (const Value &v : g.values) {
    if (v.is_op() && v.op == OpKind::BatchNorm)
      running_vars.insert(v.args.back());
    if (v.is_op() && v.op == OpKind::BnUpdate)
      running_vars.insert(v.args[1]);
    if (v.is_op() && (v.op == OpKind::Linear || v.op == OpKind::Matmul)) {
      const Dim &fan_in = g[v.args[1]].type.shape[v.op == OpKind::Linear ? 1 : 0];
      auto bound = fan_in.is_symbolic() ? dims.find(fan_in.sym) : dims.end();
      int64_t k = !fan_in.is_symbolic() ? fan_in.value : bound != dims.end() ? bound->second : 1;
      weight_scale[v.args[1]] = 1 / std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)));
    }
  }
  TensorMap tensors;
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value &v = g.values[i];
    if (v.is_op())
      continue;
    HostTensor t = zeros(declared_shape(g, static_cast<ValueId>(i), dims));
    // One stream per name, so a tensor's values do not depend on what else is declared (a
    // pass that reorders or drops declarations sees the same inputs).
    SplitMix64 rng{seed ^ fnv1a(v.name)};
    if (running_vars.count(static_cast<ValueId>(i))) {
      for (double &x : t.data)
        x = 0.5 + rng.uniform();
    } else {
      // Marsaglia's polar form of Box-Muller: a point uniform in the unit disc gives two
      // independent standard normals without the sine and cosine, which take most of the
      // time for a weight of 67M values.
      for (size_t j = 0; j < t.data.size(); j += 2) {
        double u, w, s;
        do {
          u = 2 * rng.uniform() - 1;
          w = 2 * rng.uniform() - 1;
          s = u * u + w * w;
        } while (s >= 1 || s == 0);
        double f = std::sqrt(-2 * std::log(s) / s);
        t.data[j] = u * f;
        if (j + 1 < t.data.size())
          t.data[j + 1] = w * f;
      }
      auto it = weight_scale.find(static_cast<ValueId>(i));
      if (it != weight_scale.end())
        for (double &x : t.data)
          x *= it->second;
    }
    for (double &x : t.data)
      x = round_to(v.type.dtype, x);
    tensors[v.name] = std::move(t);
  }
  return tensors;
}

double relative_error(const std::vector<double> &a, const std::vector<double> &b) {
  if (a.size() != b.size())
    throw std::invalid_argument(
        fmt::format("relative_error: {} values compared with {}", a.size(), b.size()));
  double diff = 0, norm_b = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm_b += b[i] * b[i];
  }
  // With b zero up to fp64 rounding (every |b| around 1e-12 or less: a value that is zero in
  // exact arithmetic, such as the column mean of a batchnorm's output) there is no scale to be
  // relative to: the error is the root mean square of a - b (0 when a is zero too).
  if (norm_b <= 1e-24 * static_cast<double>(b.size()))
    return std::sqrt(diff / static_cast<double>(b.size()));
  return std::sqrt(diff) / std::sqrt(norm_b);
}

} // namespace kfuse::ir
