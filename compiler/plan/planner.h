// The planner, top to bottom: the pass pipeline, verified after every pass, then the
// partition into kernels.
#pragma once

#include "compiler/passes/passes.h"
#include "compiler/plan/plan.h"

namespace kfuse::plan {

// `after_each` (if set) sees the graph after every pass (`--dump-after-each-pass`).
// `fuse` false plans the unfused baseline: lowering only, one kernel per matrix op.
// `stats_ranks` > 0 exchanges batch statistics across that many ranks (exchange_stats.h).
// The plan is validated (validate_plan.h) before it is returned.
Plan make_plan(const ir::Graph &g, ir::Mode mode,
               const std::function<void(const passes::Pass &, const ir::Graph &)> &after_each = {},
               bool fuse = true, int stats_ranks = 0);

} // namespace kfuse::plan
