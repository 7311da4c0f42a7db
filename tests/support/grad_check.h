// The proof of reverse mode (compiler/ir/grad.h) by the fp64 interpreter: the backward graph's
// gradients against central finite differences of the forward graph, in float64.
#pragma once

#include "compiler/ir/grad.h"
#include "compiler/ir/interpreter.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kfuse::testing {

// The step of the finite differences, relative to max(1, |x|): small enough that a kink (relu
// at 0) is rarely within it, large enough that rounding stays far below the gradients.
inline constexpr double kStep = 1e-5;

// The random stream every run of a check draws (its dropouts' masks).
inline constexpr ir::RngState kGradCheckRng{0x5eed, 3};

struct GradReport {
  double error = 0;   // the largest gradient_error over the checked tensors
  std::string worst;  // the tensor it was found in
  size_t checked = 0; // elements compared
  std::vector<std::vector<double>> differences; // the finite differences, per checked tensor
  ir::GradResult result;
};

// max(0, ||analytic - fd|| - noise sqrt(n)) / ||fd||: the relative error beyond what rounding
// can explain, `noise` per element the finite differences' own, plus `backward_noise` (the
// backward's own) where ||fd|| <= noise sqrt(n); so that a gradient that is zero in exact
// arithmetic (a bias before a centring normalization) passes where both its difference quotient
// and its backward hold only rounding.
double gradient_error(const std::vector<double> &analytic, const std::vector<double> &fd,
                      double noise, double backward_noise = 0);

// For the loss Σ_o <w_o, out_o> over the forward's outputs with random weights w_o (the backward's
// gradient inputs): the backward graph's gradient of each input and param against central
// differences (Richardson-extrapolated from steps h and h/2, h = step max(1, |x|)) at up to
// `per_tensor` elements of each, every run in `mode` drawing the same random stream (dropout
// keeps its mask). The backward's rounding is estimated as how far its gradients move when every
// f32 element moves by 2^-36 of itself. Throws what grad, the verifier or the interpreter throw.
GradReport check_gradients(const ir::Graph &forward, ir::Mode mode, const ir::DimBindings &dims,
                           uint64_t seed, size_t per_tensor = 24, double step = kStep);

} // namespace kfuse::testing
