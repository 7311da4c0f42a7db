#include "python/src/grad.h"

#include "compiler/ir/grad.h"
#include "compiler/ir/printer.h"

#include <fmt/format.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <vector>

namespace nb = nanobind;

namespace kfuse::python {

nb::dict grad_dict(const ir::Graph &forward, const std::string &mode,
                   const std::vector<std::string> &frozen) {
  if (mode != "train" && mode != "eval")
    throw kfuse::Error(fmt::format("grad: mode must be 'train' or 'eval', got '{}'", mode));
  const ir::GradResult r = ir::grad(forward, mode == "train" ? ir::Mode::Train : ir::Mode::Eval,
                                    {frozen.begin(), frozen.end()});
  nb::dict d;
  d["backward"] = ir::print_kf(r.backward);
  d["forward"] = ir::print_kf(ir::forward_with_saves(r));
  d["grad_inputs"] = r.grad_inputs;
  d["saved"] = r.saved_names;
  d["gradients"] = ir::gradient_names(r);
  return d;
}

} // namespace kfuse::python
