// .npy files, NumPy's array format (numpy.lib.format), for the tensors kfuse reads and
// writes: `kfuse run --inputs DIR` and `--save DIR`. Strict on purpose: dtype '<f4' or '<f2'
// (float16, read exactly into floats), C order, the whole file read and accounted for;
// anything else is a kfuse::Error naming the file and what it holds
// (np.save(path, a.astype(np.float32)) writes what is read here). bf16 has no standard .npy
// type: bf16 tensors are read from, and written as, float32 files (exact for bf16 values).
// Files are written as '<f4'.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kfuse::rt {

struct NpyArray {
  std::vector<int64_t> shape; // () for a scalar
  std::vector<float> data;    // row-major
};

// Versions 1.0, 2.0 and 3.0 of the format.
NpyArray read_npy(const std::string &path);
// Version 1.0; `data` holds the product of `shape` elements.
void write_npy(const std::string &path, const std::vector<int64_t> &shape,
               const std::vector<float> &data);

} // namespace kfuse::rt
