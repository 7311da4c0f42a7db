// kfuse._kfuse: the C++ API (include/kfuse/kfuse.h) for Python. Tensors arrive as DLPack
// capsules, made by python/kfuse/__init__.py with __dlpack__ on the stream kfuse runs on;
// every kfuse::Error (DSL diagnostics included) is raised as kfuse.Error.
#include "kfuse/kfuse.h"
#include "python/src/device_scope.h"
#include "python/src/dlpack_tensor.h"

#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>

namespace nb = nanobind;
using kfuse::Pipeline;
using kfuse::Tensor;

namespace {

kfuse::Options options(const std::string &mode, const std::string &precision,
                       const std::string &arch) {
  kfuse::Options o;
  if (mode == "train")
    o.mode = kfuse::Mode::Train;
  else if (mode == "eval")
    o.mode = kfuse::Mode::Eval;
  else
    throw kfuse::Error(fmt::format("mode must be 'train' or 'eval', got '{}'", mode));
  if (precision == "fp32")
    o.precision = kfuse::Precision::FP32;
  else if (precision == "3xtf32")
    o.precision = kfuse::Precision::FP32x3;
  else if (precision == "tf32")
    o.precision = kfuse::Precision::TF32;
  else if (precision == "bf16")
    o.precision = kfuse::Precision::BF16;
  else
    throw kfuse::Error(
        fmt::format("precision must be 'fp32', '3xtf32', 'tf32' or 'bf16', got '{}'", precision));
  o.arch = arch;
  return o;
}

nb::dict report(const Pipeline &p) {
  const kfuse::CompileReport &r = p.report();
  nb::list kernels;
  for (const kfuse::KernelReport &k : r.kernels) {
    nb::dict d;
    d["name"] = k.name;
    d["registers"] = k.registers;
    d["shared_bytes"] = k.shared_bytes;
    d["stack_bytes"] = k.stack_bytes;
    d["spill_stores"] = k.spill_stores;
    d["spill_loads"] = k.spill_loads;
    kernels.append(d);
  }
  nb::dict d;
  d["milliseconds"] = r.milliseconds;
  d["cache_hit"] = r.cache_hit;
  d["arch"] = r.arch;
  d["cache_key"] = r.cache_key;
  d["kernels"] = kernels;
  return d;
}

std::string where(const Pipeline &p) { return fmt::format("pipeline '{}'", p.name()); }

// Tensors of one run, all on one CUDA device (`device`).
struct RunTensors {
  std::map<std::string, Tensor> inputs;
  std::vector<Tensor> outputs;
  int device = -1;
  std::string first; // the tensor that set `device`
  std::string where;

  void take(const std::string &name, int on) {
    if (device >= 0 && on != device)
      throw kfuse::Error(
          fmt::format("{}: tensor '{}' is on cuda:{} but tensor '{}' on cuda:{}; one run's "
                      "tensors share a device",
                      where, name, on, first, device));
    if (device < 0) {
      device = on;
      first = name;
    }
  }
};

} // namespace

NB_MODULE(_kfuse, m) {
  m.doc() = "kfuse's C++ API; use the kfuse package (kfuse.Pipeline), which wraps it";
  nb::exception<kfuse::Error>(m, "Error");

  nb::class_<Pipeline>(m, "Pipeline")
      .def_static(
          "from_file",
          [](const std::string &path, const std::string &mode, const std::string &precision,
             const std::string &arch) {
            kfuse::Options o = options(mode, precision, arch);
            nb::gil_scoped_release release; // NVRTC takes a while on a cache miss
            return Pipeline::from_file(path, o);
          },
          nb::arg("path"), nb::arg("mode"), nb::arg("precision"), nb::arg("arch"))
      .def_static(
          "from_string",
          [](const std::string &text, const std::string &file_name, const std::string &mode,
             const std::string &precision, const std::string &arch) {
            kfuse::Options o = options(mode, precision, arch);
            nb::gil_scoped_release release;
            return Pipeline::from_string(text, file_name, o);
          },
          nb::arg("text"), nb::arg("file_name"), nb::arg("mode"), nb::arg("precision"),
          nb::arg("arch"))
      .def_prop_ro("name", &Pipeline::name)
      .def_prop_ro("cuda_source", &Pipeline::cuda_source)
      .def_prop_ro("plan", &Pipeline::plan_text)
      .def_prop_ro("report", &report)
      .def_prop_ro("inputs", &Pipeline::inputs)
      .def_prop_ro("params", &Pipeline::params)
      .def_prop_ro("output_count", &Pipeline::output_count)
      .def("dims", &Pipeline::dims, nb::arg("shapes"))
      .def("output_shape", &Pipeline::output_shape, nb::arg("i"), nb::arg("dims"))
      .def(
          "output_dtype",
          [](const Pipeline &p, size_t i) {
            switch (p.output_dtype(i)) {
            case kfuse::DType::F32:
              return "f32";
            case kfuse::DType::F16:
              return "f16";
            case kfuse::DType::BF16:
              return "bf16";
            }
            return "?";
          },
          nb::arg("i"), "The declared element type of output i: 'f32', 'f16' or 'bf16'.")
      .def(
          "bind",
          [](Pipeline &p, const std::string &name, nb::handle capsule) {
            int device = -1;
            p.bind(name, kfuse::python::tensor_from_dlpack(capsule.ptr(), where(p), name, &device));
          },
          nb::arg("name"), nb::arg("capsule"))
      .def(
          "run",
          [](Pipeline &p, nb::dict inputs, nb::list outputs, uintptr_t stream) {
            RunTensors r;
            r.where = where(p);
            for (auto [key, capsule] : inputs) {
              std::string name = nb::cast<std::string>(key);
              int device = -1;
              Tensor t = kfuse::python::tensor_from_dlpack(capsule.ptr(), where(p), name, &device);
              r.take(name, device);
              r.inputs[name] = t;
            }
            for (size_t i = 0; i < outputs.size(); ++i) {
              std::string name = fmt::format("output {}", i);
              int device = -1;
              Tensor t =
                  kfuse::python::tensor_from_dlpack(outputs[i].ptr(), where(p), name, &device);
              r.take(name, device);
              r.outputs.push_back(t);
            }
            nb::gil_scoped_release release;
            kfuse::python::DeviceScope scope(r.device < 0 ? 0 : r.device);
            p.run(r.inputs, r.outputs, reinterpret_cast<CUstream>(stream));
          },
          nb::arg("inputs"), nb::arg("outputs"), nb::arg("stream"))
      .def(
          "tensor_shape",
          [](const Pipeline &p, const std::string &name, nb::handle capsule) {
            int device = -1;
            return kfuse::python::tensor_from_dlpack(capsule.ptr(), where(p), name, &device).shape;
          },
          nb::arg("name"), nb::arg("capsule"),
          "The shape of a DLPack capsule's tensor, after the checks a run makes of it (dtype, "
          "layout, device).");
}
