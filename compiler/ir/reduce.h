// The fp64 reference semantics of the reductions (sum, mean, max, ..., var, std), one function
// per op, named by the op table (compiler/ir/ops.cpp). Each is PyTorch's definition evaluated
// in double over one slice of the reduced axis, NaN and infinities included. Their fp32 CUDA
// counterparts are in templates/row_reduce.cuh.
#pragma once

#include "compiler/ir/ops.h"

namespace kfuse::ir::reduce {

// Signature ReduceFn: x[0], x[stride], ..., x[(n - 1) * stride]; attributes in table order
// (dim, keepdim, and for var / std correction).
double sum(const double *x, int64_t n, int64_t stride, const double *a);
double mean(const double *x, int64_t n, int64_t stride, const double *a);
double max(const double *x, int64_t n, int64_t stride, const double *a); // NaN if any is NaN
double min(const double *x, int64_t n, int64_t stride, const double *a); // NaN if any is NaN
double logsumexp(const double *x, int64_t n, int64_t stride, const double *a);
double var(const double *x, int64_t n, int64_t stride, const double *a); // a[2]: correction
double std(const double *x, int64_t n, int64_t stride, const double *a);

} // namespace kfuse::ir::reduce
