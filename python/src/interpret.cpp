#include "python/src/interpret.h"

#include "compiler/ir/interpreter.h"

#include <fmt/format.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <vector>

namespace nb = nanobind;

namespace kfuse::python {

namespace {

nb::tuple to_python(const ir::HostTensor &t) {
  return nb::make_tuple(t.shape, nb::bytes(reinterpret_cast<const char *>(t.data.data()),
                                           t.data.size() * sizeof(double)));
}

ir::HostTensor from_python(const std::string &name, nb::handle value) {
  nb::tuple pair = nb::cast<nb::tuple>(value);
  if (pair.size() != 2)
    throw kfuse::Error(fmt::format("interpret: tensor '{}' must be (shape, float64 bytes)", name));
  ir::HostTensor t;
  t.shape = nb::cast<std::vector<int64_t>>(pair[0]);
  nb::bytes data = nb::cast<nb::bytes>(pair[1]);
  const size_t want = static_cast<size_t>(t.numel()) * sizeof(double);
  if (data.size() != want)
    throw kfuse::Error(fmt::format("interpret: tensor '{}' of shape {} needs {} bytes of float64, "
                                   "got {}",
                                   name, ir::shape_text(t.shape), want, data.size()));
  t.data.resize(static_cast<size_t>(t.numel()));
  std::memcpy(t.data.data(), data.c_str(), want);
  return t;
}

} // namespace

nb::dict interpret(const ir::Graph &g, const std::string &mode,
                   const std::map<std::string, int64_t> &dims, nb::dict tensors, uint64_t seed,
                   uint64_t offset) {
  if (mode != "train" && mode != "eval")
    throw kfuse::Error(fmt::format("mode must be 'train' or 'eval', got '{}'", mode));
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
