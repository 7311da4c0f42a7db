#include "tools/check/reference_check.h"

#include "compiler/build_executable.h"
#include "runtime/device_buffer.h"
#include "runtime/driver.h"
#include "runtime/host_elements.h"
#include "runtime/npy_file.h"
#include "runtime/pipeline.h"
#include "runtime/stream.h"
#include "runtime/tensor_checks.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <limits>

namespace kfuse::rt {

using namespace ir;

double error_bound(Precision p) {
  switch (p) {
  case Precision::TF32:
    return 5e-3;
  case Precision::BF16:
    return 2e-2;
  default:
    return 1e-5;
  }
}

double error_bound(Precision p, const ir::Graph &g) {
  // A bf16 or f16 tensor anywhere (declared or returned) rounds to 8 or 11 significant bits:
  // the bf16 bound, for f16 as well.
  bool half = false;
  for (const Value &v : g.values)
    half |= !v.is_op() && v.type.dtype != ir::DType::F32;
  for (ValueId o : g.outputs)
    half |= g[o].type.dtype != ir::DType::F32;
  return half ? std::max(error_bound(p), error_bound(Precision::BF16)) : error_bound(p);
}

namespace {

// For each output of `bg` that sums over the batch (sum(x, dim=0): a bias's or a per-feature
// parameter's gradient), the sum of |x|: the magnitude a rounded sum's error scales with. A sum
// whose terms cancel (a bias's gradient before train-mode batchnorm is zero) is their rounding
// and nothing else, GPU and reference alike. `bg` with those sums as its only outputs, and for
// each output of `bg`, the index of its magnitude among them or -1.
std::pair<Graph, std::vector<int>> summed_magnitudes(const Graph &bg) {
  GraphBuilder b(bg);
  std::vector<ValueId> sums;
  std::vector<int> index;
  for (ValueId o : bg.outputs) {
    const bool sum = bg[o].is_op() && bg[o].op == OpKind::Sum && bg[o].attr("dim") == 0;
    index.push_back(sum ? static_cast<int>(sums.size()) : -1);
    if (sum)
      sums.push_back(b.op(OpKind::Sum, {b.op(OpKind::Abs, {bg[o].args[0]})}, bg[o].attrs));
  }
  Graph g = b.finish();
  g.outputs = std::move(sums);
  return {std::move(g), std::move(index)};
}

// ||a - b|| (b empty: ||a||).
double distance(const std::vector<double> &a, const std::vector<double> &b = {}) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - (b.empty() ? 0.0 : b[i]);
    s += d * d;
  }
  return std::sqrt(s);
}

// Device copy of a host tensor in its element type; the host values are rounded to what the
// device holds (the reference then uses the rounded values, so both sides see the same inputs).
struct DeviceTensor {
  DeviceBuffer buffer;
  std::vector<int64_t> shape;
  kfuse::DType dtype;
};

DeviceTensor upload(HostTensor &t, kfuse::DType dtype) {
  std::vector<uint8_t> bytes = encode_elements(t.data, dtype);
  t.data = decode_elements(bytes.data(), t.data.size(), dtype);
  DeviceTensor d{DeviceBuffer(std::max<size_t>(bytes.size(), 4)), t.shape, dtype};
  d.buffer.upload(bytes.data(), bytes.size());
  return d;
}

std::vector<double> download(const DeviceTensor &d, size_t n) {
  std::vector<uint8_t> bytes(n * static_cast<size_t>(exec::dtype_bytes(d.dtype)));
  d.buffer.download(bytes.data(), bytes.size());
  return decode_elements(bytes.data(), n, d.dtype);
}

size_t elements(const std::vector<int64_t> &shape) {
  size_t n = 1;
  for (int64_t e : shape)
    n *= static_cast<size_t>(e);
  return n;
}

