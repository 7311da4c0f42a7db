// Reverse mode (compiler/ir/grad.h) for Python: the backward graph of a .kf and the forward
// that saves what it reads, both as .kf text that kfuse.Pipeline compiles like any other.
#pragma once

#include "compiler/ir/graph.h"

#include <nanobind/nanobind.h>

#include <string>

namespace kfuse::python {

// The reverse mode of `forward` in `mode` ("train" | "eval"): {"backward": the backward graph
// as .kf, "forward": the forward with the saved values as further outputs as .kf,
// "grad_inputs": the backward's gradient inputs (one per forward output, in output order),
// "saved": the backward's inputs the forward's further outputs bind (in their order),
// "gradients": for each backward output, the forward input or param it is the gradient of}.
// A missing rule throws GradError (a kfuse::Error) naming the op.
nanobind::dict grad_dict(const ir::Graph &forward, const std::string &mode);

} // namespace kfuse::python
