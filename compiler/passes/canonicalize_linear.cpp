// canonicalize_linear: linear(x, W, b) -> add(linear(x, W), b).
//
// Sound by definition: linear(x, W, b)[i, j] = sum_k x[i, k] W[j, k] + b[j]. Separating
// the bias makes it an ordinary per-feature add, which fold_affine merges with every other
// per-column affine map, so the GEMM itself is always a bare product.
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"

namespace kfuse::passes {

using namespace ir;

Graph canonicalize_linear(const Graph &g, Mode) {
  return Rewriter(g, "canonicalize_linear").run([](Rewriter &r, ValueId old) -> ValueId {
    const Value &v = r.old_graph()[old];
    if (v.op != OpKind::Linear || v.args.size() != 3)
      return -1;
    ValueId product = r.op(OpKind::Linear, {r.map(v.args[0]), r.map(v.args[1])});
    return r.op(OpKind::Add, {product, r.map(v.args[2])});
  });
}

} // namespace kfuse::passes
