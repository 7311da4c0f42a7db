// autocast_bf16: what `--precision bf16` means for f32 tensors, as torch.autocast(bfloat16)
// runs a linear, except that results stay f32:
//
//   linear(x, W, b) -> add(cast(linear(cast(x, bf16), cast(W, bf16)), f32), b)
//   matmul(x, W)    -> cast(matmul(cast(x, bf16), cast(W, bf16)), f32)
//
// Only GEMMs of f32 operands change; every other op (epilogues, statistics, reductions) and
// every output keeps its f32 type. The bias is added in fp32 after the product, as the GEMM
// epilogue adds it. Unlike the other passes this one changes the values computed (the
// operands lose bits): lower() applies it before planning, and the result is the graph that
// defines the pipeline, so the reference interpreter rounds exactly where the kernels do and
// the planner's passes are proved against it. A value several GEMMs multiply is cast once.
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"

namespace kfuse::passes {

using namespace ir;

Graph autocast_bf16(const Graph &g, Mode) {
  std::map<ValueId, ValueId> rounded; // new value -> its bf16 cast
  return Rewriter(g, "autocast_bf16").run([&](Rewriter &r, ValueId old) -> ValueId {
    const Value &v = r.old_graph()[old];
    if (op_info(v.op).cls != OpClass::Gemm || r.old_graph()[v.args[0]].type.dtype != DType::F32)
      return -1;
    auto to_bf16 = [&](ValueId operand) {
      ValueId id = r.map(operand);
      auto it = rounded.find(id);
      if (it == rounded.end())
        it = rounded.emplace(id, r.op(OpKind::Cast, {id}, {{"dtype", {0, "bf16"}}})).first;
      return it->second;
    };
    ValueId product = r.op(v.op, {to_bf16(v.args[0]), to_bf16(v.args[1])});
    ValueId result = r.op(OpKind::Cast, {product}, {{"dtype", {0, "f32"}}});
    return v.args.size() == 3 ? r.op(OpKind::Add, {result, r.map(v.args[2])}) : result;
  });
}

} // namespace kfuse::passes
