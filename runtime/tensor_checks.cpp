#include "runtime/tensor_checks.h"

#include "runtime/driver.h"

#include <fmt/format.h>

namespace kfuse::rt {

namespace {

// "f16[3, 6]": the tensor as given.
std::string describe(const Tensor &t) {
  return fmt::format("{}{}", exec::dtype_name(t.dtype), exec::shape_text(t.shape));
}

} // namespace

void check_layout(const std::string &where, const std::string &tensor,
                  const exec::TensorType &declared, const Tensor &t) {
  if (static_cast<int>(t.dtype) < 0 || static_cast<int>(t.dtype) > static_cast<int>(DType::I64))
    throw Error(fmt::format("{}: tensor '{}' {}: dtype value {} is not a kfuse::DType", where,
                            tensor, exec::shape_text(t.shape), static_cast<int>(t.dtype)));
  if (!t.data)
    throw Error(fmt::format("{}: tensor '{}' is a null pointer", where, tensor));
  if (t.dtype != declared.dtype)
    throw Error(fmt::format("{}: tensor '{}' is {}, declared {}: kfuse takes {} tensors here",
                            where, tensor, describe(t), declared.str(),
                            exec::dtype_name(declared.dtype)));
  const int64_t element = exec::dtype_bytes(declared.dtype);
  if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(element) != 0)
    throw Error(fmt::format("{}: tensor '{}' {} at {} is not {}-byte aligned", where, tensor,
                            describe(t), t.data, element));
  // Rank 2 to 4: the rows of the [rows, F] view are contiguous when the stride is F.
  if (t.row_stride < 0 ||
      (t.row_stride != 0 && (t.shape.size() < 2 || t.row_stride != t.shape.back())))
    throw Error(
        fmt::format("{}: tensor '{}' {} has row stride {}; kfuse takes contiguous tensors only{}",
                    where, tensor, describe(t), t.row_stride,
                    t.shape.size() >= 2 ? fmt::format(" (row stride {} or 0)", t.shape.back())
                                        : " (row stride 0 for rank 1)"));
}

void check_device_memory(const std::string &where, const std::string &tensor, const Tensor &t,
                         int device) {
  Driver &d = Driver::get();
  // cuPointerGetAttributes (unlike the singular call) reports memory CUDA does not know as
  // type 0 instead of failing, so one call tells host from device memory.
  unsigned memory_type = 0;
  int ordinal = -1;
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void *values[] = {&memory_type, &ordinal};
  CUresult r =
      d.cuPointerGetAttributes(2, attributes, values, reinterpret_cast<CUdeviceptr>(t.data));
  if (r != CUDA_SUCCESS)
    d.check(r, fmt::format("cuPointerGetAttributes(tensor '{}')", tensor));
  if (memory_type == CU_MEMORYTYPE_HOST)
    throw Error(fmt::format(
        "{}: tensor '{}' {} at {} is host memory (pinned or mapped); kfuse needs device "
        "memory",
        where, tensor, describe(t), t.data));
  if (memory_type != CU_MEMORYTYPE_DEVICE && memory_type != CU_MEMORYTYPE_UNIFIED)
    throw Error(fmt::format(
        "{}: tensor '{}' {} at {} is not CUDA memory (host memory?); kfuse needs device memory",
        where, tensor, describe(t), t.data));
  if (ordinal != device)
    throw Error(fmt::format("{}: tensor '{}' {} is on device {}, the pipeline runs on device {}",
                            where, tensor, describe(t), ordinal, device));
}

TensorBytes bytes_of(std::string name, const Tensor &t) {
  size_t n = 1;
  for (int64_t e : t.shape)
    n *= static_cast<size_t>(e);
  uintptr_t begin = reinterpret_cast<uintptr_t>(t.data);
  return {std::move(name), t.shape, begin,
          begin + n * static_cast<size_t>(exec::dtype_bytes(t.dtype))};
}

void check_no_aliasing(const std::string &where, const std::vector<TensorBytes> &written,
                       const std::vector<TensorBytes> &read) {
  auto overlap = [](const TensorBytes &a, const TensorBytes &b) {
    return a.begin < b.end && b.begin < a.end;
  };
  auto fail = [&](const TensorBytes &out, const TensorBytes &other) {
    throw Error(
        fmt::format("{}: {} {} at {:#x} overlaps {} {} at {:#x}; outputs and state are written and "
                    "must not overlap any other tensor",
                    where, out.name, exec::shape_text(out.shape), out.begin, other.name,
                    exec::shape_text(other.shape), other.begin));
  };
  for (size_t i = 0; i < written.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      if (overlap(written[i], written[j]))
        fail(written[i], written[j]);
    for (const TensorBytes &r : read)
      if (overlap(written[i], r))
        fail(written[i], r);
  }
}

} // namespace kfuse::rt
