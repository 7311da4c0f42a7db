// Structural invariants of a graph: what every graph satisfies, whether the parser built
// it from source or a pass built it in code (with no source locations).
//
//   - every op's arguments precede it (definition order is a topological order);
//   - every op's recorded type is what inference gives for its arguments;
//   - every op has exactly the attributes of its op_info, each valid for its spec
//     (ir::check_attr: kind and range; the dims of an Extent or a Shape are declared), and they
//     satisfy the op's constraint between attributes (hardtanh: min_val < max_val);
//   - every tensor has rank 1 to 4 (effects rank 0), every symbolic extent is a declared
//     dim, every constant extent is in [1, kMaxExtent], and its sizes are within the size
//     model (ir::size_problem);
//   - the pipeline, its dims and its declarations have distinct .kf names;
//   - outputs exist and are not effects;
//   - the running statistics an op updates (train-mode batchnorm, bn_update) are states,
//     and each state is updated at most once.
#pragma once

#include "kfuse/error.h"

#include "compiler/ir/graph.h"

#include <stdexcept>

namespace kfuse::ir {

struct VerifyError : kfuse::Error {
  VerifyError(ValueId value_id, const std::string &message)
      : kfuse::Error(message), value(value_id) {}
  ValueId value; // the value at fault; -1 for the graph as a whole
};

// Throws VerifyError with a message that names the value at fault.
void verify(const Graph &g);

// The arguments an op updates in place, as {running_mean, running_var} indices:
// batchnorm's last two (train mode updates them), bn_update's first two; none for other
// ops. A state read anywhere in the graph sees its value at entry to the run.
std::vector<int> updated_args(const Value &v);

} // namespace kfuse::ir
