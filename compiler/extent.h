// One extent of a tensor and the range of a bound dim, shared by the IR (ir::Dim), the
// Executable (exec::Extent), the runtime and Python: kernels index rows and features in int, so
// every bound dim is an integer in [1, kMaxExtent], and every product of extents is computed
// in int64 with overflow detection. It holds no IR type, so the runtime uses it too.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kfuse {

inline constexpr int64_t kMaxExtent = 2147483647;

// nullopt where `value` is a valid value for dim `name`, else the problem. Every entry point
// that binds dims (the command line, Pipeline::dims/shape/output_shape/workspace_size, a run's
// tensors, tuning, Python) checks them with this one function.
std::optional<std::string> dim_value_problem(std::string_view name, int64_t value);
// The first of `dims` that dim_value_problem refuses; nullopt where all are valid.
std::optional<std::string> dim_values_problem(const std::map<std::string, int64_t> &dims);

// a * b and a + b in int64; nullopt where the result does not fit.
std::optional<int64_t> checked_mul(int64_t a, int64_t b);
std::optional<int64_t> checked_add(int64_t a, int64_t b);

// A constant, a symbolic dim (`dim N`) bound at run time, or a product of dims and a constant:
// the row count of a rank-3/4 tensor's matrix view (B*T).
struct Extent {
  std::string sym; // a dim name; empty for a constant or a product
  int64_t value = 0;
  // A product: these dim names (sorted) times `value`; empty otherwise. Written in .kf only
  // in a reshape's shape (`[B*T, 768]`); TensorType::matrix_view makes one for the rows.
  std::vector<std::string> factors;

  static Extent constant(int64_t v) { return Extent{{}, v, {}}; }
  static Extent symbol(std::string name) { return Extent{std::move(name), 0, {}}; }
  // The product of extents: a constant where all are, a dim name where one name remains.
  // Throws kfuse::Error where the constant part overflows int64 (ir::size_problem rules that
  // out for the extents of every type the IR holds).
  static Extent product(const std::vector<Extent> &extents);
  bool is_symbolic() const { return !sym.empty() || !factors.empty(); }
  // The extent under bound dims; throws std::out_of_range where a dim is unbound, and
  // kfuse::Error where a product of bound dims overflows int64.
  int64_t evaluate(const std::map<std::string, int64_t> &dims) const;
  std::string str() const; // "N", "8192", "B*T", "4*T"
  bool operator==(const Extent &o) const {
    return sym == o.sym && value == o.value && factors == o.factors;
  }
  bool operator!=(const Extent &o) const { return !(*this == o); }
};

// "[N, 8192]": extents as shapes print them.
std::string extents_text(const std::vector<Extent> &extents);

} // namespace kfuse