// A contiguous tensor the pipeline owns (a saved value), as doubles.
std::vector<double> download(const Tensor &t) {
  const size_t n = elements(t.shape);
  std::vector<uint8_t> bytes(n * static_cast<size_t>(exec::dtype_bytes(t.dtype)));
  Driver &driver = Driver::get();
  if (!bytes.empty())
    driver.check(
        driver.cuMemcpyDtoH(bytes.data(), reinterpret_cast<CUdeviceptr>(t.data), bytes.size()),
        "cuMemcpyDtoH (a saved value)");
  return decode_elements(bytes.data(), n, t.dtype);
}

CheckEntry compare(const std::string &name, const std::vector<double> &gpu,
                   const std::vector<double> &ref) {
  CheckEntry e;
  e.name = name;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (!std::isfinite(gpu[i]))
      e.finite = false;
    e.max_abs = std::max(e.max_abs, std::fabs(gpu[i] - ref[i]));
    e.zero_mismatches += (gpu[i] == 0) != (ref[i] == 0);
  }
  e.relative = e.finite ? relative_error(gpu, ref) : std::numeric_limits<double>::infinity();
  return e;
}

// `integral`: an i64 tensor's class indices, written as int64; the rest as float32.
void save(const std::string &dir, const std::string &file, const std::vector<int64_t> &shape,
          const std::vector<double> &data, bool integral = false) {
  write_npy(dir + "/" + file + ".npy", shape, data,
            integral ? kfuse::DType::I64 : kfuse::DType::F32);
}

// Every input, param and state from DIR/<name>.npy; `dims` (from --dim) are checked against the
// dims the files bind, and completed by them.
TensorMap read_inputs(const Graph &g, const Pipeline &pipeline, const std::string &dir,
                      DimBindings &dims) {
  TensorMap host;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::vector<std::string> names;
  for (const Value &v : g.values)
    if (!v.is_op())
      names.push_back(v.name);
  for (const std::string &name : names) {
    const bool integral = g[g.find(name)].type.dtype == ir::DType::I64;
    std::string path = dir + "/" + name + ".npy";
    if (!std::filesystem::exists(path))
      throw Error(fmt::format(
          "{}: no such file; --inputs DIR reads every input, param and state of '{}' as "
          "DIR/<name>.npy: {}",
          path, g.name, fmt::join(names, ", ")));
    NpyArray a = read_npy(path);
    if (integral != (a.dtype == kfuse::DType::I64))
      throw Error(fmt::format(
          "{}: {} data for {} '{}', declared {}; {}", path,
          a.dtype == kfuse::DType::I64 ? "int64" : "floating-point",
          integral ? "class indices" : "tensor", name, g[g.find(name)].type.str(),
          integral ? "np.save(path, a.astype(np.int64))" : "np.save(path, a.astype(np.float32))"));
    shapes[name] = a.shape;
    host[name] = HostTensor{a.shape, std::move(a.data)};
  }
  DimBindings found = pipeline.dims(shapes);
  for (const auto &[dim, value] : dims) {
    auto it = found.find(dim);
    if (it == found.end())
      throw Error(fmt::format("--dim {}={}: '{}' has no dim {}", dim, value, g.name, dim));
    if (it->second != value)
      throw Error(fmt::format("--dim {}={} but the files in {} bind {}={}", dim, value, dir, dim,
                              it->second));
  }
  dims = found;
  return host;
}

// One check of a compiled pipeline against the fp64 interpreter, step by step: the tensors
// read or drawn, uploaded and bound; the pipeline run; its outputs and updated states compared;
// what --save or --inputs asks for written.
class ReferenceCheck {
public:
  ReferenceCheck(Pipeline &pipeline, const Graph &g, const CheckRequest &req)
      : pipeline_(pipeline), g_(g), req_(req),
        mode_(req.options.mode == kfuse::Mode::Train ? ir::Mode::Train : ir::Mode::Eval),
        dims_(req.dims) {}

