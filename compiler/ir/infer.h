// Shape and type inference: the result type of an op from its argument types.
#pragma once

#include "kfuse/error.h"

#include "compiler/ir/graph.h"

#include <stdexcept>

namespace kfuse::ir {

// A type error in an op application. `arg` is the index of the argument at fault (-1: the
// op as a whole), so a front end can point at the offending token.
struct TypeError : kfuse::Error {
  TypeError(int arg_index, const std::string &message)
      : kfuse::Error(message), arg(arg_index) {}
  int arg;
};

// Throws TypeError. Effects (bn_update) have rank-0 type.
TensorType infer_type(OpKind op, const std::vector<TensorType> &args,
                      const std::map<std::string, AttrValue> &attrs);

// Numpy-style broadcast of two shapes (each extent equal, or a constant 1); nullopt if they
// do not broadcast.
std::optional<std::vector<Dim>> broadcast(const std::vector<Dim> &a, const std::vector<Dim> &b);

} // namespace kfuse::ir
