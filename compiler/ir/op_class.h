// The op-class traits: what each OpClass means to compiler/ir and to the planner, one entry per
// class: its name, its documented shape rule, the properties the planner and the code generator
// ask, its shape rule and its fp64 semantics. A new class is one entry here, its two functions
// (compiler/ir/class_rules.h) and its entry in the code generator's table
// (compiler/codegen/class_codegen.h); nothing else switches over classes.
#pragma once

#include "compiler/ir/class_rules.h"
#include "compiler/ir/ops.h"

#include <cstddef>
#include <iterator>
#include <string_view>

namespace kfuse::ir {

inline constexpr size_t kOpClassCount = static_cast<size_t>(OpClass::Constant) + 1;

// What the planner and the code generator ask of a class.
enum ClassProperty : unsigned {
  // Computed per element, inline, in whichever kernel reads it: never a kernel of its own.
  kInline = 1u << 0,
  // Needs whole rows: a row kernel (or a GEMM's row epilogue) is built around it, one pass.
  kRowOp = 1u << 1,
  // A row op whose result has its input's shape (softmax, the normalizations), so its pass can
  // also compute the elementwise ops after it.
  kNormalizesRows = 1u << 2,
  // Its ops have a ReduceFn and a template reducer (OpInfo::reduce, OpInfo::reducer).
  kReduces = 1u << 3,
};

struct ClassTraits {
  OpClass cls;
  std::string_view name;   // as the op reference and messages say it: "pointwise binary"
  std::string_view shapes; // DSL.md: the class's shape rule; "" where each op documents its own
  int scalar_operands;     // pointwise ops: the operands of their ScalarFn; 0: no ScalarFn
  unsigned properties;     // ClassProperty bits
  ShapeRule shape_rule;
  ClassFp64 fp64;

  constexpr bool pointwise() const { return scalar_operands > 0; }
  constexpr bool computed_inline() const { return properties & kInline; }
  constexpr bool row_op() const { return properties & kRowOp; }
  constexpr bool normalizes_rows() const { return properties & kNormalizesRows; }
  constexpr bool reduces() const { return properties & kReduces; }
};

namespace class_table {

inline constexpr std::string_view kSame = "any → same";

// In OpClass order (checked below).
inline constexpr ClassTraits kClasses[] = {
    {OpClass::Gemm, "matrix", "", 0, 0, shape_rule::gemm, fp64::gemm},
    {OpClass::Norm, "batch normalization", "", 0, 0, shape_rule::norm, fp64::norm},
    {OpClass::Binary, "pointwise binary", "broadcast → broadcast shape", 2, kInline,
     shape_rule::binary, fp64::binary},
    {OpClass::Unary, "pointwise unary", kSame, 1, kInline, shape_rule::unary, fp64::unary},
    {OpClass::Row, "row normalization", kSame, 0, kRowOp | kNormalizesRows, shape_rule::row,
     fp64::row},
    {OpClass::RowNorm, "feature normalization", "`x: [N, F]`, the others `[F]` → `[N, F]`", 0,
     kRowOp | kNormalizesRows, shape_rule::row_norm, fp64::row_norm},
    {OpClass::Reduce, "reduction",
     "`x: [N, F]` → `[N, 1]` (`dim=1`, `keepdim=true`), `[N]` (`dim=1`), `[1, F]` or `[F]` "
     "(`dim=0`)",
     0, kRowOp | kReduces, shape_rule::reduce, fp64::reduce},
    {OpClass::Pool, "feature pooling",
     "`x: [N, F]` → `[N, (F - kernel_size) / stride + 1]` (rounded down); `F` a number", 0,
     kRowOp | kReduces, shape_rule::pool, fp64::pool},
    {OpClass::PoolGrad, "pooling gradient", "", 0, kRowOp, shape_rule::pool_grad, fp64::pool_grad},
    {OpClass::NormGrad, "normalization gradient", "", 0, kRowOp | kNormalizesRows,
     shape_rule::norm_grad, fp64::norm_grad},
    {OpClass::Loss, "loss", "", 0, kRowOp, shape_rule::loss, fp64::loss},
    {OpClass::LossGrad, "loss gradient", "", 0, kRowOp, shape_rule::loss_grad, fp64::loss_grad},
    {OpClass::Random, "random pointwise", kSame, 0, kInline, shape_rule::random, fp64::random},
    {OpClass::View, "view", "", 0, 0, shape_rule::view, fp64::view},
    {OpClass::ColReduce, "column statistics", "", 0, 0, shape_rule::col_reduce, fp64::col_reduce},
    {OpClass::ColAffine, "column affine", "", 0, kInline, shape_rule::col_affine, fp64::col_affine},
    {OpClass::Transpose, "transpose", "`x: [N, M]` → `[M, N]`", 0, 0, shape_rule::transpose,
     fp64::transpose},
    {OpClass::Effect, "effect", "", 0, 0, shape_rule::effect, fp64::effect},
    {OpClass::Constant, "constant", "", 0, kInline, shape_rule::constant, fp64::constant},
};

constexpr bool in_enum_order() {
  for (size_t i = 0; i < std::size(kClasses); ++i)
    if (static_cast<size_t>(kClasses[i].cls) != i)
      return false;
  return std::size(kClasses) == kOpClassCount;
}
static_assert(in_enum_order(), "kClasses must list every OpClass once, in enum order");

} // namespace class_table

constexpr const ClassTraits &class_traits(OpClass c) {
  return class_table::kClasses[static_cast<size_t>(c)];
}

} // namespace kfuse::ir