  CheckResult run() {
    // The user's files are read and checked first: their errors need no GPU.
    host_ = req_.inputs_dir.empty() ? random_tensors(g_, dims_, req_.seed)
                                    : read_inputs(g_, pipeline_, req_.inputs_dir, dims_);
    Driver::get().make_current();
    upload_declared();
    allocate_outputs();
    run_steps();
    compare_results();
    if (req_.backward.graph)
      check_backward();
    save_results();
    return std::move(result_);
  }

private:
  // Every declared tensor on the device (the host values rounded to what it holds), inputs
  // passed to each run and the rest bound.
  void upload_declared() {
    for (auto &[name, t] : host_)
      device_.emplace(name, upload(t, api_dtype(g_[g_.find(name)].type.dtype)));
    initial_ = host_;
    for (const Value &v : g_.values) {
      if (v.is_op())
        continue;
      const DeviceTensor &d = device_.at(v.name);
      Tensor t{reinterpret_cast<void *>(d.buffer.ptr()), d.shape, d.dtype};
      if (v.kind == ValueKind::Input)
        inputs_[v.name] = t;
      else
        pipeline_.bind(v.name, t);
    }
  }

  void allocate_outputs() {
    for (size_t i = 0; i < pipeline_.output_count(); ++i) {
      std::vector<int64_t> shape = pipeline_.output_shape(i, dims_);
      size_t n = elements(shape);
      const kfuse::DType dtype = api_dtype(g_[g_.outputs[i]].type.dtype);
      outs_.push_back(
          {DeviceBuffer(std::max<size_t>(n * static_cast<size_t>(exec::dtype_bytes(dtype)), 4)),
           shape, dtype});
      out_refs_.push_back({reinterpret_cast<void *>(outs_.back().buffer.ptr()), shape, dtype});
    }
  }

  // req.steps runs, each interpreted with the random numbers it drew where a reference is asked
  // for; without one, the outputs and states are compared with themselves, which only checks
  // that they are finite (they are judged elsewhere).
  void run_steps() {
    Stream stream;
    pipeline_.set_rng(req_.rng.seed, req_.rng.offset);
    for (int step = 0; step < req_.steps; ++step) {
      for (DeviceTensor &o : outs_)
        o.buffer.fill_bytes(0xff); // NaN: an element the pipeline forgets to write shows
      const kfuse::RngState rng = pipeline_.rng_state(); // what this run draws with
      pipeline_.run(inputs_, out_refs_, stream.handle());
      stream.synchronize();
      last_rng_ = {rng.seed, rng.offset};
      if (req_.backward.graph)
        at_entry_ = host_; // the backward reads the state the last step read
      if (req_.reference)
        ref_outs_ = interpret(g_, mode_, dims_, host_, last_rng_);
    }
    if (req_.reference)
      return;
    for (size_t i = 0; i < outs_.size(); ++i)
      ref_outs_.push_back({outs_[i].shape, download(outs_[i], elements(outs_[i].shape))});
    for (ValueId id : g_.declared(ValueKind::State))
      host_.at(g_[id].name).data =
          download(device_.at(g_[id].name), host_.at(g_[id].name).data.size());
  }

  void compare_results() {
    for (size_t i = 0; i < outs_.size(); ++i) {
      gpu_outs_.push_back(download(outs_[i], ref_outs_[i].data.size()));
      result_.entries.push_back(
          compare(fmt::format("out{}", i), gpu_outs_.back(), ref_outs_[i].data));
    }
    for (ValueId id : g_.declared(ValueKind::State))
      result_.entries.push_back(
          compare(g_[id].name, download(device_.at(g_[id].name), host_.at(g_[id].name).data.size()),
                  host_.at(g_[id].name).data));
  }

