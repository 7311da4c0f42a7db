#include "compiler/extent.h"

#include "kfuse/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

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

std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    return std::nullopt;
  return r;
}

Extent Extent::product(const std::vector<Extent> &extents) {
  Extent p = constant(1);
  for (const Extent &d : extents) {
    if (!d.sym.empty())
      p.factors.push_back(d.sym);
    p.factors.insert(p.factors.end(), d.factors.begin(), d.factors.end());
    if (!d.sym.empty())
      continue;
    std::optional<int64_t> v = checked_mul(p.value, d.value);
    if (!v)
      throw Error(
          fmt::format("the product of the extents {} overflows int64", extents_text(extents)));
    p.value = *v;
  }
  // Sorted, so that equal products compare equal (T*B is B*T).
  std::sort(p.factors.begin(), p.factors.end());
  if (p.factors.size() == 1 && p.value == 1)
    return symbol(p.factors.front());
  return p;
}

int64_t Extent::evaluate(const std::map<std::string, int64_t> &dims) const {
  if (!sym.empty())
    return dims.at(sym);
  int64_t n = value;
  for (const std::string &f : factors) {
    std::optional<int64_t> v = checked_mul(n, dims.at(f));
    if (!v) {
      std::string at;
      for (const std::string &name : factors)
        at += fmt::format("{}{}={}", at.empty() ? "" : ", ", name, dims.at(name));
      throw Error(fmt::format("extent {} overflows int64 at {}", str(), at));
    }
    n = *v;
  }
  return n;
}

std::string Extent::str() const {
  if (!sym.empty())
    return sym;
  if (factors.empty())
    return fmt::format("{}", value);
  return fmt::format("{}{}", value == 1 ? "" : fmt::format("{}*", value), fmt::join(factors, "*"));
}

std::string extents_text(const std::vector<Extent> &extents) {
  std::string s = "[";
  for (size_t i = 0; i < extents.size(); ++i)
    s += (i ? ", " : "") + extents[i].str();
  return s + "]";
}

} // namespace kfuse
