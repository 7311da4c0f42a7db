// .npy files, NumPy's array format (numpy.lib.format), for the tensors kfuse reads and
// writes: `kfuse run --inputs DIR` and `--save DIR`. Strict on purpose: dtype '<f4', '<f2'
// (float16) or '<i8' (int64: class indices, for i64 tensors), each element held exactly, C
// order, the whole file read and accounted for; anything else is a kfuse::Error naming the file
// and what it holds (np.save(path, a.astype(np.float32)) writes what is read here). bf16 has no
// standard .npy type: bf16 tensors are read from, and written as, float32 files (exact for bf16
// values). Files are written as '<f4', or '<i8' for i64 tensors.
#pragma once

#include "kfuse/kfuse.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kfuse::rt {

struct NpyArray {
  std::vector<int64_t> shape; // () for a scalar
  DType dtype = DType::F32;   // the file's: F32, F16 or I64
  std::vector<double> data;   // row-major
};

// Versions 1.0, 2.0 and 3.0 of the format. An int64 element beyond ±2^53, which a double does
// not hold exactly, is an error.
NpyArray read_npy(const std::string &path);
// Version 1.0, as `dtype` (F32, or I64 for integral values); `data` holds the product of
// `shape` elements.
void write_npy(const std::string &path, const std::vector<int64_t> &shape,
               const std::vector<double> &data, DType dtype = DType::F32);

} // namespace kfuse::rt
