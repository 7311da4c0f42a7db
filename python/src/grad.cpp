#include "python/src/grad.h"

#include "compiler/ir/grad.h"
#include "compiler/ir/printer.h"

#include <fmt/format.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <vector>

namespace nb = nanobind;

namespace kfuse::python {

nb::dict grad_dict(const ir::Graph &forward, const std::string &mode) {
  if (mode != "train" && mode != "eval")
    throw kfuse::Error(fmt::format("grad: mode must be 'train' or 'eval', got '{}'", mode));
  const ir::GradResult r = ir::grad(forward, mode == "train" ? ir::Mode::Train : ir::Mode::Eval);
  // grad lists the gradients in declaration order, which is their output order.
  std::vector<std::string> gradients(r.gradients.size());
  for (const auto &[id, index] : r.gradients)
    gradients.at(index) = forward[id].name;
  nb::dict d;
  d["backward"] = ir::print_kf(r.backward);
  d["forward"] = ir::print_kf(ir::forward_with_saves(r));
  d["grad_inputs"] = r.grad_inputs;
  d["saved"] = r.saved_names;
  d["gradients"] = gradients;
  return d;
}

} // namespace kfuse::python
