// Partition: the rewritten graph becomes an ordered list of kernels.
#pragma once

#include "compiler/plan/plan.h"

namespace kfuse::plan {

// Never fails on a verified graph: the worst case is one kernel per op. The rules, in the
// order they apply:
//   gemm_epilogue      a GEMM whose only reader is an elementwise chain stores the chain's
//                      end instead of the product (per-column affine, activations, ...)
//   stats_epilogue     column partials of a matrix a GEMM stores come from its epilogue
//   column_finalize    one per-feature kernel merges those partials, updates running
//                      stats and stores the vectors later kernels need (alpha, beta)
//   row_prologue       row ops (softmax / log_softmax, layernorm / rmsnorm / groupnorm /
//                      instancenorm, reductions along the feature axis, max_pool1d /
//                      avg_pool1d) apply the elementwise chain before them on load, so the
//                      pending affine map costs no pass of its own; a reduction's kernel
//                      stores only its [N, 1] (or [N]) result, a pool's its windows
//   elementwise        any other elementwise chain is one kernel, stored once
//   state_update_after_readers
//                      a running-statistics update whose states another kernel reads is a
//                      column kernel of its own (reads of a state see its entry value)
// Kernels are then ordered by their dependencies (reads after stores, merges after
// partials, state updates after the state's other readers), ties in build order.
// Column expressions that depend on parameters only are computed inline by every kernel
// that reads them (a few loads and an rsqrt per column).
// With `fuse` false every matrix value is stored by a kernel of its own (the unfused
// baseline `kfuse bench` compares against); column expressions stay inline.
Plan partition(const ir::Graph &g, ir::Mode mode, bool fuse = true);

} // namespace kfuse::plan
