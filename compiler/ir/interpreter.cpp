#include "compiler/ir/interpreter.h"

#include "compiler/ir/infer.h"
#include "compiler/ir/op_class.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
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

// What random class indices an i64 input (read as a loss's target) are drawn from: [0, count),
// the classes of the logits read with it, and its op's ignore_index.
struct ClassIndices {
  int64_t count;
  double ignore_index;
};

// Class indices are drawn in [0, C), and one row in four after the first is the op's
// ignore_index: ignored rows are exercised, and a mean over the rows is defined.
std::map<ValueId, ClassIndices> class_indices(const Graph &g, const DimBindings &dims) {
  std::map<ValueId, ClassIndices> out;
  for (const Value &v : g.values)
    if (v.is_op() && op_info(v.op).index_operand >= 0) {
      const auto index = static_cast<size_t>(op_info(v.op).index_operand);
      const Dim &c = g[v.args[index - 1]].type.shape.back();
      out.emplace(v.args[index],
                  ClassIndices{concrete_extent(c, dims, "the classes"), v.attr("ignore_index")});
    }
  return out;
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
                         RngState rng, Rounding rounding)
    : g_(g), mode_(mode), rng_(rng), rounding_(rounding), dims_(std::move(dims)),
      declared_(g.values.size(), nullptr), values_(g.values.size()), done_(g.values.size(), false) {
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

void Interpreter::exchange(ValueId m, HostTensor every_rank) {
  exchanged_[m] = std::move(every_rank);
}

const HostTensor *Interpreter::exchanged(ValueId m) const {
  auto it = exchanged_.find(m);
  return it == exchanged_.end() ? nullptr : &it->second;
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
  if (rounding_ == Rounding::Declared)
    for (double &x : t.data)
      x = round_to(s.type.dtype, x);
  updates_[s.name] = std::move(t);
}

HostTensor Interpreter::output(ValueId id) const {
  HostTensor t = value(id);
  if (rounding_ == Rounding::Declared)
    for (double &x : t.data)
      x = round_to(g_[id].type.dtype, x);
  return t;
}

void Interpreter::eval(ValueId id) {
  if (id < 0 || static_cast<size_t>(id) >= g_.values.size())
    throw InterpretError(fmt::format("no value %{} in pipeline '{}'", id, g_.name));
  const Value &v = g_[id];
  if (!v.is_op())
    return; // declarations are bound by the constructor
  std::vector<TensorType> arg_types;
  std::vector<const HostTensor *> args;
  for (ValueId a : v.args) {
    if (!computed(a))
      throw InterpretError(fmt::format("cannot evaluate {}: its argument {} has not been computed",
                                       describe(g_, id), describe(g_, a)));
    arg_types.push_back(g_[a].type);
    args.push_back(&tensor(a));
  }
  // The class semantics index by the argument shapes without checking them: a graph whose
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
  if (rounding_ == Rounding::None &&
      ((v.op == OpKind::Cast && v.type.dtype != DType::I64) || v.op == OpKind::RoundTf32)) {
    values_[static_cast<size_t>(id)] = *args[0];
    done_[static_cast<size_t>(id)] = true;
    return;
  }
  // By class, so that a new op of an existing class needs nothing here.
  const OpRun run{g_, id, v, std::move(args), mode_, rng_, dims_, *this};
  values_[static_cast<size_t>(id)] = class_traits(op_info(v.op).cls).fp64(run);
  done_[static_cast<size_t>(id)] = true;
}

void OpRun::update(ValueId state, HostTensor t) const {
  interpreter.record_update(id, state, std::move(t));
}

std::vector<HostTensor> interpret(const Graph &g, Mode mode, const DimBindings &dims,
                                  TensorMap &tensors, RngState rng, Rounding rounding) {
  Interpreter in(g, mode, dims, tensors, rng, rounding);
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
  // the square root of a negative number; so must one a square root reads after adding a
  // constant (rsqrt(running_var + eps), as a backward graph spells eval-mode batchnorm).
  // Weights are scaled like PyTorch's Linear initialization (standard deviation
  // 1/sqrt(fan_in)), so products stay O(1) as in a real model; with unit weights a K=8192
  // product is ~90 and a following softmax turns fp32's last-bit differences into 1e-5.
  auto is_constant = [&](ValueId id) { return g[id].is_op() && g[id].op == OpKind::Constant; };
  std::set<ValueId> running_vars;
  std::map<ValueId, double> weight_scale;
  const std::map<ValueId, ClassIndices> classes = class_indices(g, dims);
  for (const Value &v : g.values) {
    if (v.is_op() && v.op == OpKind::BatchNorm)
      running_vars.insert(v.args.back());
    if (v.is_op() && v.op == OpKind::BnUpdate)
      running_vars.insert(v.args[1]);
    if (v.is_op() && (v.op == OpKind::Rsqrt || v.op == OpKind::Sqrt)) {
      ValueId a = v.args[0]; // through additions of one constant (the eps) to what it adds to
      while (g[a].is_op() && g[a].op == OpKind::Add &&
             is_constant(g[a].args[0]) != is_constant(g[a].args[1]))
        a = g[a].args[is_constant(g[a].args[0]) ? 1 : 0];
      if (!g[a].is_op())
        running_vars.insert(a);
    }
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
    } else if (auto c = classes.find(static_cast<ValueId>(i)); c != classes.end()) {
      for (size_t r = 0; r < t.data.size(); ++r)
        t.data[r] = r > 0 && rng.next() % 4 == 0
                        ? c->second.ignore_index
                        : static_cast<double>(rng.next() % static_cast<uint64_t>(c->second.count));
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