  // The pipeline's backward after the last step on random output gradients, and the backward
  // graph interpreted on the same gradients, the saved values (the reference's, and the GPU's)
  // and the tensors the step read; every gradient poisoned first. Without a reference, finiteness
  // only.
  void check_backward() {
    const Graph &bg = *req_.backward.graph;
    TensorMap reference = random_tensors(bg, dims_, req_.seed + 1);
    std::vector<DeviceTensor> grads, results;
    std::vector<Tensor> grad_refs, result_refs;
    for (size_t i = 0; i < req_.backward.grad_inputs.size(); ++i) {
      HostTensor &t = reference.at(req_.backward.grad_inputs[i]);
      grads.push_back(upload(t, pipeline_.output_dtype(i)));
      // Declared in the backward by its dims ([B, T, F]), it is output i's gradient ([B*T, F]).
      grad_refs.push_back({reinterpret_cast<void *>(grads.back().buffer.ptr()),
                           pipeline_.output_shape(i, dims_), pipeline_.output_dtype(i)});
    }
    const std::vector<std::string> names = pipeline_.gradients();
    for (size_t i = 0; i < names.size(); ++i) {
      const std::vector<int64_t> shape = pipeline_.gradient_shape(i, dims_);
      const kfuse::DType dtype = pipeline_.gradient_dtype(i);
      const size_t bytes = elements(shape) * static_cast<size_t>(exec::dtype_bytes(dtype));
      results.push_back({DeviceBuffer(std::max<size_t>(bytes, 4)), shape, dtype});
      results.back().buffer.fill_bytes(0xff); // NaN: an element the backward forgets shows
      result_refs.push_back({reinterpret_cast<void *>(results.back().buffer.ptr()), shape, dtype});
    }
    Stream stream;
    pipeline_.backward(grad_refs.data(), grad_refs.size(), result_refs.data(), result_refs.size(),
                       stream.handle());
    stream.synchronize();
    std::vector<HostTensor> expected, given_saved, exact, magnitudes;
    auto [magnitude_graph, magnitude_of] = summed_magnitudes(bg);
    if (req_.reference) {
      for (const Value &v : bg.values)
        if (!v.is_op() && at_entry_.count(v.name))
          reference[v.name] = at_entry_.at(v.name);
      // The saved values in the backward's declared shapes (the same elements): the reference
      // forward's, then those the GPU's forward saved, as the backward read them.
      const size_t first_saved = g_.outputs.size() - req_.backward.saved.size();
      for (size_t i = 0; i < req_.backward.saved.size(); ++i)
        reference.at(req_.backward.saved[i]).data = ref_outs_.at(first_saved + i).data;
      expected = interpret(bg, mode_, dims_, reference, last_rng_);
      const std::vector<Tensor> saved = PipelineAccess::saved(pipeline_);
      for (size_t i = 0; i < req_.backward.saved.size(); ++i)
        reference.at(req_.backward.saved[i]).data = download(saved.at(i));
      given_saved = interpret(bg, mode_, dims_, reference, last_rng_);
      exact = interpret(bg, mode_, dims_, reference, last_rng_, Rounding::None);
      if (!magnitude_graph.outputs.empty())
        magnitudes = interpret(magnitude_graph, mode_, dims_, reference, last_rng_);
    }
    for (size_t i = 0; i < names.size(); ++i) {
      std::vector<double> gpu = download(results[i], elements(results[i].shape));
      CheckEntry e = compare("grad " + names[i], gpu, req_.reference ? expected[i].data : gpu);
      if (req_.reference && e.finite) {
        e.given_saved_relative = relative_error(gpu, given_saved[i].data);
        e.exact_relative = relative_error(gpu, exact[i].data);
        e.reference_relative = relative_error(given_saved[i].data, exact[i].data);
        const int m = magnitude_of[i];
        const double scale = m < 0 ? 0 : distance(magnitudes[static_cast<size_t>(m)].data);
        if (scale > 0)
          e.summed_relative = distance(gpu, given_saved[i].data) / scale;
      }
      result_.entries.push_back(std::move(e));
    }
  }

