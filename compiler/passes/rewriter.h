// The one mechanism every pass rewrites with: copy a graph value by value into a new
// one, letting the pass replace any op by a small subgraph built from already-copied
// values. Declarations, outputs, names and provenance are carried over.
#pragma once

#include "compiler/ir/graph.h"

#include <functional>

namespace kfuse::passes {

class Rewriter {
public:
  static constexpr ir::ValueId kDrop = -2;

  Rewriter(const ir::Graph &g, std::string pass_name);

  // The value of the new graph that stands for `old` (already copied or replaced).
  ir::ValueId map(ir::ValueId old) const { return map_.at(static_cast<size_t>(old)); }
  const ir::Value &new_value(ir::ValueId id) const { return b_.graph()[id]; }
  const ir::Graph &old_graph() const { return g_; }
  // Number of live ops of the old graph that read `old` (+1 if it is an output). Dead
  // values an earlier pass left behind do not count, so they never block a fusion.
  int old_uses(ir::ValueId old) const { return uses_.at(static_cast<size_t>(old)); }
  // Whether `old` reaches an output or an effect.
  bool old_live(ir::ValueId old) const { return live_.at(static_cast<size_t>(old)); }

  // Adds an op to the new graph on behalf of the old value being rewritten: it inherits
  // that value's provenance and location, and records this pass.
  ir::ValueId op(ir::OpKind op, std::vector<ir::ValueId> args,
                 std::map<std::string, ir::AttrValue> attrs = {});
  ir::ValueId constant(double value, ir::DType dtype);
  // Moves the provenance of new value `from` into new value `into`, which computes `from`'s ops
  // as well (a merge): `from` is left without any, so it must be dead (read by nothing but the
  // value it merged into). Moving keeps a chain of n merges linear: each merged value's list
  // holds every statement before it. `into`'s first origin stays first (its own statement);
  // the order of the rest means nothing, and a statement may be listed twice.
  void merge_provenance(ir::ValueId into, ir::ValueId from);
  // If `id` (new graph) is a constant, its value.
  std::optional<double> constant_value(ir::ValueId id) const;

  // Runs the pass: `rewrite` gets each old op value and returns its replacement in the
  // new graph, -1 to copy it unchanged, or kDrop to leave it out (nothing may use it).
  // The replacement takes the old value's name when it has none.
  ir::Graph run(const std::function<ir::ValueId(Rewriter &, ir::ValueId old)> &rewrite);

private:
  const ir::Graph &g_;
  std::string pass_;
  ir::GraphBuilder b_;
  std::vector<ir::ValueId> map_;
  std::vector<int> uses_;
  std::vector<bool> live_;
  ir::ValueId current_ = -1;
};

} // namespace kfuse::passes
