#include "compiler/ir/types.h"

#include <fmt/format.h>

namespace kfuse::ir {

std::string_view dtype_name(DType t) {
  switch (t) {
  case DType::F32:
    return "f32";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    if (dtype_name(t) == s)
      return t;
  return std::nullopt;
}

std::string Dim::str() const { return is_symbolic() ? sym : fmt::format("{}", value); }

std::string TensorType::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + shape[i].str();
  return s + "]";
}

std::string TensorType::str() const { return std::string(dtype_name(dtype)) + shape_str(); }

} // namespace kfuse::ir
