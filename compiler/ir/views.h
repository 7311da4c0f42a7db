// Views: reshape, unsqueeze and squeeze give their argument's elements another shape.
//
// Kernels run every tensor as its [rows, F] matrix (TensorType::matrix_view). A view that keeps
// the feature axis (the last extent) and the row count is the same matrix in the same bytes,
// so it costs nothing: its value is its argument's buffer and no kernel computes it (the
// partition reads through it, compiler/plan/partition.cpp). Views that would change the feature
// axis or the row count are type errors; a row count that depends on how dims are bound
// (`[N, F]` viewed as `[B, T, F]`) is checked when a run binds them.
#pragma once

#include "compiler/ir/graph.h"

#include <map>
#include <optional>
#include <string>

namespace kfuse::ir {

// The result type of view op `op` of `x` with `attrs`; throws TypeError naming the op, the
// shapes and why the view is refused.
TensorType view_type(const OpInfo &op, const TensorType &x, const AttrMap &attrs);

// The number of rows of `t`: the product of its leading extents, 1 for rank 1.
Dim row_extent(const TensorType &t);

// Where a run's dims give view `v` (of `g`) another row count than its argument: the problem,
// naming the view and both shapes; nullopt when they agree.
std::optional<std::string> view_rows_problem(const Graph &g, ValueId v,
                                             const std::map<std::string, int64_t> &dims);

// Bindings of every dim of `g` at which its views keep their row counts: each dim bound to
// `size`, except a dim that a view equates with a product of others (`[N, F]` viewed as
// `[B, T, F]`: N = B*T), which is bound to that product. A dim the views determine only in a
// cycle stays at `size` (view_rows_problem then says which view a run at it fails).
std::map<std::string, int64_t> view_consistent_dims(const Graph &g, int64_t size);

// The value whose buffer `v` is: through every view to the first value that is none.
ValueId view_source(const Graph &g, ValueId v);

} // namespace kfuse::ir
