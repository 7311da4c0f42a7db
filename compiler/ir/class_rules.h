// The per-class functions the op-class traits (compiler/ir/op_class.h) name: each class's shape
// rule (compiler/ir/infer.cpp) and fp64 semantics (compiler/ir/interpret_classes.cpp). Internal
// to compiler/ir: everyone else reaches them through class_traits().
#pragma once

#include "compiler/ir/interpreter.h"

#include <cstdint>
#include <vector>

namespace kfuse::ir {

// A class's shape rule: the result type of `op` applied to `args` (as many as the op takes, none
// an effect), before the size model checks it. Throws TypeError.
using ShapeRule = TensorType (*)(const OpInfo &op, const std::vector<TensorType> &args,
                                 const AttrMap &attrs);

namespace shape_rule {
TensorType gemm(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType norm(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType binary(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType unary(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType row(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType row_norm(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType reduce(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType pool(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType pool_grad(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType norm_grad(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType loss(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType loss_grad(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType random(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType view(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType col_reduce(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType col_affine(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType transpose(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType effect(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
TensorType constant(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs);
} // namespace shape_rule

// One op of a run as its class's fp64 semantics see it: the op, its computed arguments, and the
// run's mode, random stream and dim bindings. The interpreter has checked that the op's recorded
// type is what inference gives its arguments, so the semantics index by the argument shapes.
struct OpRun {
  const Graph &g;
  ValueId id;
  const Value &v;
  std::vector<const HostTensor *> args;
  Mode mode;
  RngState rng;
  const DimBindings &dims;
  Interpreter &interpreter;

  const HostTensor &arg(size_t i) const { return *args[i]; }
  // The op's result shape under the run's dims.
  std::vector<int64_t> shape() const { return concrete_shape(v.type, dims); }
  // Records `t` as the new value of `state` (Interpreter::record_update).
  void update(ValueId state, HostTensor t) const;
};

// A class's fp64 semantics: the op's value (empty for an effect, which only updates states).
// Throws InterpretError.
using ClassFp64 = HostTensor (*)(const OpRun &run);

namespace fp64 {
HostTensor gemm(const OpRun &run);
HostTensor norm(const OpRun &run);
HostTensor binary(const OpRun &run);
HostTensor unary(const OpRun &run);
HostTensor row(const OpRun &run);
HostTensor row_norm(const OpRun &run);
HostTensor reduce(const OpRun &run);
HostTensor pool(const OpRun &run);
HostTensor pool_grad(const OpRun &run);
HostTensor norm_grad(const OpRun &run);
HostTensor loss(const OpRun &run);
HostTensor loss_grad(const OpRun &run);
HostTensor random(const OpRun &run);
HostTensor view(const OpRun &run);
HostTensor col_reduce(const OpRun &run);
HostTensor col_affine(const OpRun &run);
HostTensor transpose(const OpRun &run);
HostTensor effect(const OpRun &run);
HostTensor constant(const OpRun &run);
} // namespace fp64

// A tensor of `shape`, every value 0.
HostTensor zeros(std::vector<int64_t> shape);

} // namespace kfuse::ir
