// The typed op graph: a pipeline's declarations and op applications in SSA form.
//
// Values are stored in definition order, which is a topological order: an op's
// arguments always precede it. Passes never mutate a graph in place; they build a
// new one with GraphBuilder, so every stage of the pipeline can be printed and
// interpreted on its own.
#pragma once

#include "compiler/ir/ops.h"
#include "compiler/ir/types.h"

#include <map>
#include <string>
#include <vector>

namespace kfuse::ir {

using ValueId = int;

enum class ValueKind : uint8_t { Input, Param, State, Op };
// "input", "param", "state" (the .kf keyword), "op".
std::string_view value_kind_name(ValueKind k);

enum class Mode : uint8_t { Train, Eval };
// The random stream of a train-mode run's dropouts (templates/dropout.cuh): the Philox key and
// the counter word that successive runs advance.
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  bool operator==(const RngState &o) const { return seed == o.seed && offset == o.offset; }
};
std::string_view mode_name(Mode m);

struct Value {
  std::string name; // the name it was written with; unique names are made by the printer
  ValueKind kind = ValueKind::Op;
  OpKind op = OpKind::Add;                // meaningful when kind == Op
  std::vector<ValueId> args;              // when kind == Op
  std::map<std::string, AttrValue> attrs; // every attribute of op_info(op), defaults filled in
  TensorType type;                        // rank 0 for effects (bn_update)
  SourceLoc loc;
  // Provenance, for `kfuse plan`: the user op statements this value computes part of
  // ("batchnorm@9" = the batchnorm on line 9), and the passes that rewrote it.
  std::vector<std::string> origins;
  std::vector<std::string> rewrites;

  bool is_op() const { return kind == ValueKind::Op; }
  bool is_effect() const { return kind == ValueKind::Op && type.rank() == 0; }
  double attr(const std::string &key) const { return attrs.at(key).number; }
};

struct Graph {
  std::string name;
  std::vector<std::string> dims; // symbolic dims in declaration order
  std::vector<Value> values;
  std::vector<ValueId> outputs;
  SourceLoc loc; // of the `pipeline` keyword

  const Value &operator[](ValueId id) const { return values.at(static_cast<size_t>(id)); }
  ValueId find(const std::string &declared_name) const; // -1 if none (declarations only)
  std::vector<ValueId> declared(ValueKind kind) const;
  // For each value, the ops that read it.
  std::vector<std::vector<ValueId>> users() const;
};

// How messages name a value: "input 'x' (%0)", "'h' (%5, linear)", "%7 (rsqrt)".
std::string describe(const Graph &g, ValueId id);

// Whether `v` is a batch statistic: a column statistic (col_mean, col_var, col_sum) of the whole
// batch, which a pipeline that exchanges statistics across ranks (Options::batch_stats_ranks,
// PyTorch's SyncBatchNorm) takes over every rank's rows: train-mode batchnorm's mean and variance
// and the means its backward takes. One written `local=true` is of the rank's own rows alone, as
// a sum over the rows (a bias's or a batchnorm weight's gradient, which DDP averages itself)
// always is (passes/columns_from_reductions.cpp).
bool is_batch_statistic(const Value &v);

// `g` with every tensor as its matrix view (TensorType::matrix_view: f32[B, T, 768] becomes
// f32[B*T, 768]), an op along the last axis of a rank-3/4 tensor marked dim=-1, and every
// argument and output that is a view (reshape, ...) replaced by the value it views, which is
// the same matrix (compiler/ir/views.h): what the planner's partition and the code generator
// work on, value for value the same graph, its views read by nothing. It does not verify: it
// is not a program, only its kernels' view.
Graph matrix_view(const Graph &g);

// Appends values to a graph under construction, keeping definition order.
class GraphBuilder {
public:
  explicit GraphBuilder(std::string name, std::vector<std::string> dims = {});
  // Goes on building `g` (its values keep their ids).
  explicit GraphBuilder(Graph g) : g_(std::move(g)) {}
  ValueId declare(ValueKind kind, std::string name, TensorType type, SourceLoc loc = {});
  // Adds an op. Missing attributes get their defaults; the type is inferred from the args
  // (throws kfuse::ir::TypeError on a mismatch; callers with source locations report it).
  ValueId op(OpKind op, std::vector<ValueId> args, std::map<std::string, AttrValue> attrs = {},
             std::string name = {}, SourceLoc loc = {});
  Value &at(ValueId id) { return g_.values.at(static_cast<size_t>(id)); }
  const Graph &graph() const { return g_; }
  void add_output(ValueId id) { g_.outputs.push_back(id); }
  Graph finish() { return std::move(g_); }

private:
  Graph g_;
};

} // namespace kfuse::ir
