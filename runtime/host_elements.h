// Tensors on the host as the bytes of their element type, and back: what `kfuse run` uploads
// and downloads, and the .npy files it reads and writes. Values are rounded to the element
// type (ir::round_to: nearest, ties to even) on the way in; bf16 and f16 are their IEEE-style
// bit patterns, little-endian.
#pragma once

#include "compiler/ir/types.h"

#include <cstdint>
#include <vector>

namespace kfuse::rt {

std::vector<uint8_t> encode_elements(const std::vector<double> &values, ir::DType t);
// `count` elements of type t at `bytes`.
std::vector<double> decode_elements(const void *bytes, size_t count, ir::DType t);

} // namespace kfuse::rt
