#include "runtime/host_elements.h"

#include "compiler/executable.h"
#include "compiler/rounding.h"

#include <climits>
#include <cmath>
#include <cstring>

namespace kfuse::rt {

namespace {

uint16_t bf16_bits(double x) { // x is a bf16 value: the high half of its fp32 bits
  float f = static_cast<float>(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

uint16_t f16_bits(double x) { // x is an f16 value
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(x);
  if (std::isnan(x))
    return 0x7e00;
  if (std::isinf(x))
    return sign | 0x7c00;
  if (a < std::ldexp(1.0, -14)) // subnormal (or zero): multiples of 2^-24
    return sign | static_cast<uint16_t>(std::ldexp(a, 24));
  int e = std::ilogb(a);
  auto mantissa = static_cast<uint16_t>(std::ldexp(a, 10 - e) - 1024);
  return sign | static_cast<uint16_t>((e + 15) << 10) | mantissa;
}

double from_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

double from_f16(uint16_t h) {
  double sign = h & 0x8000 ? -1 : 1;
  int e = h >> 10 & 31, m = h & 1023;
  if (e == 31)
    return m ? std::nan("") : sign * HUGE_VAL;
  if (e == 0)
    return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

} // namespace

std::vector<uint8_t> encode_elements(const std::vector<double> &values, DType t) {
  std::vector<uint8_t> out(values.size() * static_cast<size_t>(exec::dtype_bytes(t)));
  for (size_t i = 0; i < values.size(); ++i) {
    if (t == DType::F32) {
      float f = static_cast<float>(values[i]);
      std::memcpy(out.data() + 4 * i, &f, 4);
      continue;
    }
    if (t == DType::I64) {        // class indices: integers, exact in a double below 2^53
      const double v = values[i]; // NaN or beyond int64: INT64_MIN, no class index either
      int64_t n = v >= -0x1p63 && v < 0x1p63 ? static_cast<int64_t>(v) : INT64_MIN;
      std::memcpy(out.data() + 8 * i, &n, 8);
      continue;
    }
    double r = round_to_element(t, values[i]);
    uint16_t h = t == DType::BF16 ? bf16_bits(r) : f16_bits(r);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

std::vector<double> decode_elements(const void *bytes, size_t count, DType t) {
  std::vector<double> out(count);
  const auto *p = static_cast<const uint8_t *>(bytes);
  for (size_t i = 0; i < count; ++i) {
    if (t == DType::F32) {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      out[i] = f;
      continue;
    }
    if (t == DType::I64) {
      int64_t n;
      std::memcpy(&n, p + 8 * i, 8);
      out[i] = static_cast<double>(n);
      continue;
    }
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    out[i] = t == DType::BF16 ? from_bf16(h) : from_f16(h);
  }
  return out;
}

} // namespace kfuse::rt
