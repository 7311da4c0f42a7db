#include "compiler/executable.h"

#include <fmt/format.h>

#include <climits>
#include <cmath>

namespace kfuse::exec {

int64_t dtype_bytes(DType t) {
  switch (t) {
  case DType::F32:
    return 4;
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::I64:
    return 8;
  }
  throw Error(fmt::format("{} is not a kfuse::DType value", static_cast<int>(t)));
}

const char *dtype_name(DType t) {
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
  throw Error(fmt::format("{} is not a kfuse::DType value", static_cast<int>(t)));
}

std::string shape_text(const std::vector<int64_t> &shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::string TensorType::str() const { return std::string(dtype_name(dtype)) + extents_text(shape); }

size_t TensorType::elements(const Dims &dims) const {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t extent = shape[i].evaluate(dims);
    if (i + 1 == shape.size())
      extent = (extent + row_multiple - 1) / row_multiple * row_multiple;
    std::optional<int64_t> v = checked_mul(n, extent);
    if (!v)
      throw Error(fmt::format("a {} tensor's element count overflows int64", str()));
    n = *v;
  }
  return static_cast<size_t>(n);
}

size_t TensorType::bytes(const Dims &dims) const {
  std::optional<int64_t> b = checked_mul(static_cast<int64_t>(elements(dims)), dtype_bytes(dtype));
  if (!b)
    throw Error(fmt::format("a {} tensor's byte count overflows int64", str()));
  return static_cast<size_t>(*b);
}

const char *kind_name(DeclaredTensor::Kind k) {
  switch (k) {
  case DeclaredTensor::Kind::Input:
    return "input";
  case DeclaredTensor::Kind::Param:
    return "param";
  case DeclaredTensor::Kind::State:
    return "state";
  }
  return "tensor";
}

int Interface::find(const std::string &declared_name) const {
  for (size_t i = 0; i < declared.size(); ++i)
    if (declared[i].name == declared_name)
      return static_cast<int>(i);
  return -1;
}

size_t Executable::slot(const Buffer &b) const {
  switch (b.home) {
  case Buffer::Home::Declared:
    return b.index;
  case Buffer::Home::Output:
    return interface.declared.size() + b.index;
  case Buffer::Home::PerBind:
    return interface.declared.size() + interface.outputs.size() + b.index;
  case Buffer::Home::Workspace:
    break;
  }
  throw Error("internal error: a workspace buffer has no slot");
}

std::optional<std::string> violation(const Constraint &c, const Dims &dims) {
  switch (c.kind) {
  case Constraint::Kind::RowsFitInt: { // counted in double: three dims of 2^31 overflow int64
    double rows = 1;
    for (const Extent &e : c.extents)
      rows *= static_cast<double>(e.evaluate(dims));
    if (rows <= INT_MAX)
      return std::nullopt;
    return fmt::format("{} = {:.0f} rows; kfuse takes at most {}", c.subject, rows, INT_MAX);
  }
  case Constraint::Kind::EqualRows: {
    const int64_t a = c.extents[0].evaluate(dims), b = c.extents[1].evaluate(dims);
    if (a == b)
      return std::nullopt;
    return fmt::format("{}, but the bound dims give {} = {} rows and {} = {}", c.subject,
                       c.extents[0].str(), a, c.extents[1].str(), b);
  }
  case Constraint::Kind::Divides: {
    const int64_t features = c.extents[0].evaluate(dims);
    if (c.divisor < 1 || std::fmod(static_cast<double>(features), c.divisor) == 0)
      return std::nullopt;
    return fmt::format("{} does not divide the {} features{}", c.subject, features, c.note);
  }
  case Constraint::Kind::MoreThanOne: {
    const Extent &rows = c.extents[0];
    const int64_t count = rows.evaluate(dims);
    if (count > 1)
      return std::nullopt;
    return fmt::format("{} needs more than 1 row, got {}{}", c.subject,
                       rows.is_symbolic() ? rows.str() + "=" : "", count);
  }
  }
  return std::nullopt;
}

} // namespace kfuse::exec
