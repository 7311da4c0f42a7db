#include "python/src/program.h"

#include "compiler/ir/ops.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace nb = nanobind;

namespace kfuse::python {

namespace {

// An extent as Python sees it: an int for a constant, the dim's name, or a product as the .kf
// writes it ("B*T", "4*T": a reshape's shape, or the type of a view).
nb::object extent_object(const ir::Dim &d) {
  if (!d.is_symbolic())
    return nb::int_(d.value);
  return nb::str(d.str().c_str());
}

nb::list extents_list(const std::vector<ir::Dim> &dims) {
  nb::list out;
  for (const ir::Dim &d : dims)
    out.append(extent_object(d));
  return out;
}

nb::object attr_object(const ir::AttrSpec &spec, const ir::AttrValue &a) {
  switch (spec.kind) {
  case ir::AttrKind::Number:
    return nb::float_(a.number);
  case ir::AttrKind::Int:
    return nb::int_(static_cast<int64_t>(a.number));
  case ir::AttrKind::Bool:
    return nb::bool_(a.number != 0);
  case ir::AttrKind::OptNumber:
    // PyTorch's None is held as the spec's infinite default.
    return std::isinf(a.number) ? nb::none() : nb::object(nb::float_(a.number));
  case ir::AttrKind::Extent:
    return extent_object(a.shape.front());
  case ir::AttrKind::DType:
  case ir::AttrKind::Choice:
    return nb::str(a.dim.c_str());
  case ir::AttrKind::Shape: // -1 (inferred) stays the constant -1
    return extents_list(a.shape);
  }
  throw std::logic_error("an attribute kind the program dict does not convert");
}

std::string_view attr_kind_name(ir::AttrKind kind) {
  switch (kind) {
  case ir::AttrKind::Number:
    return "number";
  case ir::AttrKind::Int:
    return "int";
  case ir::AttrKind::Extent:
    return "extent";
  case ir::AttrKind::DType:
    return "dtype";
  case ir::AttrKind::Choice:
    return "choice";
  case ir::AttrKind::OptNumber:
    return "optional number";
  case ir::AttrKind::Bool:
    return "bool";
  case ir::AttrKind::Shape:
    return "shape";
  }
  throw std::logic_error("an attribute kind without a name");
}

// The operands as documented ("x, weight?, bias?"), each name with its '?' where optional.
std::vector<std::string> documented_operands(const ir::OpInfo &info) {
  std::vector<std::string> out;
  std::string_view rest = info.operands;
  while (!rest.empty()) {
    size_t comma = rest.find(", ");
    out.emplace_back(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 2);
  }
  return out;
}

// The operand each of `args` operands binds: optional operands are given in their documented
// order, so that batchnorm's 3 operands are x, running_mean and running_var.
nb::list bound_operands(const ir::OpInfo &info, size_t args) {
  std::vector<std::string> documented = documented_operands(info);
  size_t optional = 0;
  for (const std::string &o : documented)
    optional += o.back() == '?';
  size_t present = args - (documented.size() - optional); // the verifier checked the count
  nb::list out;
  for (const std::string &o : documented) {
    if (o.back() != '?')
      out.append(o);
    else if (present > 0) {
      out.append(o.substr(0, o.size() - 1));
      --present;
    }
  }
  return out;
}

} // namespace

nb::dict program_dict(const ir::Graph &g) {
  nb::list values;
  for (size_t id = 0; id < g.values.size(); ++id) {
    const ir::Value &v = g.values[id];
    nb::dict d;
    d["id"] = id;
    d["name"] = v.name;
    d["kind"] = std::string(ir::value_kind_name(v.kind));
    d["dtype"] = std::string(ir::dtype_name(v.type.dtype));
    d["shape"] = extents_list(v.type.shape);
    d["line"] = v.loc.line;
    if (v.is_op()) {
      const ir::OpInfo &info = ir::op_info(v.op);
      d["op"] = std::string(info.name);
      d["class"] = std::string(ir::op_class_name(info.cls));
      nb::list args;
      for (ir::ValueId a : v.args)
        args.append(a);
      d["args"] = args;
      d["operands"] = bound_operands(info, v.args.size());
      d["torch"] = std::string(info.torch);
      nb::dict attrs;
      for (const ir::AttrSpec &spec : info.attrs)
        attrs[nb::str(spec.name.data(), spec.name.size())] =
            attr_object(spec, v.attrs.at(std::string(spec.name)));
      d["attrs"] = attrs;
    }
    values.append(d);
  }
  nb::list outputs;
  for (ir::ValueId o : g.outputs)
    outputs.append(o);
  nb::dict p;
  p["name"] = g.name;
  p["dims"] = g.dims;
  p["values"] = values;
  p["outputs"] = outputs;
  return p;
}

nb::list op_table() {
  nb::list ops;
  for (const ir::OpInfo &info : ir::all_ops()) {
    nb::list attrs;
    for (const ir::AttrSpec &spec : info.attrs) {
      nb::dict a;
      a["name"] = std::string(spec.name);
      a["kind"] = std::string(attr_kind_name(spec.kind));
      attrs.append(a);
    }
    nb::dict d;
    d["name"] = std::string(info.name);
    d["class"] = std::string(ir::op_class_name(info.cls));
    d["operands"] = documented_operands(info);
    d["attrs"] = attrs;
    d["internal"] = info.internal;
    d["torch"] = std::string(info.torch);
    ops.append(d);
  }
  return ops;
}

} // namespace kfuse::python
