// Host tensors as bf16/f16 bytes: the bit patterns PyTorch and CUDA use, rounded to nearest
// even, and decoded back exactly.
#include "runtime/host_elements.h"

#include "compiler/rounding.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

using namespace kfuse;

namespace {

std::vector<uint16_t> halves(const std::vector<uint8_t> &bytes) {
  std::vector<uint16_t> out(bytes.size() / 2);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

} // namespace

TEST_CASE("host elements: bf16 and f16 bit patterns, rounded to nearest even") {
  const std::vector<double> values = {1, -2, 3.140625, 1 + std::ldexp(1.0, -8), 65504, 0.1};
  // bf16: 1 + 2^-8 is a tie, kept at 1 (even); 65504 rounds to 65536; 0.1 to 0x3dcd.
  CHECK(halves(rt::encode_elements(values, DType::BF16)) ==
        std::vector<uint16_t>{0x3f80, 0xc000, 0x4049, 0x3f80, 0x4780, 0x3dcd});
  // f16: 1 + 2^-8 is exact; 0.1 is 0x2e66.
  CHECK(halves(rt::encode_elements(values, DType::F16)) ==
        std::vector<uint16_t>{0x3c00, 0xc000, 0x4248, 0x3c04, 0x7bff, 0x2e66});
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    std::vector<uint8_t> bytes = rt::encode_elements(values, t);
    std::vector<double> back = rt::decode_elements(bytes.data(), values.size(), t);
    for (size_t i = 0; i < values.size(); ++i)
      CHECK(back[i] == round_to_element(t, static_cast<float>(values[i])));
  }
  std::vector<double> special = {std::ldexp(1.0, -24), -std::ldexp(3.0, -24), 1e6, std::nan("")};
  std::vector<uint8_t> bytes = rt::encode_elements(special, DType::F16);
  CHECK(halves(bytes) == std::vector<uint16_t>{0x0001, 0x8003, 0x7c00, 0x7e00});
  std::vector<double> back = rt::decode_elements(bytes.data(), special.size(), DType::F16);
  CHECK(back[0] == std::ldexp(1.0, -24));
  CHECK(back[1] == -std::ldexp(3.0, -24));
  CHECK(std::isinf(back[2]));
  CHECK(std::isnan(back[3]));
}
