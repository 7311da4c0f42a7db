#include "tests/support/random_pipelines.h"

#include "compiler/ir/pointwise.h"

#include "compiler/ir/infer.h"
#include "compiler/ir/interpreter.h"
#include "compiler/ir/ops.h"
#include "compiler/ir/verifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <vector>

namespace kfuse::testing {

using namespace ir;

uint64_t SeededChoices::next() {
  s_ += 0x9e3779b97f4a7c15ull;
  uint64_t z = s_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t ByteChoices::next() {
  uint64_t v = 0;
  for (int i = 0; i < 2 && pos_ < size_; ++i)
    v = v << 8 | data_[pos_++];
  return v;
}

namespace {

const std::vector<double> kProbes = {-1e3, -2, -0.5, 0, 0.5, 2, 1e3};

// `op` at its default attributes (a required one at 0.25, as attrs() below writes it).
double probe(OpKind op, double x, double y = 0) {
  AttrMap attrs;
  for (const AttrSpec &a : op_info(op).attrs)
    attrs[std::string(a.name)] = a.required ? AttrValue{0.25, {}} : default_attr(a);
  return eval_pointwise(op, attrs, x, y);
}

// Whether a unary op is finite on every probe (rsqrt is not).
bool total_unary(OpKind op) {
  for (double x : kProbes)
    if (!std::isfinite(probe(op, x)))
      return false;
  return true;
}

// Whether a unary op is finite once its operand is made >= 1 (log, sqrt, rsqrt: their domain);
// exp is not (it overflows), and gets a bounded operand instead.
bool total_for_positive(OpKind op) {
  for (double x : {1.0, 1.5, 2.0, 1e3})
    if (!std::isfinite(probe(op, x)))
      return false;
  return true;
}

// A bounded op keeps long chains finite: |f(x)| <= 1 on every probe (sigmoid, tanh).
bool bounded_unary(OpKind op) {
  for (double x : kProbes)
    if (!std::isfinite(probe(op, x)) || std::abs(probe(op, x)) > 1)
      return false;
  return true;
}

// Whether a binary op is finite on every pair of probes (div is not at 0, pow not at a
// negative base).
bool total_binary(OpKind op) {
  for (double x : kProbes)
    for (double y : kProbes)
      if (!std::isfinite(probe(op, x, y)))
        return false;
  return true;
}

// Whether a binary op is finite on every left probe once its right operand is made >= 1, as
// the generator does for ops that are not total (pow is not: a negative base; the generator
// gives it a base >= 1 and an exponent in (-1, 1)).
bool total_for_positive_rhs(OpKind op) {
  for (double x : kProbes)
    for (double y : {1.0, 1.5, 2.0})
      if (!std::isfinite(probe(op, x, y)))
        return false;
  return true;
}

// The user ops of class `cls` of the table for which `keep` holds.
std::vector<OpKind> ops_where(OpClass cls, bool (*keep)(OpKind)) {
  std::vector<OpKind> out;
  for (const OpInfo &op : all_ops())
    if (op.cls == cls && !op.internal && keep(op.kind))
      out.push_back(op.kind);
  return out;
}

// An extent as .kf text: "4", "N", or a product "N*T".
Dim extent(const std::string &text) {
  std::vector<Dim> factors;
  for (size_t start = 0, star; start != std::string::npos;
       start = star == std::string::npos ? star : star + 1) {
    star = text.find('*', start);
    std::string f = text.substr(start, star == std::string::npos ? star : star - start);
    factors.push_back(std::isdigit(static_cast<unsigned char>(f[0])) ? Dim::constant(std::stoll(f))
                                                                     : Dim::symbol(f));
  }
  return Dim::product(factors);
}

// A tensor in scope: its name, shape as .kf text ("N", "4", "N*T") and element type.
struct Tensor {
  std::string name;
  std::vector<std::string> dims;
  DType dtype = DType::F32;
  TensorType type() const {
    TensorType t;
    t.dtype = dtype;
    for (const std::string &d : dims)
      t.shape.push_back(extent(d));
    return t;
  }
  std::string shape() const { return "[" + fmt::format("{}", fmt::join(dims, ", ")) + "]"; }
};

class Generator {
public:
  Generator(Choices &c, const PipelineShape &shape) : c_(c), shape_(shape) {
    for (const OpInfo &op : all_ops())
      by_class_[op.cls].push_back(op.kind);
  }

  std::string run(const std::string &name) {
    std::string dims = "  dim N\n";
    width_ = std::to_string(1 + c_.below(6));
    if (shape_.second_dim && c_.below(4) == 0) {
      dims += "  dim M\n";
      width_ = "M";
    }
    DType activations = DType::F32;
    if (shape_.mixed_types)
      activations = pick(std::vector<DType>{DType::F32, DType::BF16, DType::F16});
    if (shape_.ranks && coin(3)) {
      rows_ = pick(std::vector<std::vector<std::string>>{{"N", "T"}, {"2", "N"}, {"N", "2", "T"}});
      if (std::count(rows_.begin(), rows_.end(), "T"))
        dims += "  dim T\n";
    }
    std::vector<std::string> x = rows_;
    x.push_back(width_);
    Tensor h = declare("input", x, activations);
    int ops = shape_.min_ops + c_.below(shape_.max_ops - shape_.min_ops + 1);
    for (int i = 0; i < ops; ++i) {
      h = step(h);
      if (i % 8 == 7 && !bounded_.empty()) // long chains: keep magnitudes in range
        h = assign(fmt::format("{}({})", op_info(pick(bounded_)).name, h.name), h.dims, h.dtype);
    }
    std::vector<std::string> outs = {h.name};
    if (c_.below(4) == 0 && matrices_.size() > 1)
      outs.push_back(pick(matrices_).name);
    if (c_.below(4) == 0 && !column_values_.empty())
      outs.push_back(pick(column_values_).name);
    if (c_.below(6) == 0)
      outs.push_back(pick(declared_).name);
    return fmt::format("pipeline {} {{\n{}{}{}  return {}\n}}\n", name, dims, decls_, body_,
                       fmt::join(outs, ", "));
  }

private:
  template <class T> const T &pick(const std::vector<T> &v) {
    return v[static_cast<size_t>(c_.below(static_cast<int>(v.size())))];
  }
  bool coin(int one_in) { return c_.below(one_in) == 0; }

  // The type of a declaration beside values of type `t`: `t`, or now and then f32 (which a
  // normalization's parameters may be, and which binary ops promote to).
  DType beside(DType t) { return shape_.mixed_types && coin(3) ? DType::F32 : t; }

  Tensor declare(const char *kind, std::vector<std::string> dims, DType dtype) {
    Tensor t{fmt::format("{}{}", kind[0], counter_++), std::move(dims), dtype};
    decls_ += fmt::format("  {} {}: {}{}\n", kind, t.name, dtype_name(dtype), t.shape());
    declared_.push_back(t);
    if (t.dims.size() == 1)
      columns_.push_back(t);
    return t;
  }
  Tensor assign(const std::string &expr, std::vector<std::string> dims, DType dtype) {
    Tensor t{fmt::format("v{}", counter_++), std::move(dims), dtype};
    body_ += fmt::format("  {} = {}\n", t.name, expr);
    if (t.dims.size() >= 2)
      matrices_.push_back(t);
    else
      column_values_.push_back(t), columns_.push_back(t);
    return t;
  }
  std::string one() {
    if (one_.empty())
      one_ = assign("constant(value=1, dtype=f32)", {"1"}, DType::F32).name;
    return one_;
  }
  // An expression of `t`'s shape that is at least 1 everywhere: operands of div and rsqrt
  // (f32: the constant 1 is).
  Tensor positive(const Tensor &t) {
    return assign(fmt::format("add(mul({0}, {0}), {1})", t.name, one()), t.dims, DType::F32);
  }

  // The attributes of `op` as .kf text; `dim` for row ops.
  std::string attrs(OpKind op, int rank) {
    std::string s;
    for (const AttrSpec &a : op_info(op).attrs) {
      std::string value;
      switch (a.kind) {
      case AttrKind::Number:
        // The default or three times it; 0.25 for a required number (bn_update's momentum).
        value = fmt::format("{:.6g}", a.required ? 0.25 : a.number * (coin(2) ? 1 : 3));
        break;
      case AttrKind::OptNumber:
        // A bound left at "none" by default (clamp): -2 or 2, so that one is always given.
        value =
            fmt::format("{:.6g}", std::isinf(a.number) ? (a.number < 0 ? -2.0 : 2.0) : a.number);
        break;
      case AttrKind::Choice: {
        std::vector<std::string> words;
        std::string_view rest = a.choices;
        for (size_t bar; (bar = rest.find('|')) != std::string_view::npos;
             rest.remove_prefix(bar + 1))
          words.emplace_back(rest.substr(0, bar));
        words.emplace_back(rest);
        value = "\"" + pick(words) + "\"";
        break;
      }
      case AttrKind::Bool:
        value = coin(2) ? "true" : "false";
        break;
      case AttrKind::Int:
        value =
            std::to_string(shape_.last_axis_rows || rank > 2 ? (coin(2) ? rank - 1 : -1)
                                                             : pick(std::vector<int>{1, -1, 1, 0}));
        break;
      case AttrKind::Extent:
        value = "N";
        break;
      case AttrKind::DType:
        value = "f32";
        break;
      case AttrKind::Shape: // views are drawn by view(), which writes their shapes
        break;
      }
      s += fmt::format(", {}={}", a.name, value);
    }
    return s;
  }

  // Replaces the value of attribute `key` in `a` (text from attrs()), if it has one.
  static void set_attr(std::string &a, const std::string &key, const std::string &value) {
    size_t pos = a.find(key + "=");
    if (pos == std::string::npos)
      return;
    size_t end = a.find(',', pos);
    a.replace(pos, end == std::string::npos ? std::string::npos : end - pos, key + "=" + value);
  }

  // A group count dividing `width`: any divisor of a constant width, 1 for a dim name.
  std::string groups_dividing(const std::string &width) {
    if (!std::isdigit(static_cast<unsigned char>(width[0])))
      return "1";
    std::vector<int> divisors;
    for (int d = 1, w = std::stoi(width); d <= w; ++d)
      if (w % d == 0)
        divisors.push_back(d);
    return std::to_string(pick(divisors));
  }

  // A rank-1 operand for the current width beside values of type `t`: a per-feature vector
  // (param, state or column value already in scope, read again, of any type: binary ops
  // promote) or a scalar.
  Tensor column(const std::string &width, DType t) {
    std::vector<Tensor> fits;
    for (const Tensor &c : columns_)
      if (c.dims[0] == width || c.dims[0] == "1")
        fits.push_back(c);
    if (!fits.empty() && coin(2))
      return pick(fits);
    return declare("param", {coin(3) ? "1" : width}, beside(t));
  }

  // A per-feature vector of exactly `width` features (no scalar), the parameter of a
  // normalization of values of type `t` (so of type `t` or f32): one in scope, read again, or
  // a fresh param.
  Tensor feature_vector(const std::string &width, DType t) {
    std::vector<Tensor> fits;
    for (const Tensor &c : columns_)
      if (c.dims[0] == width && (c.dtype == t || c.dtype == DType::F32))
        fits.push_back(c);
    if (!fits.empty() && coin(2))
      return pick(fits);
    return declare("param", {width}, beside(t));
  }

  // A fresh input of `h`'s shape with last extent `last`: declared in the rank of the
  // pipeline's rows, and viewed as `h`'s [rows, F] matrix where `h` is one of a higher rank.
  Tensor input_like(const Tensor &h, const std::string &last) {
    std::vector<std::string> dims = rows_;
    dims.push_back(last);
    Tensor t = declare("input", dims, beside(h.dtype));
    if (h.dims.size() == dims.size())
      return t;
    return assign(fmt::format("reshape({}, shape=[{}, {}])", t.name, h.dims[0], last),
                  {h.dims[0], last}, t.dtype);
  }

  // `t` as the [rows, F] matrix the ops that refuse rank 3/4 take: itself where it has rank 2,
  // else a reshape to [N*T, F] (now and then written [-1, F]).
  Tensor matrix(const Tensor &t) {
    if (t.dims.size() <= 2)
      return t;
    std::vector<Dim> leading;
    for (size_t i = 0; i + 1 < t.dims.size(); ++i)
      leading.push_back(extent(t.dims[i]));
    std::string rows = Dim::product(leading).str();
    return assign(
        fmt::format("reshape({}, shape=[{}, {}])", t.name, coin(3) ? "-1" : rows, t.dims.back()),
        {rows, t.dims.back()}, t.dtype);
  }

  // A view of `h` or beside it: `h` between its [rows, F] matrix and the rank of the
  // pipeline's rows (a reshape, now and then with a -1), an unsqueeze and the squeeze that
  // undoes it (either dim spelled from the front or the back), or a vector unsqueezed to
  // [1, F] as the operand of a total binary op.
  Tensor view(const Tensor &h) {
    switch (c_.below(shape_.column_views ? 4 : 3)) {
    case 0: {
      if (h.dims.size() > 2)
        return matrix(h);
      std::vector<std::string> full = rows_, shape;
      full.push_back(h.dims.back());
      shape = full;
      if (coin(2))
        shape[static_cast<size_t>(c_.below(static_cast<int>(shape.size())))] = "-1";
      return assign(fmt::format("reshape({}, shape=[{}])", h.name, fmt::join(shape, ", ")), full,
                    h.dtype);
    }
    case 1: {
      int rank = static_cast<int>(h.dims.size()), d = c_.below(rank);
      if (rank == 4)
        return h;
      std::vector<std::string> dims = h.dims;
      dims.insert(dims.begin() + d, "1");
      Tensor u = assign(fmt::format("unsqueeze({}, dim={})", h.name, coin(2) ? d : d - rank - 1),
                        dims, h.dtype);
      return assign(fmt::format("squeeze({}, dim={})", u.name, coin(2) ? d : d - rank - 1), h.dims,
                    h.dtype);
    }
    case 3: {
      if (total_binaries_.empty())
        return h;
      Tensor v = column_through_op(column(h.dims.back(), h.dtype));
      return assign(fmt::format("{}({}, {})", op_info(pick(total_binaries_)).name, h.name, v.name),
                    h.dims, promote(h.dtype, v.dtype));
    }
    default: {
      if (total_binaries_.empty())
        return h;
      Tensor c = column(h.dims.back(), h.dtype);
      Tensor u = assign(fmt::format("unsqueeze({}, dim={})", c.name, coin(2) ? "0" : "-2"),
                        {"1", c.dims[0]}, c.dtype);
      return assign(fmt::format("{}({}, {})", op_info(pick(total_binaries_)).name, h.name, u.name),
                    h.dims, promote(h.dtype, u.dtype));
    }
    }
  }

  // Vector `c` ([F] or [1]) as the row [1, F] (an unsqueeze or a reshape), through a total unary
  // op or a row op over its one row, and back to a vector (a squeeze or a reshape): a per-feature
  // value in scope for later ops.
  Tensor column_through_op(const Tensor &c) {
    const std::string f = c.dims[0];
    Tensor row = assign(coin(2) ? fmt::format("unsqueeze({}, dim={})", c.name, coin(2) ? "0" : "-2")
                                : fmt::format("reshape({}, shape=[1, {}])", c.name, f),
                        {"1", f}, c.dtype);
    auto rows = by_class_.find(OpClass::Row);
    if (coin(3) && rows != by_class_.end()) {
      OpKind op = pick(rows->second);
      row = assign(fmt::format("{}({}{})", op_info(op).name, row.name, attrs(op, 2)), row.dims,
                   row.dtype);
    } else if (!total_unaries_.empty()) {
      OpKind op = pick(total_unaries_);
      row = assign(fmt::format("{}({}{})", op_info(op).name, row.name, attrs(op, 2)), row.dims,
                   op == OpKind::Cast ? DType::F32 : row.dtype);
    }
    return assign(coin(2) ? fmt::format("squeeze({}, dim={})", row.name, coin(2) ? "0" : "-2")
                          : fmt::format("reshape({}, shape=[{}])", row.name, f),
                  {f}, row.dtype);
  }

  // A literal: an ordinary number, or now and then (special_literals) +-0 or +-1e-30, and
  // (huge_literals) +-1e30 or +-inf.
  std::string literal() {
    if (!shape_.special_literals || coin(2))
      return fmt::format("constant(value={}, dtype=f32)", 0.25 + c_.below(8));
    switch (c_.below(shape_.huge_literals ? 4 : 2)) {
    case 0:
      return coin(2) ? "constant(value=0, dtype=f32)" : "constant(value=-0, dtype=f32)";
    case 1:
      return coin(2) ? "constant(value=1e-30, dtype=f32)" : "constant(value=-1e-30, dtype=f32)";
    case 2:
      return coin(2) ? "constant(value=1e30, dtype=f32)" : "constant(value=-1e30, dtype=f32)";
    default:
      return fmt::format("div(constant(value={}, dtype=f32), constant(value=0, dtype=f32))",
                         coin(2) ? "1" : "-1");
    }
  }

  // The second operand of a binary op with matrix `h`.
  Tensor operand(const Tensor &h) {
    switch (c_.below(6)) {
    case 0: { // another matrix of this shape, read a second time, or a fresh input
      for (auto it = matrices_.rbegin(); it != matrices_.rend(); ++it)
        if (it->dims == h.dims && it->name != h.name && coin(2))
          return *it;
      return input_like(h, h.dims.back());
    }
    case 1:
      return input_like(h, "1");
    case 2:
      return declare("param", {"1", h.dims.back()}, beside(h.dtype));
    default:
      return column(h.dims.back(), h.dtype);
    }
  }

  Tensor step(const Tensor &h) {
    static const std::vector<OpClass> classes = {
        OpClass::Gemm,      OpClass::Norm,   OpClass::Norm,     OpClass::Binary,
        OpClass::Binary,    OpClass::Unary,  OpClass::Unary,    OpClass::Row,
        OpClass::RowNorm,   OpClass::Reduce, OpClass::Reduce,   OpClass::ColReduce,
        OpClass::ColAffine, OpClass::Effect, OpClass::Constant, OpClass::Pool,
        OpClass::Random,    OpClass::Loss};
    static const std::vector<OpClass> with_views = [] {
      std::vector<OpClass> c = classes;
      c.push_back(OpClass::View);
      return c;
    }();
    OpClass cls = pick(shape_.ranks ? with_views : classes);
    auto it = by_class_.find(cls);
    if (it == by_class_.end())
      return h;
    OpKind op = pick(it->second);
    std::string name(op_info(op).name);
    switch (cls) {
    case OpClass::Gemm:
      return gemm(op, h);
    case OpClass::Norm: // batchnorm refuses rank 3/4: over the N*T rows of its matrix view
      return norm(op, matrix(h));
    case OpClass::Binary: {
      Tensor o = operand(h);
      if (!total_for_positive_rhs(op)) // pow: a base >= 1 and an exponent in (-1, 1)
        return assign(fmt::format("{}({}, tanh({}))", name, positive(h).name, o.name), h.dims,
                      promote(DType::F32, o.dtype));
      Tensor rhs = total_binary(op) ? o : positive(o);
      DType dt = promote(h.dtype, rhs.dtype);
      if (coin(2) || !total_binary(op))
        return assign(fmt::format("{}({}, {})", name, h.name, rhs.name), h.dims, dt);
      return assign(fmt::format("{}({}, {})", name, o.name, h.name), h.dims, dt);
    }
    case OpClass::Unary: {
      if (op == OpKind::Cast) { // to any type: what follows sees the rounded value's type
        const DType to = pick(std::vector<DType>{DType::F32, DType::BF16, DType::F16});
        return assign(fmt::format("cast({}, dtype={})", h.name, dtype_name(to)), h.dims, to);
      }
      Tensor x = total_unary(op)          ? h
                 : total_for_positive(op) ? positive(h)
                                          : assign("tanh(" + h.name + ")", h.dims, h.dtype);
      Tensor u = assign(fmt::format("{}({}{})", name, x.name, attrs(op, 2)), h.dims, x.dtype);
      if (coin(3) || total_binaries_.empty())
        return u;
      // `h` used twice, as in h * sigmoid(h): by the unary op and by a binary op of both.
      return assign(fmt::format("{}({}, {})", op_info(pick(total_binaries_)).name, h.name, u.name),
                    h.dims, promote(h.dtype, u.dtype));
    }
    case OpClass::Row:
      return assign(
          fmt::format("{}({}{})", name, h.name, attrs(op, static_cast<int>(h.dims.size()))), h.dims,
          h.dtype);
    case OpClass::Random: // p of 0 (the identity) to 0.75; each its own stream by default
      return assign(fmt::format("{}({}, p={})", name, h.name, 0.25 * c_.below(4)), h.dims, h.dtype);
    case OpClass::RowNorm: { // the optional per-feature vectors, some or all of them
      // groupnorm and instancenorm take axis 1 of a rank-3 input as channels: their matrix.
      Tensor x = op == OpKind::GroupNorm || op == OpKind::InstanceNorm ? matrix(h) : h;
      std::string args = x.name;
      int vectors = c_.below(op_info(op).max_args);
      for (int i = 0; i < vectors; ++i)
        args += ", " + feature_vector(x.dims.back(), x.dtype).name;
      std::string a = attrs(op, static_cast<int>(x.dims.size()));
      set_attr(a, "groups", groups_dividing(x.dims.back())); // groupnorm
      return assign(fmt::format("{}({}{})", name, args, a), x.dims, x.dtype);
    }
    case OpClass::Reduce:
      return reduce(op, matrix(h));
    case OpClass::Pool:
      return pool(op, matrix(h));
    case OpClass::ColReduce: { // a column value, used by later ops and maybe returned: col_sum
      // keeps the matrix's type (as torch.sum), the statistics are f32
      Tensor m = matrix(h);
      assign(fmt::format("{}({})", name, m.name), {m.dims.back()},
             op == OpKind::ColSum ? m.dtype : DType::F32);
      return m;
    }
    case OpClass::ColAffine: { // alpha, beta and, every other time, a shift
      Tensor m = matrix(h);
      std::string args = m.name;
      for (int i = coin(2) ? 3 : 2; i > 0; --i)
        args += ", " + column(m.dims.back(), m.dtype).name;
      return assign(fmt::format("{}({})", name, args), m.dims, m.dtype);
    }
    case OpClass::Effect:
      return effect(op, matrix(h));
    case OpClass::Constant: // a [1] value in scope: later ops read it as a per-feature operand
      assign(literal(), {"1"}, DType::F32);
      return h;
    case OpClass::View:
      return view(h);
    case OpClass::Loss:
      return loss(op, matrix(h));
    case OpClass::Transpose: // not drawn (drawn_by_generator)
    case OpClass::PoolGrad:
    case OpClass::NormGrad:
    case OpClass::LossGrad:
      return h;
    }
    return h;
  }

  // A reduction of `h`, then (when its result broadcasts against `h`: [N, 1], [1, F], [F]) a
  // total binary op of the table that uses it, so per-row and per-column results flow back
  // into the chain; an [N] result stays a returnable rank-1 value.
  Tensor reduce(OpKind op, const Tensor &h) {
    std::string a = attrs(op, 2);
    // var / std: a correction below the row length, so the divisor stays positive.
    bool wide = std::isdigit(static_cast<unsigned char>(h.dims.back()[0])) && h.dims.back() != "1";
    set_attr(a, "correction", wide && coin(2) ? "1" : "0");
    bool keepdim = a.find("keepdim=true") != std::string::npos;
    int dim = std::stoi(a.substr(a.find("dim=") + 4));
    size_t axis = static_cast<size_t>(dim < 0 ? dim + 2 : dim);
    std::vector<std::string> dims = h.dims;
    if (keepdim)
      dims[axis] = "1";
    else
      dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(axis));
    Tensor r = assign(fmt::format("{}({}{})", op_info(op).name, h.name, a), dims, h.dtype);
    if ((dims.size() == 1 && axis == 1) || total_binaries_.empty())
      return h;
    Tensor b =
        assign(fmt::format("{}({}, {})", op_info(pick(total_binaries_)).name, h.name, r.name),
               h.dims, promote(h.dtype, r.dtype));
    if (!keepdim || coin(2))
      return b;
    // A chain on the per-row result: a second reduction of a value computed from the first,
    // as sum(exp(h - max(h))) does.
    return reduce(op, b);
  }

  // A loss of `h`'s rows (not a view's product of rows) against a new i64 target, declared apart
  // from the other declarations (no other op may read it), at any reduction, with or without
  // label smoothing and with the default or another ignore_index; the chain goes on from `h`,
  // the loss is a value later ops may read and return.
  Tensor loss(OpKind op, const Tensor &h) {
    if (h.dims[0].find('*') != std::string::npos) // a declaration's extent is no product
      return h;
    const std::string target = fmt::format("t{}", counter_++);
    decls_ += fmt::format("  input {}: i64[{}]\n", target, h.dims[0]);
    // cross_entropy_rows (internal) gives [N, 1]: each row's loss, or its weight in a mean.
    const bool rows = op == OpKind::CrossEntropyRows;
    const std::string reduction = pick(std::vector<std::string>{"none", "sum", "mean"});
    std::string a =
        rows ? (coin(3) ? ", weight=true" : "") : fmt::format(", reduction=\"{}\"", reduction);
    if (coin(2))
      a += ", label_smoothing=0.25";
    if (coin(3))
      a += ", ignore_index=1";
    assign(fmt::format("{}({}, {}{})", op_info(op).name, h.name, target, a),
           rows                  ? std::vector<std::string>{h.dims[0], "1"}
           : reduction == "none" ? std::vector<std::string>{h.dims[0]}
                                 : std::vector<std::string>{"1"},
           h.dtype);
    return h;
  }

  // A pool of a constant-width `h` (its output width needs a number): a window of 1 to the
  // width, the stride left at its default (the window) or 1 to 3. The result has a new width,
  // so later per-feature operands are declared for it.
  Tensor pool(OpKind op, const Tensor &h) {
    if (!std::isdigit(static_cast<unsigned char>(h.dims.back()[0])))
      return h;
    int f = std::stoi(h.dims.back()), k = 1 + c_.below(f);
    std::string stride = coin(2) ? "" : fmt::format(", stride={}", 1 + c_.below(3));
    int s = stride.empty() ? k : std::stoi(stride.substr(9));
    return assign(fmt::format("{}({}, kernel_size={}{})", op_info(op).name, h.name, k, stride),
                  {h.dims[0], std::to_string((f - k) / s + 1)}, h.dtype);
  }

  // The weight layout and bias come from the op's shape rule: whichever types.
  Tensor gemm(OpKind op, const Tensor &h) {
    std::string out = std::to_string(1 + c_.below(6));
    for (bool transposed : {false, true}) {
      Tensor w{"",
               transposed ? std::vector<std::string>{h.dims.back(), out}
                          : std::vector<std::string>{out, h.dims.back()},
               h.dtype};
      Tensor b{"", {out}, h.dtype};
      bool bias = op_info(op).max_args >= 3 && coin(2);
      std::vector<TensorType> args = {h.type(), w.type()};
      if (bias)
        args.push_back(b.type());
      try {
        infer_type(op, args, {});
      } catch (const TypeError &) {
        continue;
      }
      Tensor wd = declare("param", w.dims, h.dtype);
      std::string bias_text = bias ? ", " + declare("param", b.dims, h.dtype).name : "";
      std::vector<std::string> dims = h.dims;
      dims.back() = out;
      return assign(fmt::format("{}({}, {}{})", op_info(op).name, h.name, wd.name, bias_text), dims,
                    h.dtype);
    }
    return h;
  }

  // batchnorm(x, [weight, bias,] running_mean, running_var): the updated arguments are
  // fresh states; afterwards they are in scope, so later ops may read them.
  Tensor norm(OpKind op, const Tensor &h) {
    const OpInfo &info = op_info(op);
    Value probe;
    probe.kind = ValueKind::Op;
    probe.op = op;
    probe.args.assign(static_cast<size_t>(coin(3) ? info.min_args : info.max_args), 0);
    std::vector<int> updated = updated_args(probe);
    std::vector<std::string> args = {h.name};
    std::vector<Tensor> states;
    for (size_t i = 1; i < probe.args.size(); ++i) {
      bool state = std::count(updated.begin(), updated.end(), static_cast<int>(i)) > 0;
      Tensor t = declare(state ? "state" : "param", {h.dims.back()}, beside(h.dtype));
      args.push_back(t.name);
    }
    return assign(fmt::format("{}({}{})", info.name, fmt::join(args, ", "), attrs(op, 2)), h.dims,
                  h.dtype);
  }

  // bn_update(running_mean, running_var, mean, var): column statistics of `h` into fresh
  // states, an explicit effect statement.
  Tensor effect(OpKind op, const Tensor &h) {
    const std::vector<OpKind> &reduce = by_class_[OpClass::ColReduce];
    if (reduce.empty())
      return h;
    std::vector<std::string> args;
    Value probe;
    probe.kind = ValueKind::Op;
    probe.op = op;
    probe.args.assign(static_cast<size_t>(op_info(op).min_args), 0);
    std::vector<int> updated = updated_args(probe);
    for (size_t i = 0; i < probe.args.size(); ++i) {
      if (std::count(updated.begin(), updated.end(), static_cast<int>(i)))
        args.push_back(declare("state", {h.dims.back()}, beside(h.dtype)).name);
      else { // col_sum keeps its matrix's type (as torch.sum); the statistics are f32
        const OpKind stat = reduce[i % reduce.size()];
        args.push_back(assign(fmt::format("{}({})", op_info(stat).name, h.name), {h.dims.back()},
                              stat == OpKind::ColSum ? h.dtype : DType::F32)
                           .name);
      }
    }
    std::string a = attrs(op, 2);
    // count=N with N=1 divides by zero in the unbiased variance: use a fixed count.
    if (auto pos = a.find("count=N"); pos != std::string::npos)
      a.replace(pos, 7, "count=8");
    body_ += fmt::format("  {}({}{})\n", op_info(op).name, fmt::join(args, ", "), a);
    return h;
  }

  Choices &c_;
  PipelineShape shape_;
  std::map<OpClass, std::vector<OpKind>> by_class_;
  std::vector<OpKind> total_binaries_ = ops_where(OpClass::Binary, total_binary);
  std::vector<OpKind> bounded_ = ops_where(OpClass::Unary, bounded_unary);
  std::vector<OpKind> total_unaries_ = ops_where(OpClass::Unary, total_unary);
  std::vector<std::string> rows_ = {"N"}; // the leading extents of the pipeline's input
  std::string width_, one_;
  int counter_ = 0;
  std::string decls_, body_;
  std::vector<Tensor> declared_, matrices_, columns_, column_values_;
};

} // namespace

std::string random_pipeline(Choices &choices, const PipelineShape &shape, const std::string &name) {
  return Generator(choices, shape).run(name);
}

std::string random_pipeline(uint64_t seed) {
  SeededChoices c(seed);
  PipelineShape shape;
  shape.second_dim = false;
  shape.mixed_types = false;
  shape.ranks = false;
  shape.column_views = false;
  shape.special_literals = false;
  return random_pipeline(c, shape, fmt::format("random_{}", seed));
}

bool drawn_by_generator(OpKind op) {
  const OpClass cls = op_info(op).cls;
  return op != OpKind::MatmulTN && cls != OpClass::Transpose && cls != OpClass::PoolGrad &&
         cls != OpClass::NormGrad && cls != OpClass::LossGrad;
}

} // namespace kfuse::testing
