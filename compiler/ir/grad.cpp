#include "compiler/ir/grad.h"

#include "compiler/ir/op_class.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

namespace kfuse::ir {

// An op computed inline (pointwise, a per-column affine, a constant) costs a few FLOPs per
// element in whichever backward kernel reads its operands; saving it costs a write in the
// forward and a read in the backward of the whole tensor, and these kernels are bound by memory
// bandwidth: recomputed, as views are (free). Every other op costs more to recompute than its
// result costs to store and load — a GEMM 2·N·K·M FLOPs, a normalization, reduction, row op or
// transpose a whole pass over its operands — and is saved (but batchnorm, whose statistics its
// own rule reads: Reverse::batchnorm_from_statistics). Dropout is saved too: the backward's own
// dropout draws the forward's stream, and a graph draws each stream once.
bool save_for_backward(const Graph &forward, ValueId id) {
  const Value &v = forward[id];
  if (!v.is_op())
    return false; // a declaration is bound to the backward as it is
  OpClass cls = op_info(v.op).cls;
  if (cls == OpClass::Random)
    return true;
  return !(class_traits(cls).computed_inline() || cls == OpClass::View);
}

namespace {

// Forward values that depend on an input or a param (but those in `frozen`): only they get
// gradients. An i64 input holds class indices, which are not differentiable: it has none.
std::vector<bool> varying_values(const Graph &f, const std::set<std::string> &frozen = {}) {
  std::vector<bool> varies(f.values.size(), false);
  for (size_t i = 0; i < f.values.size(); ++i) {
    const Value &v = f.values[i];
    if (!v.is_op())
      varies[i] = (v.kind == ValueKind::Input || v.kind == ValueKind::Param) &&
                  is_float(v.type.dtype) && !frozen.count(v.name);
    else if (!v.is_effect())
      for (ValueId a : v.args)
        varies[i] = varies[i] || varies[static_cast<size_t>(a)];
  }
  return varies;
}

// `g` with its declarations first (in their order), then its ops, keeping only what its outputs
// read: the rules build forward values on first use, between the backward's ops.
Graph declarations_first_and_live(const Graph &g) {
  std::vector<bool> live(g.values.size(), false);
  for (ValueId o : g.outputs)
    live[static_cast<size_t>(o)] = true;
  for (size_t i = g.values.size(); i-- > 0;)
    if (live[i])
      for (ValueId a : g.values[i].args)
        live[static_cast<size_t>(a)] = true;
  Graph out = g;
  out.values.clear();
  std::vector<ValueId> moved(g.values.size(), -1);
  for (bool declarations : {true, false})
    for (size_t i = 0; i < g.values.size(); ++i)
      if (live[i] && g.values[i].is_op() != declarations) {
        moved[i] = static_cast<ValueId>(out.values.size());
        out.values.push_back(g.values[i]);
        for (ValueId &a : out.values.back().args)
          a = moved[static_cast<size_t>(a)];
      }
  for (ValueId &o : out.outputs)
    o = moved[static_cast<size_t>(o)];
  return out;
}

// `t` with each product extent of its rows (a view's `[B*T, F]`) as axes of its factors
// (`[B, T, F]`): a declaration's extents are dims and integers. nullopt beyond rank 4 or where
// the feature axis is a product.
std::optional<TensorType> declarable(const TensorType &t) {
  TensorType out{t.dtype, {}};
  for (size_t axis = 0; axis < t.shape.size(); ++axis) {
    const Dim &d = t.shape[axis];
    if (d.factors.empty()) {
      out.shape.push_back(d);
      continue;
    }
    if (axis + 1 == t.shape.size()) // the feature axis: its factors would be another matrix
      return std::nullopt;
    if (d.value != 1)
      out.shape.push_back(Dim::constant(d.value));
    for (const std::string &f : d.factors)
      out.shape.push_back(Dim::symbol(f));
  }
  if (out.rank() > 4)
    return std::nullopt;
  return out;
}

class Reverse {
public:
  Reverse(const Graph &f, Mode mode, const std::set<std::string> &frozen)
      : forward_(f), f_(forward_.graph()), mode_(mode), b_(f.name + "_backward", f.dims),
        in_backward_(f.values.size(), -1), varies_(varying_values(f)),
        wanted_(varying_values(f, frozen)), frozen_(frozen) {
    for (const Value &v : f.values)
      if (!v.is_op())
        names_.insert(v.name);
    for (const std::string &name : frozen) {
      const ValueId id = f.find(name);
      if (id < 0 || (f[id].kind != ValueKind::Input && f[id].kind != ValueKind::Param))
        throw GradError(
            fmt::format("grad: frozen '{}' is no input or param of pipeline '{}'", name, f.name));
      if (!is_float(f[id].type.dtype))
        throw GradError(fmt::format("grad: frozen '{}' of pipeline '{}' is {}, which has no "
                                    "gradient to freeze",
                                    name, f.name, f[id].type.str()));
    }
  }

