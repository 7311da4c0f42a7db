#include "python/src/interpret.h"

#include "compiler/ir/interpreter.h"

#include "compiler/ir/verifier.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace nb = nanobind;

namespace kfuse::python {

namespace {

nb::tuple to_python(const ir::HostTensor &t) {
  return nb::make_tuple(t.shape, nb::bytes(reinterpret_cast<const char *>(t.data.data()),
                                           t.data.size() * sizeof(double)));
}

std::string python_type(nb::handle h) { return nb::type_name(h.type()).c_str(); }

// A tensor's (shape, bytes of float64); `name` is a declared tensor of the pipeline, so a
// message may quote it.
ir::HostTensor from_python(const std::string &name, nb::handle value) {
  auto wrong = [&](const std::string &problem) {
    return kfuse::Error(fmt::format("interpret: tensors['{}'] {}", name, problem));
  };
  if (!nb::isinstance<nb::tuple>(value) || nb::len(value) != 2)
    throw wrong(fmt::format("must be a tuple (shape, bytes of float64), got {}",
                            nb::isinstance<nb::tuple>(value)
                                ? fmt::format("a tuple of {}", nb::len(value))
                                : python_type(value)));
  nb::object shape = value[0], data = value[1];
  if (!nb::isinstance<nb::tuple>(shape) && !nb::isinstance<nb::list>(shape))
    throw wrong(fmt::format("has the shape {}, not a tuple or list of ints", python_type(shape)));
  ir::HostTensor t;
  int64_t numel = 1;
  for (nb::handle e : shape) {
    int64_t extent = 0;
    if (nb::isinstance<nb::bool_>(e) || !nb::try_cast(e, extent) || extent < 1 ||
        extent > ir::kMaxExtent)
      throw wrong(fmt::format("has the extent {} in its shape, not an int in [1, {}]",
                              nb::repr(e).c_str(), ir::kMaxExtent));
    if (__builtin_mul_overflow(numel, extent, &numel))
      throw wrong("has a shape of more than 2^63 elements");
    t.shape.push_back(extent);
  }
  if (!nb::isinstance<nb::bytes>(data))
    throw wrong(fmt::format("holds {} where its float64 values go, not bytes", python_type(data)));
  nb::bytes bytes = nb::borrow<nb::bytes>(data);
  if (bytes.size() % sizeof(double) != 0 ||
      bytes.size() / sizeof(double) != static_cast<uint64_t>(numel))
    throw wrong(fmt::format("of shape {} needs {} values of float64 ({} bytes), got {} bytes",
                            ir::shape_text(t.shape), numel,
                            static_cast<uint64_t>(numel) * sizeof(double), bytes.size()));
  t.data.resize(static_cast<size_t>(numel));
  std::memcpy(t.data.data(), bytes.c_str(), bytes.size());
  return t;
}

// Every tensor and dim given is the pipeline's: a misspelt name is reported, not ignored.
void check_names(const ir::Graph &g, const std::map<std::string, int64_t> &dims, nb::dict tensors) {
  std::vector<std::string> declared;
  for (const ir::Value &v : g.values)
    if (!v.is_op())
      declared.push_back(v.name);
  for (auto item : tensors) {
    std::string name = nb::cast<std::string>(item.first);
    if (std::find(declared.begin(), declared.end(), name) == declared.end())
      throw kfuse::Error(fmt::format("interpret: tensors['{}'] is no input, param or state of "
                                     "pipeline '{}' (those are: {})",
                                     name, g.name, fmt::join(declared, ", ")));
  }
  for (const auto &[name, extent] : dims)
    if (std::find(g.dims.begin(), g.dims.end(), name) == g.dims.end())
      throw kfuse::Error(
          fmt::format("interpret: dims['{}'] is no dim of pipeline '{}' ({})", name, g.name,
                      g.dims.empty() ? std::string("it has none")
                                     : fmt::format("its dims: {}", fmt::join(g.dims, ", "))));
}

} // namespace

nb::dict interpret(const ir::Graph &g, const std::string &mode,
                   const std::map<std::string, int64_t> &dims, nb::dict tensors, uint64_t seed,
                   uint64_t offset) {
  if (mode != "train" && mode != "eval")
    throw kfuse::Error(fmt::format("mode must be 'train' or 'eval', got '{}'", mode));
  check_names(g, dims, tensors);
  ir::TensorMap host;
  for (auto [key, value] : tensors) {
    std::string name = nb::cast<std::string>(key);
    host.emplace(name, from_python(name, value));
  }
  ir::Interpreter interpreter(g, mode == "train" ? ir::Mode::Train : ir::Mode::Eval,
                              ir::DimBindings(dims.begin(), dims.end()), host,
                              ir::RngState{seed, offset});
  interpreter.eval_all();
  nb::list outputs;
  for (ir::ValueId o : g.outputs)
    outputs.append(to_python(interpreter.output(o)));
  nb::dict state;
  for (const auto &[name, t] : interpreter.state_updates())
    state[nb::str(name.c_str())] = to_python(t);
  nb::dict result;
  result["outputs"] = outputs;
  result["state"] = state;
  return result;
}

} // namespace kfuse::python
