// The range of a bound dim, shared by the compiler, the runtime and Python: kernels index rows
// and features in int, so every extent is an integer in [1, kMaxExtent]. It holds no IR type,
// so the runtime checks dims with it too.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace kfuse {

inline constexpr int64_t kMaxExtent = 2147483647;

// nullopt where `value` is a valid value for dim `name`, else the problem. Every entry point
// that binds dims (the command line, Pipeline::dims/shape/output_shape/workspace_size, a run's
// tensors, tuning, Python) checks them with this one function.
std::optional<std::string> dim_value_problem(std::string_view name, int64_t value);
// The first of `dims` that dim_value_problem refuses; nullopt where all are valid.
std::optional<std::string> dim_values_problem(const std::map<std::string, int64_t> &dims);

} // namespace kfuse
