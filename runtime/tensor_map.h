// TMA descriptors (CUtensorMap) for the tensor-map parameters of generated kernels, encoded
// through the driver (cuTensorMapEncodeTiled) and cached per parameter: a run whose pointer and
// extents match the last one reuses the encoded map.
#pragma once

#include "compiler/executable.h"

#include <cuda.h>

#include <cstdint>
#include <string>

namespace kfuse::rt {

struct CachedTensorMap {
  CUdeviceptr ptr = 0;
  int64_t rows = -1, inner = -1;
  int box_rows = 0; // a launch's variants (exec::Kernel::variants) differ in it
  CUtensorMap map;
};

// The map of `spec` over the row-major matrix at `ptr` (rows x inner, no padding), from `cache`
// when it was encoded for the same pointer, extents and box. `where` and `tensor` name the matrix
// in errors: TMA needs a 16-byte-aligned base and a row stride that is a multiple of 16 bytes.
const CUtensorMap &tensor_map(CachedTensorMap &cache, const exec::TensorMapSpec &spec,
                              CUdeviceptr ptr, int64_t rows, int64_t inner,
                              const std::string &where, const std::string &tensor);

} // namespace kfuse::rt