  GradResult run() {
    for (size_t i = 0; i < f_.outputs.size(); ++i) {
      ValueId o = f_.outputs[i];
      const Value &v = f_[o];
      std::string name = unique("grad_" + (v.name.empty() ? fmt::format("out{}", i) : v.name));
      r_.grad_inputs.push_back(name);
      accumulate(o, declare_input(name, o));
    }
    for (size_t i = f_.values.size(); i-- > 0;)
      backward_of(static_cast<ValueId>(i));
    for (size_t i = 0; i < f_.values.size(); ++i) {
      auto it = grads_.find(static_cast<ValueId>(i));
      if (f_.values[i].is_op() || !varies_[i] || it == grads_.end() ||
          frozen_.count(f_.values[i].name))
        continue;
      r_.gradients.emplace_back(static_cast<ValueId>(i), b_.graph().outputs.size());
      b_.add_output(it->second);
    }
    if (b_.graph().outputs.empty())
      throw GradError(fmt::format("grad: no output of pipeline '{}' depends on an input or a "
                                  "param{} through differentiable ops",
                                  f_.name, frozen_.empty() ? "" : " that is not frozen"));
    r_.backward = declarations_first_and_live(b_.finish());
    r_.forward = f_;
    keep_read_saves();
    return std::move(r_);
  }

private:
  std::string unique(std::string base) {
    while (names_.count(base))
      base += "_";
    names_.insert(base);
    return base;
  }

  // An input named `name` of forward value `id`'s type: declared in its declarable shape and
  // viewed in its own.
  ValueId declare_input(const std::string &name, ValueId id) {
    const Value &v = f_[id];
    std::optional<TensorType> t = declarable(v.type);
    if (!t)
      throw GradError(fmt::format("grad: {} of type {} cannot be an input of the backward: a "
                                  "declaration's extents are dims and integers, and its rows "
                                  "as such need more than 4 axes or its features are a product",
                                  describe(f_, id), v.type.str()));
    ValueId in = b_.declare(ValueKind::Input, name, *t, v.loc);
    if (*t == v.type)
      return in;
    return b_.op(OpKind::Reshape, {in}, {{"shape", AttrValue(0, {}, v.type.shape)}});
  }

  // A gradient has its value's type, as in PyTorch (the rules' f32 constants promote).
  void accumulate(ValueId forward, ValueId g) {
    DType want = f_[forward].type.dtype;
    if (b_.graph()[g].type.dtype != want)
      g = b_.op(OpKind::Cast, {g}, {{"dtype", AttrValue(0, std::string(dtype_name(want)))}});
    auto [it, fresh] = grads_.emplace(forward, g);
    if (!fresh)
      it->second = b_.op(OpKind::Add, {it->second, g});
  }

  // Forward value `id` in the backward graph: declared, saved or recomputed.
  ValueId value(ValueId id) {
    const size_t i = static_cast<size_t>(id);
    if (in_backward_[i] < 0)
      in_backward_[i] = first_use(id); // assigned after: first_use may grow in_backward_
    return in_backward_[i];
  }

  ValueId first_use(ValueId id) {
    if (ValueId y = batchnorm_from_statistics(id); y >= 0)
      return y;
    const Value v = f_[id]; // a copy: recomputing an argument may grow the forward graph
    if (!v.is_op())
      return b_.declare(v.kind, v.name, v.type, v.loc);
    if (save_for_backward(f_, id)) {
      std::string name = unique("saved_" + (v.name.empty() ? fmt::format("v{}", id) : v.name));
      r_.saved.push_back(id);
      r_.saved_names.push_back(name);
      return declare_input(name, id);
    }
    std::vector<ValueId> args;
    for (ValueId a : v.args)
      args.push_back(value(a));
    return b_.op(v.op, args, v.attrs, v.name, v.loc);
  }

  // A batchnorm's result as the column affine of its input and statistics where its own rule
  // reads them (x̂ for the gradient of its input in train mode, of its weight in both modes; the
  // train-mode batch statistics the forward computes anyway): a few FLOPs in the backward kernel
  // that reads it, not a saved tensor of the input's size besides the input. -1 elsewhere, and
  // where compared_downstream: there the backward must read the forward's own values.
  ValueId batchnorm_from_statistics(ValueId id) {
    const Value &v = f_[id];
    if (!v.is_op() || v.op != OpKind::BatchNorm)
      return -1;
    const auto wanted = [&](size_t arg) { return wanted_[static_cast<size_t>(v.args[arg])]; };
    if (!((mode_ == Mode::Train && wanted(0)) || (v.args.size() == 5 && wanted(1))))
      return -1;
    if (compared_downstream(id))
      return -1;
    ValueId y = vjp::batchnorm_result(context(id, kNoGradient));
    r_.recomputed.push_back(id);
    return y;
  }

