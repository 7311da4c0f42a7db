// kfuse._kfuse: the C++ API (include/kfuse/kfuse.h) for Python. Tensors arrive as DLPack
// capsules, made by python/kfuse/__init__.py with __dlpack__ on the stream kfuse runs on;
// every kfuse::Error (DSL diagnostics included) is raised as kfuse.Error.
#include "compiler/dsl/parser.h"
#include "compiler/dsl/source.h"
#include "compiler/ir/ops.h"
#include "compiler/ir/verifier.h"
#include "compiler/target.h"
#include "kfuse/kfuse.h"
#include "python/src/device_scope.h"
#include "python/src/dlpack_tensor.h"
#include "python/src/grad.h"
#include "python/src/interpret.h"
#include "python/src/program.h"
#include "templates/dropout.cuh"

#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>

namespace nb = nanobind;
using kfuse::Pipeline;
using kfuse::Tensor;

namespace {

kfuse::Options options(const std::string &mode, const std::string &precision,
                       const std::string &arch, int batch_stats_ranks) {
  kfuse::Options o;
  if (mode == "train")
    o.mode = kfuse::Mode::Train;
  else if (mode == "eval")
    o.mode = kfuse::Mode::Eval;
  else
    throw kfuse::Error(fmt::format("mode must be 'train' or 'eval', got '{}'", mode));
  const std::optional<kfuse::Precision> parsed = kfuse::parse_precision(precision);
  if (!parsed)
    throw kfuse::Error(
        fmt::format("precision must be 'fp32', '3xtf32', 'tf32' or 'bf16', got '{}'", precision));
  o.precision = *parsed;
  o.arch = arch;
  o.batch_stats_ranks = batch_stats_ranks;
  return o;
}

// A Python callable as the pipeline's all-gather: called with the GIL held, as
// all_gather(send, recv, count, stream) with the pointers and the stream as ints; what it raises
// comes out of the run as a kfuse.Error naming it.
kfuse::AllGather all_gather_of(nb::object fn) {
  auto held = std::shared_ptr<nb::object>(new nb::object(std::move(fn)), [](nb::object *o) {
    nb::gil_scoped_acquire gil; // the last copy may go where the GIL is released
    delete o;
  });
  return [held](const double *send, double *recv, size_t count, CUstream stream) {
    nb::gil_scoped_acquire gil;
    try {
      (*held)(reinterpret_cast<uintptr_t>(send), reinterpret_cast<uintptr_t>(recv), count,
              reinterpret_cast<uintptr_t>(stream));
    } catch (nb::python_error &e) {
      throw kfuse::Error(
          fmt::format("the all-gather of the batch statistics raised: {}", e.what()));
    }
  };
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
    d["variant"] = k.variant; // a GEMM's variant with another tile, not a kernel of the plan
    d["unused"] = k.unused;   // why runs never take that variant; empty where they may
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

// A Pipeline with what its runs reuse: the names messages use, and the Tensors a run reads its
// DLPack capsules into (their shapes keep their capacity, so a steady run allocates nothing).
struct PyPipeline {
  Pipeline core;
  std::string where;
  std::vector<std::string> input_names, output_names;
  std::vector<Tensor> inputs, outputs;

  explicit PyPipeline(Pipeline p)
      : core(std::move(p)), where(fmt::format("pipeline '{}'", core.name())),
        input_names(core.inputs()) {
    for (size_t i = 0; i < core.output_count(); ++i)
      output_names.push_back(fmt::format("output {}", i));
  }
};

// Reads `capsules` into `tensors`, all on one CUDA device (returned; -1 for none).
int read_all(const PyPipeline &p, nb::list capsules, const std::vector<std::string> &names,
             std::vector<Tensor> &tensors, int device) {
  if (capsules.size() != names.size())
    throw kfuse::Error(fmt::format("{}: expected {} {} tensor(s), got {}", p.where, names.size(),
                                   &names == &p.input_names ? "input" : "output", capsules.size()));
  tensors.resize(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    int on = -1;
    kfuse::python::read_dlpack(capsules[i].ptr(), p.where, names[i], &on, tensors[i]);
    if (device >= 0 && on != device)
      throw kfuse::Error(fmt::format(
          "{}: tensor '{}' is on cuda:{} but the run's first tensor on cuda:{}; one run's "
          "tensors share a device",
          p.where, names[i], on, device));
    device = on;
  }
  return device;
}

// The .kf file at `path`, read by the front end's reader (which refuses what is not a file or
// is larger than a .kf can be), or else `text` named `file_name`, parsed and verified; a DSL
// error throws with its diagnostics text.
kfuse::ir::Graph parse(const std::optional<std::string> &path, const std::string &text,
                       const std::string &file_name) {
  kfuse::dsl::SourceFile source =
      path ? kfuse::dsl::SourceFile::read(*path) : kfuse::dsl::SourceFile(file_name, text);
  kfuse::dsl::Diagnostics diags(source);
  return kfuse::dsl::parse_kf(source, diags);
}

// A mask of more elements than one tensor may hold is a mistake, not a request for gigabytes.
constexpr uint64_t kMaxMaskElements = kfuse::ir::kMaxExtent;

// kfuse::Error as kfuse.Error. A diagnostic quotes its source line, which may hold bytes that
// are not UTF-8 (a binary file read as .kf): they are escaped rather than lost to a
// UnicodeDecodeError.
void raise_error(const std::exception_ptr &p, void *error_type) {
  try {
    std::rethrow_exception(p);
  } catch (const kfuse::Error &e) {
    nb::object message = nb::steal(PyUnicode_DecodeUTF8(
        e.what(), static_cast<Py_ssize_t>(std::strlen(e.what())), "backslashreplace"));
    PyErr_SetObject(static_cast<PyObject *>(error_type), message.ptr());
  }
}

} // namespace

NB_MODULE(_kfuse, m) {
  m.doc() = "kfuse's C++ API; use the kfuse package (kfuse.Pipeline), which wraps it";
  nb::object error = nb::steal(PyErr_NewException("kfuse._kfuse.Error", PyExc_Exception, nullptr));
  m.attr("Error") = error;
  nb::register_exception_translator(raise_error, error.ptr());
  m.attr("MAX_EXTENT") = kfuse::ir::kMaxExtent;
  m.attr("MAX_DROPOUT_STREAM") = kfuse::ir::kMaxDropoutStream;
  m.attr("MAX_MASK_ELEMENTS") = kMaxMaskElements;

  m.def(
      "program",
      [](const std::optional<std::string> &path, const std::string &text,
         const std::string &file_name) {
        return kfuse::python::program_dict(parse(path, text, file_name));
      },
      nb::arg("path").none(), nb::arg("text"), nb::arg("file_name"),
      "The pipeline of a .kf file (path) or text as parsed and verified (python/src/program.h).");
  m.def(
      "grad",
      [](const std::optional<std::string> &path, const std::string &text,
         const std::string &file_name, const std::string &mode,
         const std::vector<std::string> &frozen) {
        return kfuse::python::grad_dict(parse(path, text, file_name), mode, frozen);
      },
      nb::arg("path").none(), nb::arg("text"), nb::arg("file_name"), nb::arg("mode"),
      nb::arg("frozen"),
      "The backward of a .kf file (path) or text in a mode (python/src/grad.h).");
  m.def("ops", &kfuse::python::op_table, "kfuse's op table (python/src/program.h).");
  m.def(
      "interpret",
      [](const std::optional<std::string> &path, const std::string &text,
         const std::string &file_name, const std::string &mode,
         const std::map<std::string, int64_t> &dims, nb::dict tensors, uint64_t seed,
         uint64_t offset) {
        return kfuse::python::interpret(parse(path, text, file_name), mode, dims, tensors, seed,
                                        offset);
      },
      nb::arg("path").none(), nb::arg("text"), nb::arg("file_name"), nb::arg("mode"),
      nb::arg("dims"), nb::arg("tensors"), nb::arg("seed"), nb::arg("offset"));
  m.def(
      "dropout_keep",
      [](uint64_t seed, uint64_t offset, uint64_t stream, uint64_t count, double p) {
        // The kernels' keep rule (templates/dropout.cuh), one byte per element in row-major
        // order: what a train-mode run at (seed, offset) keeps of dropout stream `stream`.
        if (!(p >= 0 && p < 1))
          throw kfuse::Error(fmt::format("dropout_keep: p must be in [0, 1), got {}", p));
        if (stream > static_cast<uint64_t>(kfuse::ir::kMaxDropoutStream))
          throw kfuse::Error(fmt::format("dropout_keep: stream must be in [0, {}], got {}",
                                         kfuse::ir::kMaxDropoutStream, stream));
        if (count > kMaxMaskElements)
          throw kfuse::Error(fmt::format("dropout_keep: count must be in [0, {}] (the elements "
                                         "of one tensor), got {}",
                                         kMaxMaskElements, count));
        std::string keep(count, '\0');
        const unsigned threshold = kf::dropout_threshold(static_cast<float>(p));
        for (uint64_t i = 0; i < count; ++i)
          keep[i] =
              kf::dropout_keep(seed, offset, static_cast<unsigned>(stream), i, threshold) ? 1 : 0;
        return nb::bytes(keep.data(), keep.size());
      },
      nb::arg("seed"), nb::arg("offset"), nb::arg("stream"), nb::arg("count"), nb::arg("p"));

  nb::class_<PyPipeline>(m, "Pipeline")
      .def_static(
          "from_file",
          [](const std::string &path, const std::string &mode, const std::string &precision,
             const std::string &arch, int batch_stats_ranks) {
            kfuse::Options o = options(mode, precision, arch, batch_stats_ranks);
            nb::gil_scoped_release release; // NVRTC takes a while on a cache miss
            return PyPipeline(Pipeline::from_file(path, o));
          },
          nb::arg("path"), nb::arg("mode"), nb::arg("precision"), nb::arg("arch"),
          nb::arg("batch_stats_ranks") = 0)
      .def_static(
          "from_string",
          [](const std::string &text, const std::string &file_name, const std::string &mode,
             const std::string &precision, const std::string &arch, int batch_stats_ranks) {
            kfuse::Options o = options(mode, precision, arch, batch_stats_ranks);
            nb::gil_scoped_release release;
            return PyPipeline(Pipeline::from_string(text, file_name, o));
          },
          nb::arg("text"), nb::arg("file_name"), nb::arg("mode"), nb::arg("precision"),
          nb::arg("arch"), nb::arg("batch_stats_ranks") = 0)
      .def_prop_ro("name", [](const PyPipeline &p) { return p.core.name(); })
      .def_prop_ro("cuda_source", [](const PyPipeline &p) { return p.core.cuda_source(); })
      .def_prop_ro("plan", [](const PyPipeline &p) { return p.core.plan_text(); })
      .def_prop_ro("report", [](const PyPipeline &p) { return report(p.core); })
      .def_prop_ro("inputs", [](const PyPipeline &p) { return p.input_names; })
      .def_prop_ro("params", [](const PyPipeline &p) { return p.core.params(); })
      .def_prop_ro("output_count", [](const PyPipeline &p) { return p.core.output_count(); })
      .def(
          "dims",
          [](const PyPipeline &p, const std::map<std::string, std::vector<int64_t>> &shapes) {
            return p.core.dims(shapes);
          },
          nb::arg("shapes"))
      .def(
          "output_shape",
          [](const PyPipeline &p, size_t i, const std::map<std::string, int64_t> &dims) {
            return p.core.output_shape(i, dims);
          },
          nb::arg("i"), nb::arg("dims"))
      .def(
          "output_dtype",
          [](const PyPipeline &p, size_t i) {
            switch (p.core.output_dtype(i)) {
            case kfuse::DType::F32:
              return "f32";
            case kfuse::DType::F16:
              return "f16";
            case kfuse::DType::BF16:
              return "bf16";
            case kfuse::DType::I64: // never an output (the verifier); named all the same
              return "i64";
            }
            throw kfuse::Error(
                fmt::format("{}: output {} has no element type kfuse names", p.where, i));
          },
          nb::arg("i"), "The declared element type of output i: 'f32', 'f16' or 'bf16'.")
      .def(
          "bind",
          [](PyPipeline &p, const std::string &name, nb::handle capsule) {
            int device = -1;
            Tensor t;
            kfuse::python::read_dlpack(capsule.ptr(), p.where, name, &device, t);
            p.core.bind(name, t);
          },
          nb::arg("name"), nb::arg("capsule"))
      .def(
          "run",
          [](PyPipeline &p, nb::list inputs, nb::list outputs, uintptr_t stream) {
            int device = read_all(p, inputs, p.input_names, p.inputs, -1);
            device = read_all(p, outputs, p.output_names, p.outputs, device);
            nb::gil_scoped_release release;
            kfuse::python::DeviceScope scope(device < 0 ? 0 : device);
            p.core.run(p.inputs.data(), p.inputs.size(), p.outputs.data(), p.outputs.size(),
                       reinterpret_cast<CUstream>(stream));
          },
          nb::arg("inputs"), nb::arg("outputs"), nb::arg("stream"),
          "Runs on DLPack capsules: inputs in declaration order, outputs in return order.")
      .def(
          "workspace_size",
          [](const PyPipeline &p, const std::map<std::string, int64_t> &dims) {
            return p.core.workspace_size(dims);
          },
          nb::arg("dims"), "Bytes of workspace a run at `dims` needs (Pipeline::workspace_size).")
      .def(
          "set_workspace",
          [](PyPipeline &p, nb::handle capsule) {
            if (capsule.is_none()) {
              p.core.set_workspace(nullptr, 0);
              return;
            }
            int device = -1;
            Tensor t;
            kfuse::python::read_dlpack(capsule.ptr(), p.where, "workspace", &device, t);
            size_t bytes = t.dtype == kfuse::DType::I64 ? 8 : t.dtype == kfuse::DType::F32 ? 4 : 2;
            for (int64_t e : t.shape)
              bytes *= static_cast<size_t>(e);
            p.core.set_workspace(t.data, bytes);
          },
          nb::arg("capsule").none(),
          "Runs keep their intermediates in the capsule's memory (None: the pipeline's own).")
      .def(
          "set_all_gather",
          [](PyPipeline &p, nb::object fn) {
            p.core.set_all_gather(fn.is_none() ? kfuse::AllGather{} : all_gather_of(std::move(fn)));
          },
          nb::arg("fn").none(),
          "The all-gather of the batch statistics (Pipeline::set_all_gather): "
          "fn(send, recv, count, stream), pointers and stream as ints; None: none.")
      .def_prop_ro("all_gathers_per_run",
                   [](const PyPipeline &p) { return p.core.all_gathers_per_run(); })
      .def(
          "prepare_params",
          [](PyPipeline &p, uintptr_t stream, int device) {
            nb::gil_scoped_release release;
            kfuse::python::DeviceScope scope(device);
            return p.core.prepare_params(reinterpret_cast<CUstream>(stream));
          },
          nb::arg("stream"), nb::arg("device"),
          "Runs the kernels of params bound again now (Pipeline::prepare_params).")
      .def(
          "set_rng",
          [](PyPipeline &p, uint64_t seed, uint64_t offset) { p.core.set_rng(seed, offset); },
          nb::arg("seed"), nb::arg("offset"), "The dropout stream (Pipeline::set_rng).")
      .def(
          "rng_state",
          [](const PyPipeline &p) {
            kfuse::RngState s = p.core.rng_state();
            return std::make_pair(s.seed, s.offset);
          },
          "(seed, offset) of the next train-mode run's dropouts (Pipeline::rng_state).")
      .def(
          "tensor_shape",
          [](const PyPipeline &p, const std::string &name, nb::handle capsule) {
            int device = -1;
            Tensor t;
            kfuse::python::read_dlpack(capsule.ptr(), p.where, name, &device, t);
            return t.shape;
          },
          nb::arg("name"), nb::arg("capsule"),
          "The shape of a DLPack capsule's tensor, after the checks a run makes of it (dtype, "
          "layout, device).");
}
