// Element types, dimensions and tensor types of the kfuse IR.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kfuse::ir {

enum class DType : uint8_t { F32, F16, BF16 };

std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view s);
int64_t dtype_bytes(DType t); // 4 or 2
// The type of a binary op between tensors of types a and b, as torch.result_type: the same
// type, else f32 (the wider float; bf16 with f16 gives f32 too, neither holds the other).
DType promote(DType a, DType b);
// x rounded to the nearest value of type t (ties to even) as a kernel stores it: first to
// fp32, where a kernel holds it, then to t. f32 values are left in fp64: the reference of an
// f32 result is its exact value.
double round_to(DType t, double x);

// One extent of a tensor: a constant, or a symbolic dim (`dim N`) bound at run time.
struct Dim {
  std::string sym; // empty for a constant
  int64_t value = 0;

  static Dim constant(int64_t v) { return Dim{{}, v}; }
  static Dim symbol(std::string name) { return Dim{std::move(name), 0}; }
  bool is_symbolic() const { return !sym.empty(); }
  std::string str() const;
  bool operator==(const Dim &o) const { return sym == o.sym && value == o.value; }
  bool operator!=(const Dim &o) const { return !(*this == o); }
};

// Tensors have rank 1 or 2 (rank 0 is the type of an effect, which has no value).
struct TensorType {
  DType dtype = DType::F32;
  std::vector<Dim> shape;

  int rank() const { return static_cast<int>(shape.size()); }
  std::string str() const;       // "f32[N, 8192]"
  std::string shape_str() const; // "[N, 8192]"
  bool operator==(const TensorType &o) const { return dtype == o.dtype && shape == o.shape; }
  bool operator!=(const TensorType &o) const { return !(*this == o); }
};

// Line and column (1-based) in the source buffer a Diagnostics engine owns; 0 means unknown.
struct SourceLoc {
  uint32_t line = 0;
  uint32_t col = 0;
  bool known() const { return line != 0; }
};

} // namespace kfuse::ir
