// Reverse mode (compiler/ir/grad.h) for Python: the backward graph of a .kf and the forward
// that saves what it reads, both as .kf text that kfuse.Pipeline compiles like any other.
#pragma once

#include "compiler/ir/graph.h"

#include <nanobind/nanobind.h>

#include <string>
#include <vector>

namespace kfuse::python {

// The reverse mode of `forward` in `mode` ("train" | "eval"): {"backward": the backward graph
// as .kf, "forward": the forward with the saved values as further outputs as .kf,
// "grad_inputs": the backward's gradient inputs (one per forward output, in output order),
// "saved": the backward's inputs the forward's further outputs bind (in their order),
// "gradients": for each backward output, the forward input or param it is the gradient of}.
// `frozen`: inputs and params whose gradients are not wanted (ir::grad). A missing rule throws
// GradError (a kfuse::Error) naming the op.
nanobind::dict grad_dict(const ir::Graph &forward, const std::string &mode,
                         const std::vector<std::string> &frozen);

} // namespace kfuse::python
