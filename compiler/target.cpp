#include "compiler/target.h"

#include <fmt/format.h>

namespace kfuse {

namespace {

constexpr Precision kPrecisions[] = {Precision::FP32, Precision::TF32, Precision::BF16,
                                     Precision::FP32x3};

} // namespace

const char *precision_name(Precision p) {
  switch (p) {
  case Precision::FP32:
    return "fp32";
  case Precision::TF32:
    return "tf32";
  case Precision::BF16:
    return "bf16";
  case Precision::FP32x3:
    return "3xtf32";
  }
  throw Error(fmt::format("{} is not a kfuse::Precision value (FP32, TF32, BF16, FP32x3)",
                          static_cast<int>(p)));
}

std::optional<Precision> parse_precision(const std::string &name) {
  for (Precision p : kPrecisions)
    if (name == precision_name(p))
      return p;
  return std::nullopt;
}

void require_supported(Precision p) { precision_name(p); }

} // namespace kfuse
