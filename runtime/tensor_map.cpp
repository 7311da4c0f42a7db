#include "runtime/tensor_map.h"

#include "kfuse/error.h"
#include "runtime/driver.h"

#include <fmt/format.h>

namespace kfuse::rt {

const CUtensorMap &tensor_map(CachedTensorMap &cache, const exec::TensorMapSpec &spec,
                              CUdeviceptr ptr, int64_t rows, int64_t inner,
                              const std::string &where, const std::string &tensor) {
  if (cache.ptr == ptr && cache.rows == rows && cache.inner == inner &&
      cache.box_rows == spec.box_rows)
    return cache.map;
  if (ptr % 16 != 0)
    throw Error(
        fmt::format("{}: tensor '{}' at {:#x} is not 16-byte aligned; the sm_90a GEMM reads "
                    "it with TMA, which needs that (allocate it aligned, or compile "
                    "for another --arch)",
                    where, tensor, ptr));
  const int64_t pitch = (inner + spec.row_multiple - 1) / spec.row_multiple * spec.row_multiple;
  const uint64_t row_bytes = static_cast<uint64_t>(pitch) * exec::dtype_bytes(spec.element);
  if (row_bytes % 16 != 0)
    throw Error(
        fmt::format("{}: tensor '{}' has rows of {} bytes; the sm_90a GEMM's TMA loads need "
                    "a multiple of 16",
                    where, tensor, row_bytes));
  Driver &driver = Driver::get();
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {row_bytes};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(spec.box_inner),
                             static_cast<cuuint32_t>(spec.box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUtensorMapDataType type = spec.element == DType::F32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : spec.element == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  driver.check(driver.cuTensorMapEncodeTiled(
                   &cache.map, type, 2, reinterpret_cast<void *>(ptr), dims, strides, box,
                   element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
               fmt::format("cuTensorMapEncodeTiled('{}', {} x {})", tensor, rows, inner));
  cache.ptr = ptr;
  cache.rows = rows;
  cache.inner = inner;
  cache.box_rows = spec.box_rows;
  return cache.map;
}

} // namespace kfuse::rt
