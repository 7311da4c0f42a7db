#include "compiler/ir/types.h"

#include "compiler/rounding.h"

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
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    if (dtype_name(t) == s)
      return t;
  return std::nullopt;
}

int64_t dtype_bytes(DType t) { return t == DType::F32 ? 4 : 2; }

DType promote(DType a, DType b) { return a == b ? a : DType::F32; }

double round_to(DType t, double x) {
  switch (t) {
  case DType::F32:
    return x;
  case DType::F16:
    return round_to_element(kfuse::DType::F16, x);
  case DType::BF16:
    return round_to_element(kfuse::DType::BF16, x);
  }
  return x;
}

Dim Dim::product(const std::vector<Dim> &extents) {
  Dim p = constant(1);
  for (const Dim &d : extents) {
    if (!d.sym.empty())
      p.factors.push_back(d.sym);
    p.factors.insert(p.factors.end(), d.factors.begin(), d.factors.end());
    if (d.sym.empty())
      p.value *= d.value;
  }
  // Sorted, so that equal products compare equal (T*B is B*T).
  std::sort(p.factors.begin(), p.factors.end());
  if (p.factors.size() == 1 && p.value == 1)
    return symbol(p.factors.front());
  return p;
}

int64_t Dim::evaluate(const std::map<std::string, int64_t> &dims) const {
  if (!sym.empty())
    return dims.at(sym);
  int64_t n = value;
  for (const std::string &f : factors)
    n *= dims.at(f);
  return n;
}

std::string Dim::str() const {
  if (!sym.empty())
    return sym;
  if (factors.empty())
    return fmt::format("{}", value);
  return fmt::format("{}{}", value == 1 ? "" : fmt::format("{}*", value), fmt::join(factors, "*"));
}

TensorType TensorType::matrix_view() const {
  if (rank() <= 2)
    return *this;
  return {dtype, {Dim::product({shape.begin(), shape.end() - 1}), shape.back()}};
}

std::string TensorType::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + shape[i].str();
  return s + "]";
}

std::string TensorType::str() const { return std::string(dtype_name(dtype)) + shape_str(); }

} // namespace kfuse::ir
