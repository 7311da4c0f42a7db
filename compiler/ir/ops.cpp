#include "compiler/ir/ops.h"

namespace kfuse::ir {

const std::vector<OpInfo> &all_ops() {
  static const std::vector<OpInfo> ops = {
      {OpKind::Linear, "linear", OpClass::Gemm, 2, 3, {}, false},
      {OpKind::Matmul, "matmul", OpClass::Gemm, 2, 2, {}, false},
      {OpKind::BatchNorm,
       "batchnorm",
       OpClass::Norm,
       3,
       5,
       {{"eps", AttrKind::Number, 1e-5}, {"momentum", AttrKind::Number, 0.1}},
       false},
      {OpKind::Add, "add", OpClass::Binary, 2, 2, {}, false},
      {OpKind::Sub, "sub", OpClass::Binary, 2, 2, {}, false},
      {OpKind::Mul, "mul", OpClass::Binary, 2, 2, {}, false},
      {OpKind::Div, "div", OpClass::Binary, 2, 2, {}, false},
      {OpKind::Relu, "relu", OpClass::Unary, 1, 1, {}, false},
      {OpKind::Gelu, "gelu", OpClass::Unary, 1, 1, {}, false},
      {OpKind::Sigmoid, "sigmoid", OpClass::Unary, 1, 1, {}, false},
      {OpKind::Tanh, "tanh", OpClass::Unary, 1, 1, {}, false},
      {OpKind::Silu, "silu", OpClass::Unary, 1, 1, {}, false},
      {OpKind::Softmax, "softmax", OpClass::Row, 1, 1, {{"dim", AttrKind::Int, std::nullopt}}, false},
      {OpKind::LogSoftmax,
       "log_softmax",
       OpClass::Row,
       1,
       1,
       {{"dim", AttrKind::Int, std::nullopt}},
       false},
      {OpKind::ColMean, "col_mean", OpClass::ColReduce, 1, 1, {}, true},
      {OpKind::ColVar, "col_var", OpClass::ColReduce, 1, 1, {}, true},
      {OpKind::Rsqrt, "rsqrt", OpClass::Unary, 1, 1, {}, true},
      {OpKind::ColAffine, "col_affine", OpClass::ColAffine, 3, 3, {}, true},
      {OpKind::BnUpdate,
       "bn_update",
       OpClass::Effect,
       4,
       4,
       {{"momentum", AttrKind::Number, std::nullopt}, {"count", AttrKind::Extent, std::nullopt}},
       true},
      {OpKind::Constant, "constant", OpClass::Constant, 0, 0, {{"value", AttrKind::Number, std::nullopt}, {"dtype", AttrKind::DType, std::nullopt}},
       true},
  };
  return ops;
}

const OpInfo &op_info(OpKind k) { return all_ops().at(static_cast<size_t>(k)); }

std::optional<OpKind> op_by_name(std::string_view name) {
  for (const OpInfo &op : all_ops())
    if (op.name == name)
      return op.kind;
  return std::nullopt;
}

} // namespace kfuse::ir
