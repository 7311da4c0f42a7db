// Partition: the rewritten graph becomes an ordered list of kernels.
#pragma once

#include "compiler/plan/plan.h"

namespace kfuse::plan {

// The most ops a kernel computes in one inline tree. NVRTC's compile time grows faster than
// linearly in a kernel's length, so a chain of tens of thousands of pointwise ops in one kernel
// compiles for minutes; split into kernels of at most this many ops, each compiles in well
// under a second, at the cost of one write and read of a matrix per split. Fused kernels of
// real chains hold tens of ops.
inline constexpr int64_t kMaxOpsPerKernel = 256;

// Never fails on a verified graph: the worst case is one kernel per op. An elementwise value
// is computed inline wherever it is read (a value read by several ops of one kernel is computed
// once per element there); it is stored only when it is returned, when a reader takes it from
// memory (a GEMM operand, batchnorm, column statistics), or when a row op's prologue would load
// a second matrix. The rules, in the order they apply:
//   gemm_epilogue      a GEMM whose uses all end, through elementwise ops, in one stored value
//                      stores that value instead of the product (per-column affine,
//                      activations, a DAG such as h * sigmoid(h)); a product read by a row op
//                      crosses a reduction and is stored
//   shared_value       a kernel computes a value two of its ops read once, in a register
//   stats_epilogue     column partials of a matrix a GEMM or an elementwise kernel computes
//                      come from that kernel (a GEMM's epilogue, an elementwise kernel's tiles)
//   summarized_only    an elementwise value only column statistics read is summarized by its
//                      kernel and never stored
//   column_finalize    one per-feature kernel merges those partials, updates running
//                      stats and stores the vectors later kernels need (alpha, beta)
//   row_prologue       row ops (softmax / log_softmax, layernorm / rmsnorm / groupnorm /
//                      instancenorm, reductions along the feature axis, max_pool1d /
//                      avg_pool1d) apply the elementwise chain before them on load, so the
//                      pending affine map costs no pass of its own; [N, 1] values broadcast
//                      along the row; a pool's kernel stores its windows
//   row_chain          a row op over the rows another row kernel reads is one more pass of
//                      that kernel, reading the earlier passes' [N, 1] results from registers
//                      (sum(exp(h - max(h))))
//   row_epilogue       a stored elementwise value of those rows and the row results is one
//                      more pass (exp(h - m) / s)
//   row_result         a per-row value of the row results alone ([N, 1], [N]) is computed
//                      and written once per row by the row kernel (-logsumexp(h))
//   row_tail           the elementwise ops after a softmax / log_softmax or a normalization
//                      (layernorm, rmsnorm, groupnorm) that read no other matrix, ending in one
//                      stored value, run in its pass on each of its values before the store;
//                      its own result is then not stored (silu(groupnorm(h)))
//   gemm_row_epilogue  a row kernel over the matrix a GEMM kernel stores, where one tile holds
//                      whole rows (at most kRowEpilogueCols features), runs in the GEMM's
//                      epilogue over the tile staged in shared memory, unless the GEMM writes
//                      column statistics or a kernel between them stores a value it reads
//   row_partials_epilogue
//                      a row kernel over a wider GEMM product whose passes are reductions (sum,
//                      mean, max, min, amax, amin, logsumexp, var, std) of elementwise values of
//                      its rows
//                      and per-row values of their results: the GEMM's epilogue writes each
//                      reduction's fp32 partial per (row, column slice) and the row kernel merges
//                      them, so the product is stored only where it is returned or another
//                      kernel reads it; not under the same conditions, nor where a pass needs
//                      whole rows (softmax, normalizations) or reads the row again
//                      after a reduction (h - max(h)), which the product's reason then names
//   elementwise        any other elementwise chain is one kernel, stored once
//                      (a value whose inline tree holds a quarter of kMaxOpsPerKernel ops
//                      is stored: it ends one kernel and the chain goes on in the next)
//   state_update_after_readers
//                      a running-statistics update whose states another kernel reads is a
//                      column kernel of its own (reads of a state see its entry value)
// A reduction's result is written only when it is returned or another kernel reads it.
// Kernels are then ordered by their dependencies (reads after stores, merges after
// partials, state updates after the state's other readers), ties in build order.
// Column expressions that depend on parameters only are computed inline by every kernel
// that reads them (a few loads and an rsqrt per column).
// With `fuse` false every matrix value is stored by a kernel of its own (the unfused
// baseline `kfuse bench` compares against); column expressions stay inline.
// Plan::stored_because says for each stored value which of these decided it.
// `stats_ranks` > 0: batch statistics are exchanged across that many ranks (exchange_stats.h),
// a step after the kernels are ordered.
Plan partition(const ir::Graph &g, ir::Mode mode, bool fuse = true, int stats_ranks = 0);

} // namespace kfuse::plan
