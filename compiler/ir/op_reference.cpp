#include "compiler/ir/op_reference.h"

#include "compiler/ir/op_class.h"
#include "compiler/ir/ops.h"
#include "compiler/ir/printer.h"

#include <fmt/format.h>

#include <cmath>

namespace kfuse::ir {
namespace {

// `leaky_relu(x; negative_slope=0.01)`: operands, then attributes with their defaults.
std::string signature(const OpInfo &op) {
  std::vector<std::string> attrs;
  for (const AttrSpec &spec : op.attrs) {
    if (spec.required) {
      attrs.push_back(std::string(spec.name));
      continue;
    }
    switch (spec.kind) {
    case AttrKind::Choice:
      attrs.push_back(fmt::format("{}=\"{}\"", spec.name, choice_words(spec).at(0)));
      break;
    case AttrKind::OptNumber:
      attrs.push_back(fmt::format("{}=none", spec.name));
      break;
    case AttrKind::Bool:
      attrs.push_back(fmt::format("{}={}", spec.name, spec.number != 0 ? "true" : "false"));
      break;
    case AttrKind::Number:
    case AttrKind::Int:
    case AttrKind::Extent:
    case AttrKind::DType:
    case AttrKind::Shape:
      attrs.push_back(fmt::format("{}={}", spec.name, format_number(spec.number)));
      break;
    }
  }
  return fmt::format("`{}({}{}{})`", op.name, op.operands, attrs.empty() ? "" : "; ",
                     fmt::join(attrs, ", "));
}

// The op's own shape rule, else its class's.
std::string shapes(const OpInfo &op) {
  return std::string(op.shapes.empty() ? class_traits(op.cls).shapes : op.shapes);
}

std::string attributes(const OpInfo &op) {
  std::vector<std::string> parts;
  for (const AttrSpec &spec : op.attrs)
    parts.push_back(fmt::format("`{}`: {}", spec.name, attr_expectation(spec)));
  return parts.empty() ? "-" : fmt::format("{}", fmt::join(parts, "; "));
}

} // namespace

std::string op_reference_markdown(bool internal) {
  std::string s = "| op | class | arguments → result | attributes | semantics |\n"
                  "| --- | --- | --- | --- | --- |\n";
  for (const OpInfo &op : all_ops())
    if (op.internal == internal)
      s += fmt::format("| {} | {} | {} | {} | {} |\n", signature(op), op_class_name(op.cls),
                       shapes(op), attributes(op), op.semantics);
  return s;
}

} // namespace kfuse::ir
