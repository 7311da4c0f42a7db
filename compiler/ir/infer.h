// Shape and type inference: the result type of an op from its argument types.
#pragma once

#include "kfuse/error.h"

#include "compiler/ir/graph.h"

#include <stdexcept>

namespace kfuse::ir {

// A type error in an op application. `arg` is the index of the argument at fault (-1: the
// op as a whole), so a front end can point at the offending token.
struct TypeError : kfuse::Error {
  TypeError(int arg_index, const std::string &message) : kfuse::Error(message), arg(arg_index) {}
  int arg;
};

// Throws TypeError. Effects (bn_update) have rank-0 type.
TensorType infer_type(OpKind op, const std::vector<TensorType> &args,
                      const std::map<std::string, AttrValue> &attrs);

// groupnorm: nullopt when its `groups` divides `features`, else the problem. Inference checks
// a constant feature count; the interpreter and the runtime check a dim name once bound.
std::optional<std::string> group_size_problem(const OpInfo &op,
                                              const std::map<std::string, AttrValue> &attrs,
                                              int64_t features);

// max_pool1d / avg_pool1d: the window step (stride, or kernel_size where stride is none) and
// the output width floor((features - kernel_size) / stride) + 1, 0 where no window fits.
int64_t pool_stride(const std::map<std::string, AttrValue> &attrs);
int64_t pool_width(const std::map<std::string, AttrValue> &attrs, int64_t features);

// Numpy-style broadcast of two shapes (each extent equal, or a constant 1); nullopt if they
// do not broadcast.
std::optional<std::vector<Dim>> broadcast(const std::vector<Dim> &a, const std::vector<Dim> &b);

} // namespace kfuse::ir
