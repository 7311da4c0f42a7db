// transposed_operands: a GEMM operand that is a transpose is read transposed by the GEMM.
//
//   matmul(transpose(a), b) -> matmul_tn(a, b)      a: [K, N], b: [K, M] -> [N, M]
//   matmul(a, transpose(b)) -> linear(a, b)         b: [M, K]
//
// Sound by definition: matmul_tn(a, b) = aᵀ b and linear(a, b) = a bᵀ. The backward graph's
// weight gradient gᵀ x (compiler/ir/vjp.cpp) then reads g where it lies, column-major, and no
// kernel stores a transposed copy; a transpose read by anything else stays (no kernel computes
// it, and the planner says so).
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"

namespace kfuse::passes {

using namespace ir;

Graph transposed_operands(const Graph &g, Mode) {
  return Rewriter(g, "transposed_operands").run([](Rewriter &r, ValueId old) -> ValueId {
    const Value &v = r.old_graph()[old];
    if (v.op != OpKind::Matmul)
      return -1;
    auto source = [&](ValueId operand) -> ValueId {
      const Value &t = r.old_graph()[operand];
      return t.is_op() && t.op == OpKind::Transpose ? t.args[0] : -1;
    };
    if (ValueId a = source(v.args[0]); a >= 0)
      return r.op(OpKind::MatmulTN, {r.map(a), r.map(v.args[1])});
    if (ValueId b = source(v.args[1]); b >= 0)
      return r.op(OpKind::Linear, {r.map(v.args[0]), r.map(b)});
    return -1;
  });
}

} // namespace kfuse::passes