  // --save DIR: every tensor, states before and after, and meta.json (docs/PERF.md). --inputs
  // DIR alone: the results beside the inputs, outputs and updated state.
  void save_results() {
    const std::string &dir = req_.save_dir.empty() ? req_.inputs_dir : req_.save_dir;
    const bool everything = !req_.save_dir.empty();
    if (dir.empty())
      return;
    std::filesystem::create_directories(dir);
    auto write = [&](const std::string &file, const std::vector<int64_t> &shape,
                     const std::vector<double> &data, bool integral = false) {
      save(dir, file, shape, data, integral);
      result_.files.push_back(dir + "/" + file + ".npy");
    };
    std::vector<std::string> rows; // of meta.json's "tensors"
    for (const Value &v : g_.values) {
      if (v.is_op() || (!everything && v.kind != ValueKind::State))
        continue;
      const std::vector<int64_t> &shape = initial_.at(v.name).shape;
      if (v.kind == ValueKind::State) {
        if (everything)
          write(v.name + ".in", shape, initial_.at(v.name).data);
        write(v.name + ".out", shape,
              download(device_.at(v.name), initial_.at(v.name).data.size()));
        rows.push_back(fmt::format("    \"{0}.in\": {{\"shape\": {1}, \"role\": \"state_in\"}},\n"
                                   "    \"{0}.out\": {{\"shape\": {1}, \"role\": \"state_out\"}}",
                                   v.name, shape_text(shape)));
      } else {
        write(v.name, shape, initial_.at(v.name).data, v.type.dtype == ir::DType::I64);
        rows.push_back(fmt::format("    \"{}\": {{\"shape\": {}, \"role\": \"{}\"}}", v.name,
                                   shape_text(shape),
                                   v.kind == ValueKind::Input ? "input" : "param"));
      }
    }
    for (size_t i = 0; i < outs_.size(); ++i) {
      write(fmt::format("out{}", i), outs_[i].shape, gpu_outs_[i]);
      rows.push_back(fmt::format("    \"out{}\": {{\"shape\": {}, \"role\": \"output\"}}", i,
                                 shape_text(outs_[i].shape)));
    }
    if (everything)
      write_meta(dir, rows);
  }

  void write_meta(const std::string &dir, const std::vector<std::string> &rows) const {
    std::string meta = fmt::format(
        "{{\n  \"pipeline\": \"{}\",\n  \"mode\": \"{}\",\n  \"steps\": {},\n  \"tensors\": {{\n",
        g_.name, mode_name(mode_), req_.steps);
    for (size_t i = 0; i < rows.size(); ++i)
      meta += rows[i] + (i + 1 < rows.size() ? ",\n" : "\n");
    std::ofstream(dir + "/meta.json") << meta << "  }\n}\n";
  }

  Pipeline &pipeline_;
  const Graph &g_;
  const CheckRequest &req_;
  const ir::Mode mode_;
  DimBindings dims_;
  TensorMap host_;        // the declared tensors as the device holds them; states as updated
  TensorMap initial_;     // the declared tensors before the first run
  TensorMap at_entry_;    // the declared tensors as the last step read them (a backward's)
  ir::RngState last_rng_; // the last step's dropout stream
  std::map<std::string, DeviceTensor> device_;
  std::map<std::string, Tensor> inputs_;
  std::vector<DeviceTensor> outs_;
  std::vector<Tensor> out_refs_;
  std::vector<HostTensor> ref_outs_;
  std::vector<std::vector<double>> gpu_outs_;
  CheckResult result_;
};

} // namespace

CheckResult check_against_reference(const CheckRequest &req) {
  Lowered lowered = lower(dsl::SourceFile(req.file_name, req.kf_text),
                          lower_options(PipelineAccess::request(req.options, true)));
  Pipeline pipeline = PipelineAccess::compile(build_executable(lowered));
  return check_against_reference(pipeline, lowered.graph, req);
}

CheckResult check_against_reference(Pipeline &pipeline, const ir::Graph &g,
                                    const CheckRequest &req) {
  return ReferenceCheck(pipeline, g, req).run();
}

} // namespace kfuse::rt
