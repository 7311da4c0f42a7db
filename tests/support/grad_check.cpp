#include "tests/support/grad_check.h"

#include "compiler/ir/verifier.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kfuse::testing {
namespace {

// The loss Σ_o <w_o, out_o> of the forward run on `tensors` (copied: a train-mode run updates
// states), and Σ_o Σ_i |w_o[i] out_o[i]|, the scale of its rounding error.
struct Loss {
  double value = 0, magnitude = 0;
};

Loss loss(const ir::Graph &f, ir::Mode mode, const ir::DimBindings &dims, ir::TensorMap tensors,
          const std::vector<const ir::HostTensor *> &weights) {
  std::vector<ir::HostTensor> outs = ir::interpret(f, mode, dims, tensors, kGradCheckRng);
  Loss l;
  for (size_t o = 0; o < outs.size(); ++o)
    for (size_t i = 0; i < outs[o].data.size(); ++i) {
      l.value += weights[o]->data[i] * outs[o].data[i];
      l.magnitude += std::fabs(weights[o]->data[i] * outs[o].data[i]);
    }
  return l;
}

// The central difference of the loss along element i of tensor `name`, with step h and h/2
// combined by Richardson extrapolation, (4 D(h/2) - D(h)) / 3: its truncation error is O(h⁴).
double difference(const ir::Graph &f, ir::Mode mode, const ir::DimBindings &dims, ir::TensorMap t,
                  const std::vector<const ir::HostTensor *> &w, const std::string &name, size_t i,
                  double h) {
  const double x = t.at(name).data[i];
  auto central = [&](double step) {
    t[name].data[i] = x + step;
    double up = loss(f, mode, dims, t, w).value;
    t[name].data[i] = x - step;
    double down = loss(f, mode, dims, t, w).value;
    return (up - down) / (2 * step);
  };
  return (4 * central(h / 2) - central(h)) / 3;
}

} // namespace

double gradient_error(const std::vector<double> &analytic, const std::vector<double> &fd,
                      double noise, double backward_noise) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < analytic.size(); ++i) {
    diff += (analytic[i] - fd[i]) * (analytic[i] - fd[i]);
    norm += fd[i] * fd[i];
  }
  const double root_n = std::sqrt(double(analytic.size()));
  // Where the differences hold only rounding (a gradient zero as far as they can tell) the
  // backward's own rounding is allowed too; not elsewhere, where a rule that compares values
  // exactly (a maximum of recomputed values) errs by amounts that estimate would hide.
  if (std::sqrt(norm) <= noise * root_n)
    noise += backward_noise;
  double excess = std::max(0.0, std::sqrt(diff) - noise * root_n);
  if (excess == 0)
    return 0;
  return excess / std::max(std::sqrt(norm), std::numeric_limits<double>::min());
}

GradReport check_gradients(const ir::Graph &forward, ir::Mode mode, const ir::DimBindings &dims,
                           uint64_t seed, size_t per_tensor, double step) {
  GradReport report;
  report.result = ir::grad(forward, mode);
  const ir::GradResult &r = report.result;
  ir::verify(r.backward);
  const ir::TensorMap inputs = ir::random_tensors(forward, dims, seed);
  // The gradient inputs: random weights of the loss.
  ir::TensorMap weights = ir::random_tensors(r.backward, dims, seed + 1);
  std::vector<const ir::HostTensor *> w;
  for (size_t o = 0; o < forward.outputs.size(); ++o) {
    auto it = weights.find(r.grad_inputs[o]);
    if (it == weights.end()) { // read by no rule: the output does not depend on an input
      ir::HostTensor zero;
      zero.shape = ir::concrete_shape(forward[forward.outputs[o]].type, dims);
      zero.data.assign(static_cast<size_t>(zero.numel()), 0.0);
      it = weights.emplace(r.grad_inputs[o], std::move(zero)).first;
    }
    w.push_back(&it->second);
  }
  // The backward's gradients at `at`: forward with saves, then backward.
  auto analytic_at = [&](const ir::TensorMap &at, const std::vector<ir::HostTensor> &seeds) {
    ir::TensorMap run = at;
    std::vector<ir::HostTensor> outs =
        ir::interpret(ir::forward_with_saves(r), mode, dims, run, kGradCheckRng);
    ir::TensorMap backward_in = at;
    for (size_t o = 0; o < forward.outputs.size(); ++o)
      backward_in[r.grad_inputs[o]] = seeds[o];
    for (size_t s = 0; s < r.saved.size(); ++s) {
      // Declared with a view's product extents as axes of their own: the same elements.
      ir::HostTensor &t = backward_in[r.saved_names[s]] = outs.at(forward.outputs.size() + s);
      t.shape = ir::concrete_shape(r.backward[r.backward.find(r.saved_names[s])].type, dims);
    }
    return ir::interpret(r.backward, mode, dims, backward_in, kGradCheckRng);
  };
  std::vector<ir::HostTensor> seeds;
  for (const ir::HostTensor *t : w)
    seeds.push_back(*t);
  const std::vector<ir::HostTensor> grads = analytic_at(inputs, seeds);
  // The same with every f32 element and gradient input moved by up to 2^-36 of itself, by an
  // amount that varies from element to element: where a gradient is zero in exact arithmetic (a
  // bias before a centring normalization) the backward returns only its own rounding, amplified
  // by the condition number, which changes entirely between the two.
  auto move = [](std::vector<double> &data) {
    for (size_t i = 0; i < data.size(); ++i)
      data[i] += data[i] * 0x1p-36 * double((i * 2654435761u) % 1024 + 1) / 1024;
  };
  ir::TensorMap moved = inputs;
  for (auto &[name, t] : moved)
    if (forward[forward.find(name)].type.dtype == ir::DType::F32)
      move(t.data);
  for (ir::HostTensor &t : seeds)
    move(t.data);
  const std::vector<ir::HostTensor> grads_moved = analytic_at(moved, seeds);

  // Each loss evaluation rounds with relative error ~ (ops on a path) 2^-53 of its magnitude;
  // a difference quotient divides that by its step. 100 covers the chains tested.
  const double magnitude = loss(forward, mode, dims, inputs, w).magnitude;
  for (const auto &[id, index] : r.gradients) {
    const std::string &name = forward[id].name;
    const ir::HostTensor &analytic = grads.at(index);
    size_t n = inputs.at(name).data.size(), stride = std::max<size_t>(1, n / per_tensor);
    std::vector<double> a, fd;
    double noise = 0, spread = 0;
    for (size_t i = 0; i < n; i += stride) {
      double h = step * std::max(1.0, std::fabs(inputs.at(name).data[i]));
      fd.push_back(difference(forward, mode, dims, inputs, w, name, i, h));
      a.push_back(analytic.data.at(i));
      noise = std::max(noise, 100 * 0x1p-53 * std::max(1.0, magnitude) / (h / 2));
      spread = std::max(spread, std::fabs(analytic.data.at(i) - grads_moved.at(index).data.at(i)));
    }
    double e = gradient_error(a, fd, noise, 4 * spread);
    report.differences.push_back(fd);
    report.checked += a.size();
    if (e >= report.error) {
      report.error = e;
      report.worst = name;
    }
  }
  return report;
}

} // namespace kfuse::testing
