// Batch statistics over several ranks' batches (kfuse::Options::batch_stats_ranks, PyTorch's
// SyncBatchNorm): a plan step after partition.
#pragma once

#include "compiler/plan/plan.h"

namespace kfuse::plan {

// Every exchanged Column kernel (Kernel::exchanged: the partitioner gives a matrix's batch
// statistics, ir::is_batch_statistic, a column kernel of their own) is preceded by a Summary
// kernel that merges the matrix's partials into this rank's per-feature (count, mean, M2); the
// run all-gathers those summaries from `ranks` ranks between the two, and the Column kernel
// merges the gathered ones in rank order (rule exchange_stats), so every rank computes the same
// statistics of the whole batch. Statistics that are `local` (a gradient's sum over the rows)
// stay the rank's own. A step of partition, after the kernels are ordered and before they are
// named. `ranks` >= 1; a plan without batch statistics (eval mode) is left unchanged but for
// stats_ranks.
void exchange_batch_stats(Plan &p, int ranks);

} // namespace kfuse::plan
