// Checks of the tensors a Pipeline is given, beyond their shapes (which unify with the
// declarations in pipeline.cpp): what they hold (dtype, layout, alignment), where they live
// (device memory of the pipeline's device), and that nothing written overlaps another tensor.
// Every failure is a kfuse::Error naming `where` (the pipeline), the tensor, its shape and dtype.
#pragma once

#include "compiler/executable.h"
#include "kfuse/kfuse.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kfuse::rt {

// Whether two tensors have the same dtype, shape and row stride (a run's checks of one hold
// for the other, at its own pointer).
inline bool same_layout(const Tensor &a, const Tensor &b) {
  return a.dtype == b.dtype && a.row_stride == b.row_stride && a.shape == b.shape;
}

// A null or misaligned pointer, a dtype other than the declared one, an invalid DType value,
// or rows that are not contiguous. `declared` is the .kf type (its dtype is compared).
void check_layout(const std::string &where, const std::string &tensor,
                  const exec::TensorType &declared, const Tensor &t);

// Throws unless `t.data` is device memory (or managed memory) on `device` (an ordinal):
// host memory (pageable, pinned or mapped) and another device's memory are refused. Needs the
// driver.
void check_device_memory(const std::string &where, const std::string &tensor, const Tensor &t,
                         int device);

// A tensor's bytes, [begin, end), and how messages name it ("input 'x'", "output 0").
struct TensorBytes {
  std::string name;
  std::vector<int64_t> shape;
  uintptr_t begin = 0, end = 0;
};
TensorBytes bytes_of(std::string name, const Tensor &t); // contiguous (check_layout first)

// Throws when a tensor the pipeline writes (`written`: outputs and state) overlaps another
// written one or any of `read` (inputs and params): kernels would read what others write, in
// no defined order.
void check_no_aliasing(const std::string &where, const std::vector<TensorBytes> &written,
                       const std::vector<TensorBytes> &read);

} // namespace kfuse::rt
