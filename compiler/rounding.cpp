#include "compiler/rounding.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kfuse {

double round_significand(double x, int digits, int min_exp, double max) {
  if (x == 0 || !std::isfinite(x))
    return x;
  int e = std::max(std::ilogb(x), min_exp);
  double quantum = std::ldexp(1.0, e - (digits - 1));
  double r = std::nearbyint(x / quantum) * quantum;
  return std::fabs(r) > max ? std::copysign(std::numeric_limits<double>::infinity(), x) : r;
}

double round_to_element(DType t, double x) {
  switch (t) {
  case DType::F32:
    return x;
  case DType::F16: // 11 significant bits, exponents from -14, largest 65504
    return round_significand(static_cast<float>(x), 11, -14, 65504.0);
  case DType::BF16: // fp32's exponent range with 8 significant bits
    return round_significand(static_cast<float>(x), 8, -126, 0x1.FEp127);
  case DType::I64: // class indices are integers: nothing to round
    return x;
  }
  return x;
}

} // namespace kfuse
