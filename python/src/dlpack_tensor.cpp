#include "python/src/dlpack_tensor.h"

#include <fmt/format.h>

#include <cstdint>

namespace kfuse::python {
namespace {

// The DLPack ABI (dlpack.h, version 0.x: the unversioned capsule every producer offers).
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides; // in elements; null: C-contiguous
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(DLManagedTensor *);
};

enum : int32_t { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 };
enum : uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6
};

std::string dtype_text(DLDataType t) {
  const char *kind = t.code == kDLInt       ? "i"
                     : t.code == kDLUInt    ? "u"
                     : t.code == kDLFloat   ? "f"
                     : t.code == kDLBfloat  ? "bf"
                     : t.code == kDLComplex ? "c"
                     : t.code == kDLBool    ? "bool"
                                            : "dtype-code-";
  std::string text = t.code == kDLBool ? kind : fmt::format("{}{}", kind, t.bits);
  return t.lanes == 1 ? text : fmt::format("{}x{}", text, t.lanes);
}

std::string device_text(DLDevice d) {
  switch (d.device_type) {
  case kDLCPU:
    return "cpu";
  case kDLCUDA:
    return fmt::format("cuda:{}", d.device_id);
  case kDLCUDAHost:
    return "cuda pinned host memory";
  case kDLCUDAManaged:
    return fmt::format("cuda managed memory (device {})", d.device_id);
  default:
    return fmt::format("DLPack device type {}", d.device_type);
  }
}

} // namespace

void read_dlpack(PyObject *capsule, const std::string &where, const std::string &name, int *device,
                 Tensor &t) {
  if (!PyCapsule_IsValid(capsule, "dltensor"))
    throw Error(fmt::format(
        "{}: tensor '{}': expected an unused DLPack capsule (\"dltensor\") from __dlpack__()",
        where, name));
  auto *managed = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(capsule, "dltensor"));
  const DLTensor &dl = managed->dl_tensor;
  t.shape.assign(dl.shape, dl.shape + dl.ndim);
  t.row_stride = 0;
  // Formatted only for a message: a run reads its tensors with no string work.
  auto what = [&] {
    return fmt::format("{}: tensor '{}' {}[{}]", where, name, dtype_text(dl.dtype),
                       fmt::join(t.shape, ", "));
  };
  if (dl.dtype.lanes == 1 && dl.dtype.code == kDLFloat && dl.dtype.bits == 32)
    t.dtype = DType::F32;
  else if (dl.dtype.lanes == 1 && dl.dtype.code == kDLFloat && dl.dtype.bits == 16)
    t.dtype = DType::F16;
  else if (dl.dtype.lanes == 1 && dl.dtype.code == kDLBfloat && dl.dtype.bits == 16)
    t.dtype = DType::BF16;
  else if (dl.dtype.lanes == 1 && dl.dtype.code == kDLInt && dl.dtype.bits == 64)
    t.dtype = DType::I64;
  else
    throw Error(fmt::format("{}: kfuse takes f32 tensors (f16 and bf16 where a pipeline declares "
                            "them, int64 for i64 class indices)",
                            what()));
  if (dl.strides != nullptr && dl.ndim >= 1) {
    int last = dl.ndim - 1;
    if (dl.shape[last] > 1 && dl.strides[last] != 1)
      throw Error(fmt::format(
          "{} has strides ({}): the elements of a row are not contiguous; pass a contiguous "
          "tensor (.contiguous())",
          what(), fmt::join(dl.strides, dl.strides + dl.ndim, ", ")));
    // A rank-3/4 tensor is read as contiguous [rows, F]: every axis of extent > 1 must have
    // the C-contiguous stride (a transposed or sliced [B, T, F] view would be misread).
    if (dl.ndim > 2) {
      int64_t contiguous = 1;
      for (int a = last; a >= 0; --a) {
        if (dl.shape[a] > 1 && dl.strides[a] != contiguous)
          throw Error(fmt::format(
              "{} has strides ({}): a tensor of rank {} must be contiguous; pass a contiguous "
              "tensor (.contiguous())",
              what(), fmt::join(dl.strides, dl.strides + dl.ndim, ", "), dl.ndim));
        contiguous *= dl.shape[a];
      }
    }
    // A row stride of one row is meaningless: rows of a single row are contiguous. A zero row
    // stride (a broadcast, expanded tensor) is refused here: kfuse::Tensor's 0 means contiguous.
    if (dl.ndim == 2 && dl.shape[0] > 1) {
      if (dl.strides[0] == 0)
        throw Error(fmt::format(
            "{} has strides (0, {}): every row is the same memory (a broadcast); pass a "
            "contiguous tensor (.contiguous())",
            what(), dl.strides[1]));
      t.row_stride = dl.strides[0];
    }
  }
  if (dl.device.device_type != kDLCUDA && dl.device.device_type != kDLCUDAManaged)
    throw Error(fmt::format("{} is on {}; kfuse runs on CUDA devices (move it there, e.g. .cuda())",
                            what(), device_text(dl.device)));
  t.data = static_cast<char *>(dl.data) + dl.byte_offset;
  *device = dl.device.device_id;
}

} // namespace kfuse::python
