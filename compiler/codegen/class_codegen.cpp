#include "compiler/codegen/class_codegen.h"

#include "compiler/codegen/row_passes.h"
#include "compiler/ir/op_class.h"

#include <iterator>

namespace kfuse::codegen {
namespace {

using ir::OpClass;

// In OpClass order (checked below). Columns: row pass, keeps the row resident, last axis only,
// reads vector views.
constexpr ClassCodegen kClasses[] = {
    {OpClass::Gemm, &RowPasses::map, false, false, false},
    {OpClass::Norm, &RowPasses::map, false, false, false},
    {OpClass::Binary, &RowPasses::map, false, false, true},
    {OpClass::Unary, &RowPasses::map, false, false, true},
    {OpClass::Row, &RowPasses::softmax, true, true, false},
    {OpClass::RowNorm, &RowPasses::norm, true, false, false},
    {OpClass::Reduce, &RowPasses::reduce, false, true, false},
    {OpClass::Pool, &RowPasses::pool, false, false, false},
    {OpClass::PoolGrad, &RowPasses::pool_grad, false, false, false},
    {OpClass::NormGrad, &RowPasses::norm_grad, false, false, false},
    {OpClass::Loss, &RowPasses::loss, false, false, false},
    {OpClass::LossGrad, &RowPasses::loss_grad, false, false, false},
    {OpClass::Random, &RowPasses::map, false, false, true},
    {OpClass::View, nullptr, false, false, true},
    {OpClass::ColReduce, &RowPasses::map, false, false, false},
    {OpClass::ColAffine, &RowPasses::map, false, false, true},
    {OpClass::Transpose, nullptr, false, false, true},
    {OpClass::Effect, nullptr, false, false, false},
    {OpClass::Constant, &RowPasses::map, false, false, false},
};

constexpr bool in_enum_order() {
  for (size_t i = 0; i < std::size(kClasses); ++i)
    if (static_cast<size_t>(kClasses[i].cls) != i)
      return false;
  return std::size(kClasses) == ir::kOpClassCount;
}
static_assert(in_enum_order(), "kClasses must list every OpClass once, in enum order");

} // namespace

const ClassCodegen &class_codegen(OpClass c) { return kClasses[static_cast<size_t>(c)]; }

} // namespace kfuse::codegen
