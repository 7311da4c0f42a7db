// k_major_operands: every GEMM as a linear, whose operands are both K-major (the rows of A and
// of B run along K), which is what the Hopper mainloop reads:
//
//   matmul(a, b)    -> linear(a, transpose(b))              b: [K, N] -> [N, K]
//   matmul_tn(a, b) -> linear(transpose(a), transpose(b))   a: [K, M], b: [K, N]
//
// and a transpose of a transpose is the matrix itself, so the backward graph's
// matmul(transpose(g), x) becomes linear(transpose(g), transpose(x)) and
// matmul(a, transpose(b)) becomes linear(a, b). Sound by definition: linear(a, b) = a bᵀ. Each
// remaining transpose is a kernel that writes its matrix transposed (once per bind where it
// reads only params, a weight). A cast of a transpose becomes the transpose of the cast, so
// the GEMM's operand is the transposed copy itself. Not in the pipeline: lower() applies it
// for targets whose GEMMs run on the Hopper mainloop (the SIMT and mma.sync ones read either
// layout, and transposed copies would only cost them memory traffic).
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"

namespace kfuse::passes {

using namespace ir;

namespace {

// The operand `old` as a K-major matrix of the new graph: itself, or where `transpose` (the
// GEMM multiplies by its transpose: a matmul's B, a matmul_tn's A) its transpose.
ValueId k_major(Rewriter &r, ValueId old, bool transpose) {
  const Graph &g = r.old_graph();
  const Value &v = g[old];
  auto is_transpose = [&](ValueId id) { return g[id].is_op() && g[id].op == OpKind::Transpose; };
  if (v.is_op() && v.op == OpKind::Cast && is_transpose(v.args[0])) {
    ValueId cast = r.op(OpKind::Cast, {r.map(g[v.args[0]].args[0])}, v.attrs);
    return transpose ? cast : r.op(OpKind::Transpose, {cast});
  }
  if (transpose && is_transpose(old))
    return r.map(v.args[0]);
  return transpose ? r.op(OpKind::Transpose, {r.map(old)}) : r.map(old);
}

} // namespace

Graph k_major_operands(const Graph &g, Mode) {
  return Rewriter(g, "k_major_operands").run([](Rewriter &r, ValueId old) -> ValueId {
    const Value &v = r.old_graph()[old];
    if (v.op != OpKind::Matmul && v.op != OpKind::MatmulTN)
      return -1;
    ValueId a = k_major(r, v.args[0], v.op == OpKind::MatmulTN);
    return r.op(OpKind::Linear, {a, k_major(r, v.args[1], true)});
  });
}

} // namespace kfuse::passes
