// Reverse mode: the backward graph of a forward graph, an ordinary graph of ops of the table.
//
// grad runs on the graph as the user wrote it, before the planner's passes: every op there has
// PyTorch's meaning, so each rule (compiler/ir/vjp.h) is PyTorch's backward of that op, and the
// backward graph is a pipeline the same passes and planner can take. Train-mode batchnorm is
// one op there: its rule has the forward save the batch statistics it normalized with
// (col_mean / col_var of its input, which the forward computes anyway: GradResult::forward) and
// differentiates through them; its running-statistic updates (states) have no gradient.
//
// The backward graph's inputs: one gradient per forward output (`grad_<name>`), the forward
// values it reads that the forward saves (`saved_<name>`, see save_for_backward), and the
// forward's declarations it reads (by their own names). Its outputs: the gradient of each input
// and param that one reaches, in declaration order (GradResult::gradients says which); states
// get none. It is run in the forward's mode with the forward's random stream (RngState), so that
// its dropouts draw the forward's masks.
#pragma once

#include "compiler/ir/graph.h"
#include "compiler/ir/vjp.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kfuse::ir {

struct GradResult {
  Graph backward;
  // The forward graph the saves refer to: the one grad was given, with the values rules asked
  // it to compute for the backward appended (train-mode batchnorm's batch statistics).
  Graph forward;
  // The backward's gradient inputs, one per forward output, in output order.
  std::vector<std::string> grad_inputs;
  // The forward values the backward reads as inputs, and the names of those inputs.
  std::vector<ValueId> saved;
  std::vector<std::string> saved_names;
  // Forward values the cost rule would save that the backward rebuilds from what is saved
  // instead (a batchnorm's result from its input and statistics).
  std::vector<ValueId> recomputed;
  // (forward input or param, index of its gradient among the backward's outputs).
  std::vector<std::pair<ValueId, size_t>> gradients;
};

// The cost rule: whether the forward saves value `id` for the backward (true) or the backward
// recomputes it from its operands (false).
bool save_for_backward(const Graph &forward, ValueId id);

// Throws GradError naming an op whose gradient is needed and that has no rule. `frozen` names
// inputs and params whose gradients are not wanted (frozen parameters, inputs that need none):
// the backward computes none of what only they need, and the forward saves nothing for it. A
// name that is no float input or param of the forward throws GradError naming it.
GradResult grad(const Graph &forward, Mode mode, const std::set<std::string> &frozen = {});

// The name of the forward input or param each backward output is the gradient of, in output
// order (declaration order).
std::vector<std::string> gradient_names(const GradResult &r);

// GradResult::forward with the values the backward reads (GradResult::saved) as further outputs,
// after its own: a run of it gives the backward's saved inputs.
Graph forward_with_saves(const GradResult &r);

} // namespace kfuse::ir
