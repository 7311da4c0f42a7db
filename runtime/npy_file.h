// .npy files, NumPy's array format (numpy.lib.format), for the f32 tensors kfuse reads and
// writes: `kfuse run --inputs DIR` and `--save DIR`. Strict on purpose: dtype '<f4' only,
// C order, the whole file read and accounted for; anything else is a kfuse::Error naming the
// file and what it holds (np.save(path, a.astype(np.float32)) writes what is read here).
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
