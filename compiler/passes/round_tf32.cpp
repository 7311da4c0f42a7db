// round_tf32: what precision tf32 makes of a weight that a GEMM on the Hopper mainloop reads,
// whose tensor cores would truncate it (they read the top 19 of its 32 bits):
//
//   linear(x, w) -> linear(x, round_tf32(w))     w a param of f32
//
// rounded to nearest as cuBLAS rounds its tf32 operands (compiler/ir/ops.cpp). The planner gives
// the rounding a kernel run once per bind; the mainloop rounds A in registers
// (templates/gemm_sm90.cuh) and a transposed copy is rounded by the kernel that writes it
// (select: TransposeSpec::round_tf32), so no operand reaches the tensor cores truncated but a B
// that is neither a param nor a transpose (an input or a computed value). Like autocast_bf16 it
// changes the values computed: lower() applies it before planning, and the interpreter rounds
// where the kernels do. A weight several GEMMs multiply is rounded once.
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"

namespace kfuse::passes {

using namespace ir;

Graph round_tf32(const Graph &g, Mode) {
  std::map<ValueId, ValueId> rounded; // new value -> its rounding
  return Rewriter(g, "round_tf32").run([&](Rewriter &r, ValueId old) -> ValueId {
    const Value &v = r.old_graph()[old];
    if (v.op != OpKind::Linear)
      return -1;
    const Value &w = r.old_graph()[v.args[1]];
    if (w.kind != ValueKind::Param || w.type.dtype != DType::F32)
      return -1;
    ValueId id = r.map(v.args[1]);
    auto it = rounded.find(id);
    if (it == rounded.end())
      it = rounded.emplace(id, r.op(OpKind::RoundTf32, {id})).first;
    std::vector<ValueId> args = {r.map(v.args[0]), it->second};
    if (v.args.size() == 3)
      args.push_back(r.map(v.args[2]));
    return r.op(v.op, args, v.attrs);
  });
}

} // namespace kfuse::passes
