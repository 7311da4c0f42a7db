#include "compiler/ir/types.h"

#include "compiler/rounding.h"
#include "kfuse/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace kfuse::ir {

std::string_view dtype_name(DType t) {
  switch (t) {
  case DType::F32:
    return "f32";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::I64:
    return "i64";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I64})
    if (dtype_name(t) == s)
      return t;
  return std::nullopt;
}

bool is_float(DType t) { return t != DType::I64; }

int64_t dtype_bytes(DType t) { return t == DType::I64 ? 8 : t == DType::F32 ? 4 : 2; }

DType promote(DType a, DType b) { return a == b ? a : DType::F32; }

double round_to(DType t, double x) {
  switch (t) {
  case DType::F32:
    return x;
  case DType::F16:
    return round_to_element(kfuse::DType::F16, x);
  case DType::BF16:
    return round_to_element(kfuse::DType::BF16, x);
  case DType::I64:
    return x;
  }
  return x;
}

TensorType TensorType::matrix_view() const {
  if (rank() <= 2)
    return *this;
  return {dtype, {Dim::product({shape.begin(), shape.end() - 1}), shape.back()}};
}

std::string TensorType::shape_str() const { return extents_text(shape); }

std::string TensorType::str() const { return std::string(dtype_name(dtype)) + shape_str(); }

namespace {

// The constant factor of an extent: its value, a product's constant, 1 for a dim name.
int64_t constant_factor(const Dim &d) { return d.sym.empty() ? d.value : 1; }

} // namespace

std::optional<std::string> size_problem(const TensorType &t) {
  for (const Dim &d : t.shape)
    if (!d.is_symbolic() && (d.value < 1 || d.value > kMaxExtent))
      return fmt::format("{} has the extent {}; extents are integers in [1, {}]", t.str(), d.value,
                         kMaxExtent);
  if (t.shape.empty()) // an effect
    return std::nullopt;
  // With dims, these are the constant factors: the counts are at least that (dims are >= 1).
  bool symbolic = false;
  std::string rows_text;
  std::optional<int64_t> rows = 1;
  for (size_t a = 0; a + 1 < t.shape.size(); ++a) {
    symbolic = symbolic || t.shape[a].is_symbolic();
    rows_text += (a ? "*" : "") + t.shape[a].str();
    rows = rows ? checked_mul(*rows, constant_factor(t.shape[a])) : std::nullopt;
  }
  if (!rows || *rows > kMaxExtent)
    return fmt::format("{} has {} rows (the product of its leading extents){}; kfuse takes at "
                       "most {}",
                       t.str(), rows_text,
                       symbolic && rows ? fmt::format(", at least {}", *rows) : "", kMaxExtent);
  // Rows and the last extent's constant are each at most kMaxExtent: elements fit int64.
  symbolic = symbolic || t.shape.back().is_symbolic();
  const int64_t elements = *rows * constant_factor(t.shape.back());
  if (!checked_mul(elements, dtype_bytes(t.dtype)))
    return fmt::format("{} has {}{} elements of {} bytes: more bytes than int64 holds ({})",
                       t.str(), symbolic ? "at least " : "", elements, dtype_bytes(t.dtype),
                       std::numeric_limits<int64_t>::max());
  return std::nullopt;
}

std::optional<int64_t> element_count(const TensorType &t,
                                     const std::map<std::string, int64_t> &dims) {
  std::optional<int64_t> n = 1;
  for (const Dim &d : t.shape) {
    n = n ? checked_mul(*n, d.sym.empty() ? d.value : dims.at(d.sym)) : std::nullopt;
    for (const std::string &f : d.factors)
      n = n ? checked_mul(*n, dims.at(f)) : std::nullopt;
  }
  return n;
}

} // namespace kfuse::ir
