// Element types, dimensions and tensor types of the kfuse IR.
#pragma once

#include "compiler/extent.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kfuse::ir {

// I64 holds class indices: a declared input that only cross_entropy's target reads (the op
// table's OpInfo::index_operand); no op computes one, and no param, state or output is one.
enum class DType : uint8_t { F32, F16, BF16, I64 };

std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view s);
// The types a value computed by an op (a `dtype=` attribute, a param, a state) may have.
bool is_float(DType t);
int64_t dtype_bytes(DType t); // 4, 2 or 8
// The type of a binary op between tensors of types a and b, as torch.result_type: the same
// type, else f32 (the wider float; bf16 with f16 gives f32 too, neither holds the other).
DType promote(DType a, DType b);
// x rounded to the nearest value of type t (ties to even) as a kernel stores it: first to
// fp32, where a kernel holds it, then to t. f32 values are left in fp64: the reference of an
// f32 result is its exact value; so are i64 ones, which are integers (an fp64 holds every
// class index, |x| < 2^53, exactly).
double round_to(DType t, double x);

// The size model. Every extent, and a tensor's rows (the product of its leading extents), is an
// integer in [1, kMaxExtent]: kernels index rows and features in int. Every product, element
// count and byte count is computed in int64 with overflow detection. A type's constant part is
// checked when the type is made (size_problem, at `check` with the declaration's or the op's
// location); dims are checked when a run or a query binds them (dim_value_problem), and a
// product of bound dims when it is evaluated (Dim::evaluate).
using kfuse::kMaxExtent; // compiler/extent.h

using kfuse::checked_add;
using kfuse::checked_mul;

// One extent of a tensor (compiler/extent.h): a constant, a dim or a product of dims.
using Dim = kfuse::Extent;

// Tensors have rank 1 to 4 (rank 0 is the type of an effect, which has no value). The last
// axis is the feature axis; the leading axes of a tensor of rank >= 2 are its rows.
struct TensorType {
  DType dtype = DType::F32;
  std::vector<Dim> shape;

  int rank() const { return static_cast<int>(shape.size()); }
  // The [rows, F] matrix the kernels and the planner work on: the leading axes of a rank-3/4
  // tensor flattened into one row extent (f32[B, T, 768] -> f32[B*T, 768]); rank 1 and 2 as
  // they are. Row-major storage makes both the same bytes.
  TensorType matrix_view() const;
  std::string str() const;       // "f32[N, 8192]"
  std::string shape_str() const; // "[N, 8192]"
  bool operator==(const TensorType &o) const { return dtype == o.dtype && shape == o.shape; }
  bool operator!=(const TensorType &o) const { return !(*this == o); }
};

// nullopt where a tensor of type `t` can exist, else the problem ("f32[...] has ... rows; the
// limit is 2147483647"): its constant extents and rows in [1, kMaxExtent], the constant part of
// its element and byte counts within int64. With dims, the rest is checked once they are bound.
std::optional<std::string> size_problem(const TensorType &t);

// The element count of `t` with its dims bound as in `dims` (every one must be), in int64;
// nullopt where it overflows.
std::optional<int64_t> element_count(const TensorType &t,
                                     const std::map<std::string, int64_t> &dims);

// Dims are checked with kfuse::dim_value_problem (compiler/extent.h).
using kfuse::dim_value_problem;
using kfuse::dim_values_problem;

// Line and column (1-based) in the source buffer a Diagnostics engine owns; 0 means unknown.
struct SourceLoc {
  uint32_t line = 0;
  uint32_t col = 0;
  bool known() const { return line != 0; }
};

} // namespace kfuse::ir
