// Tensors on the host as the bytes of their element type, and back: what `kfuse run` uploads
// and downloads, and the .npy files it reads and writes. Values are rounded to the element
// type (round_to_element: nearest, ties to even) on the way in; bf16 and f16 are their IEEE-style
// bit patterns, little-endian.
#pragma once

#include "kfuse/kfuse.h"

#include <cstdint>
#include <vector>

namespace kfuse::rt {

std::vector<uint8_t> encode_elements(const std::vector<double> &values, DType t);
// `count` elements of type t at `bytes`.
std::vector<double> decode_elements(const void *bytes, size_t count, DType t);

} // namespace kfuse::rt