  // Whether an extremum or a comparison (its rule, or its recomputation) reads a value the
  // backward recomputes from `id` (through ops computed inline). The recomputed batchnorm result
  // differs from the forward's in its last bits (another order of operations, another kernel),
  // and such an op compares exactly: max's rule compares its argument with the saved maximum,
  // x - max(x) is 0 at the maximum only in the forward's own values.
  bool compared_downstream(ValueId id) const {
    std::vector<bool> reaches(f_.values.size(), false);
    reaches[static_cast<size_t>(id)] = true;
    for (size_t i = static_cast<size_t>(id) + 1; i < f_.values.size(); ++i) {
      const Value &v = f_.values[i];
      if (!v.is_op() || std::none_of(v.args.begin(), v.args.end(),
                                     [&](ValueId a) { return reaches[static_cast<size_t>(a)]; }))
        continue;
      switch (v.op) {
      case OpKind::Max:
      case OpKind::Min:
      case OpKind::Amax:
      case OpKind::Amin:
      case OpKind::MaxPool1d:
      case OpKind::Maximum:
      case OpKind::Minimum:
      case OpKind::Greater:
      case OpKind::GreaterEqual:
        return true;
      default:
        reaches[i] = !save_for_backward(f_, static_cast<ValueId>(i));
      }
    }
    return false;
  }

  // The context a rule of forward op `id` builds in, `grad` its result's gradient.
  VjpContext context(ValueId id, ValueId grad) {
    return VjpContext(
        b_, f_, id, mode_, grad, [this](ValueId a) { return value(a); },
        [this](OpKind k, std::vector<ValueId> a) { return forward_op(k, std::move(a)); });
  }

  // A value the forward computes for the backward (VjpContext::forward_op), once per op and
  // arguments; it has no gradient of its own.
  ValueId forward_op(OpKind k, std::vector<ValueId> args) {
    auto [it, fresh] = forward_ops_.emplace(std::make_pair(k, args), -1);
    if (fresh) {
      it->second = forward_.op(k, std::move(args));
      in_backward_.push_back(-1);
      varies_.push_back(false);
      wanted_.push_back(false);
    }
    return it->second;
  }

  void backward_of(ValueId id) {
    auto it = grads_.find(id);
    if (!f_[id].is_op() || !varies_[static_cast<size_t>(id)] || it == grads_.end())
      return;
    // Copies: a rule may add values to the forward graph (forward_op).
    const OpKind op = f_[id].op;
    const std::vector<ValueId> args = f_[id].args;
    const VjpContext c = context(id, it->second);
    std::vector<ValueId> dargs = vjp_rule(op)(c);
    if (dargs.size() != args.size())
      throw std::logic_error(fmt::format("grad: the rule of {} gave {} gradients for {} arguments",
                                         describe(f_, id), dargs.size(), args.size()));
    for (size_t i = 0; i < dargs.size(); ++i) {
      ValueId a = args[i];
      if (dargs[i] == kNoGradient || !varies_[static_cast<size_t>(a)])
        continue;
      if (b_.graph()[dargs[i]].type.shape != f_[a].type.shape)
        throw std::logic_error(fmt::format("grad: the rule of {} gave argument {} ({}) a gradient "
                                           "of shape {}",
                                           describe(f_, id), i + 1, f_[a].type.str(),
                                           b_.graph()[dargs[i]].type.str()));
      accumulate(a, dargs[i]);
    }
  }

  // Saves the backward dropped as dead are not saved.
  void keep_read_saves() {
    std::vector<ValueId> saved;
    std::vector<std::string> names;
    for (size_t i = 0; i < r_.saved.size(); ++i)
      if (r_.backward.find(r_.saved_names[i]) >= 0) {
        saved.push_back(r_.saved[i]);
        names.push_back(r_.saved_names[i]);
      }
    r_.saved = std::move(saved);
    r_.saved_names = std::move(names);
  }

  GraphBuilder forward_; // the forward, and the values rules ask it to compute (forward_op)
  const Graph &f_;
  Mode mode_;
  GraphBuilder b_;
  std::vector<ValueId> in_backward_;
  std::vector<bool> varies_;
  std::vector<bool> wanted_; // values whose gradient an output's gradient needs: not frozen
  const std::set<std::string> &frozen_;
  std::map<ValueId, ValueId> grads_;
  std::map<std::pair<OpKind, std::vector<ValueId>>, ValueId> forward_ops_;
  std::set<std::string> names_;
  GradResult r_;
};

} // namespace

GradResult grad(const Graph &forward, Mode mode, const std::set<std::string> &frozen) {
  return Reverse(forward, mode, frozen).run();
}

std::vector<std::string> gradient_names(const GradResult &r) {
  std::vector<std::string> names(r.gradients.size());
  for (const auto &[id, index] : r.gradients)
    names.at(index) = r.forward[id].name;
  return names;
}

Graph forward_with_saves(const GradResult &r) {
  Graph g = r.forward;
  g.outputs.insert(g.outputs.end(), r.saved.begin(), r.saved.end());
  return g;
}

} // namespace kfuse::ir
