#include "compiler/plan/planner.h"

#include "compiler/ir/verifier.h"
#include "compiler/plan/partition.h"
#include "compiler/plan/validate_plan.h"

#include <fmt/format.h>
#include <stdexcept>

namespace kfuse::plan {

Plan make_plan(const ir::Graph &g, ir::Mode mode,
               const std::function<void(const passes::Pass &, const ir::Graph &)> &after_each,
               bool fuse, int stats_ranks) {
  const auto &pipeline = fuse ? passes::pipeline() : passes::unfused_pipeline();
  ir::Graph rewritten =
      passes::run_pipeline(g, mode, pipeline, [&](const passes::Pass &p, const ir::Graph &out) {
        try {
          ir::verify(out);
        } catch (const ir::VerifyError &e) {
          throw std::logic_error(
              fmt::format("internal error: pass {} left an invalid graph: {}", p.name, e.what()));
        }
        if (after_each)
          after_each(p, out);
      });
  Plan p = partition(rewritten, mode, fuse, stats_ranks);
  validate_plan(p);
  return p;
}

} // namespace kfuse::plan
