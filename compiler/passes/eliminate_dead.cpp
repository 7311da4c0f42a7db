// eliminate_dead: drops ops whose values reach neither an output nor an effect.
//
// Sound because ops are pure apart from effects (bn_update), which are roots here.
// Declarations are the pipeline's interface and always stay.
#include "compiler/passes/passes.h"
#include "compiler/passes/rewriter.h"

namespace kfuse::passes {

using namespace ir;

Graph eliminate_dead(const Graph &g, Mode) {
  return Rewriter(g, "eliminate_dead").run([](Rewriter &r, ValueId old) -> ValueId {
    return r.old_live(old) ? -1 : Rewriter::kDrop;
  });
}

} // namespace kfuse::passes
