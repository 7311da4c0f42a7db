#include "compiler/dim_range.h"

#include <fmt/format.h>

namespace kfuse {

std::optional<std::string> dim_value_problem(std::string_view name, int64_t value) {
  if (value >= 1 && value <= kMaxExtent)
    return std::nullopt;
  return fmt::format("dim {} = {} is out of range; dims are integers in [1, {}]", name, value,
                     kMaxExtent);
}

std::optional<std::string> dim_values_problem(const std::map<std::string, int64_t> &dims) {
  for (const auto &[name, value] : dims)
    if (auto problem = dim_value_problem(name, value))
      return problem;
  return std::nullopt;
}

} // namespace kfuse
