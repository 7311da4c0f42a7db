#include "compiler/ir/views.h"

#include "compiler/ir/infer.h"
#include "compiler/ir/printer.h"

#include <fmt/format.h>

#include <algorithm>

namespace kfuse::ir {
namespace {

// a / b where the product b divides a whatever the dims are (its dims among a's, its constant
// dividing a's); nullopt otherwise.
std::optional<Dim> quotient(const Dim &a, const Dim &b) {
  Dim x = Dim::product({a}), y = Dim::product({b});
  std::vector<std::string> af = x.sym.empty() ? x.factors : std::vector<std::string>{x.sym};
  std::vector<std::string> bf = y.sym.empty() ? y.factors : std::vector<std::string>{y.sym};
  int64_t av = x.sym.empty() ? x.value : 1, bv = y.sym.empty() ? y.value : 1;
  if (av % bv != 0)
    return std::nullopt;
  std::vector<std::string> left;
  std::sort(af.begin(), af.end());
  std::sort(bf.begin(), bf.end());
  if (!std::includes(af.begin(), af.end(), bf.begin(), bf.end()))
    return std::nullopt;
  std::set_difference(af.begin(), af.end(), bf.begin(), bf.end(), std::back_inserter(left));
  std::vector<Dim> parts = {Dim::constant(av / bv)};
  for (const std::string &f : left)
    parts.push_back(Dim::symbol(f));
  return Dim::product(parts);
}

[[noreturn]] void refuse(const OpInfo &op, const TensorType &x, const std::string &to,
                         const std::string &why) {
  throw TypeError(
      -1, fmt::format("{} of {} to {} is not a view kfuse runs: {}", op.name, x.str(), to, why));
}

TensorType reshape(const OpInfo &op, const TensorType &x, const std::vector<Dim> &shape) {
  const std::string to = TensorType{x.dtype, shape}.shape_str();
  std::vector<Dim> out = shape;
  auto inferred = std::find(out.begin(), out.end(), Dim::constant(-1));
  if (inferred != out.end()) {
    std::vector<Dim> known(out.begin(), inferred);
    known.insert(known.end(), inferred + 1, out.end());
    std::optional<Dim> rest = quotient(Dim::product(x.shape), Dim::product(known));
    if (!rest)
      refuse(op, x, to,
             fmt::format("the -1 cannot be inferred: {} elements are not a multiple of {}",
                         Dim::product(x.shape).str(), Dim::product(known).str()));
    *inferred = *rest;
  }
  TensorType y{x.dtype, out};
  if (out.back() != x.shape.back())
    refuse(op, x, to,
           fmt::format("it would change the feature axis (the last) from {} to {}; a view keeps "
                       "the last extent",
                       x.shape.back().str(), out.back().str()));
  Dim rows_x = row_extent(x), rows_y = row_extent(y);
  // Constants that differ, or a vector that would take rows: never the same matrix. Dims that
  // differ by name may be bound to equal products: the run checks them (view_rows_problem).
  bool vector = x.rank() == 1 || y.rank() == 1;
  if (rows_x != rows_y && (vector || (!rows_x.is_symbolic() && !rows_y.is_symbolic())))
    refuse(op, x, to,
           fmt::format("it would change the number of rows from {} to {}", rows_x.str(),
                       rows_y.str()));
  return y;
}

TensorType unsqueeze(const OpInfo &op, const TensorType &x, int64_t dim) {
  int64_t rank = x.rank();
  if (dim < -rank - 1 || dim > rank)
    throw TypeError(-1, fmt::format("{}: dim={} is out of range for {} (rank {}): it must be in "
                                    "[{}, {}]",
                                    op.name, dim, x.str(), rank, -rank - 1, rank));
  int64_t axis = dim < 0 ? dim + rank + 1 : dim;
  std::vector<Dim> out = x.shape;
  out.insert(out.begin() + axis, Dim::constant(1));
  const std::string to = TensorType{x.dtype, out}.shape_str();
  if (axis == rank)
    refuse(op, x, to,
           fmt::format("dim={} adds a new last axis, which would become the feature axis; a view "
                       "keeps the last axis",
                       dim));
  if (rank == 4)
    refuse(op, x, to, "tensors have rank 1 to 4");
  return {x.dtype, out};
}

TensorType squeeze(const OpInfo &op, const TensorType &x, int64_t dim) {
  int64_t rank = x.rank();
  if (dim < -rank || dim >= rank)
    throw TypeError(-1, fmt::format("{}: dim={} is out of range for {} (rank {})", op.name, dim,
                                    x.str(), rank));
  size_t axis = static_cast<size_t>(dim < 0 ? dim + rank : dim);
  std::vector<Dim> out = x.shape;
  out.erase(out.begin() + static_cast<std::ptrdiff_t>(axis));
  const std::string to = TensorType{x.dtype, out}.shape_str();
  if (axis + 1 == x.shape.size())
    refuse(op, x, to,
           fmt::format("dim={} is the feature axis (the last); a view keeps the last axis", dim));
  if (x.shape[axis] != Dim::constant(1))
    refuse(op, x, to,
           fmt::format("axis {} has extent {}, not 1; PyTorch would leave the tensor as it is, "
                       "kfuse refuses a squeeze that may or may not remove an axis",
                       axis, x.shape[axis].str()));
  return {x.dtype, out};
}

} // namespace

TensorType view_type(const OpInfo &op, const TensorType &x, const AttrMap &attrs) {
  if (op.kind == OpKind::Reshape)
    return reshape(op, x, attrs.at("shape").shape);
  auto dim = static_cast<int64_t>(attrs.at("dim").number);
  return op.kind == OpKind::Unsqueeze ? unsqueeze(op, x, dim) : squeeze(op, x, dim);
}

Dim row_extent(const TensorType &t) { return Dim::product({t.shape.begin(), t.shape.end() - 1}); }

std::optional<std::string> view_rows_problem(const Graph &g, ValueId v,
                                             const std::map<std::string, int64_t> &dims) {
  const TensorType &x = g[g[v].args[0]].type, &y = g[v].type;
  int64_t rows_x = row_extent(x).evaluate(dims), rows_y = row_extent(y).evaluate(dims);
  if (rows_x == rows_y)
    return std::nullopt;
  return fmt::format(
      "{}{} views {} {} as {}, but the bound dims give {} = {} rows and {} = {}", describe(g, v),
      g[v].loc.known() ? fmt::format(" (line {})", g[v].loc.line) : "", describe(g, g[v].args[0]),
      x.str(), y.str(), row_extent(x).str(), rows_x, row_extent(y).str(), rows_y);
}

std::map<std::string, int64_t> view_consistent_dims(const Graph &g, int64_t size) {
  // Each view whose row counts differ by name is an equation between two extents; a side that
  // is one dim alone determines that dim from the other side, unless it appears there.
  struct Derived {
    std::string dim;
    Dim from;
  };
  std::vector<Derived> derived;
  auto derivable = [&](const Dim &side, const Dim &other) {
    if (side.sym.empty())
      return false;
    for (const Derived &d : derived)
      if (d.dim == side.sym)
        return false;
    return other.sym != side.sym &&
           std::find(other.factors.begin(), other.factors.end(), side.sym) == other.factors.end();
  };
  for (size_t id = 0; id < g.values.size(); ++id) {
    const Value &v = g.values[id];
    if (!v.is_op() || op_info(v.op).cls != OpClass::View)
      continue;
    const Dim x = row_extent(g[v.args[0]].type), y = row_extent(v.type);
    if (x == y)
      continue;
    if (derivable(x, y))
      derived.push_back({x.sym, y});
    else if (derivable(y, x))
      derived.push_back({y.sym, x});
  }
  std::map<std::string, int64_t> dims;
  for (const std::string &d : g.dims)
    if (std::none_of(derived.begin(), derived.end(), [&](const Derived &x) { return x.dim == d; }))
      dims[d] = size;
  auto bound = [&](const Dim &e) {
    if (!e.sym.empty())
      return dims.count(e.sym) > 0;
    return std::all_of(e.factors.begin(), e.factors.end(),
                       [&](const std::string &f) { return dims.count(f) > 0; });
  };
  // Each round binds the derived dims whose other sides are bound; a round binding none ends it.
  for (bool progress = true; progress;) {
    progress = false;
    for (const Derived &d : derived)
      if (!dims.count(d.dim) && bound(d.from)) {
        dims[d.dim] = d.from.evaluate(dims);
        progress = true;
      }
  }
  for (const Derived &d : derived)
    dims.emplace(d.dim, size);
  return dims;
}

ValueId view_source(const Graph &g, ValueId v) {
  while (g[v].is_op() && op_info(g[v].op).cls == OpClass::View)
    v = g[v].args[0];
  return v;
}

} // namespace kfuse::ir
