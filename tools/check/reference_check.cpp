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

void save(const std::string &dir, const std::string &file, const std::vector<int64_t> &shape,
          const std::vector<double> &data) {
  write_npy(dir + "/" + file + ".npy", shape, std::vector<float>(data.begin(), data.end()));
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
    std::string path = dir + "/" + name + ".npy";
    if (!std::filesystem::exists(path))
      throw Error(fmt::format(
          "{}: no such file; --inputs DIR reads every input, param and state of '{}' as "
          "DIR/<name>.npy: {}",
          path, g.name, fmt::join(names, ", ")));
    NpyArray a = read_npy(path);
    shapes[name] = a.shape;
    host[name] = HostTensor{a.shape, std::vector<double>(a.data.begin(), a.data.end())};
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

} // namespace

CheckResult check_against_reference(const CheckRequest &req) {
  Lowered lowered = lower(dsl::SourceFile(req.file_name, req.kf_text),
                          lower_options(PipelineAccess::request(req.options, true)));
  Pipeline pipeline = PipelineAccess::compile(build_executable(lowered));
  return check_against_reference(pipeline, lowered.graph, req);
}

CheckResult check_against_reference(Pipeline &pipeline, const ir::Graph &g,
                                    const CheckRequest &req) {
  ir::Mode mode = req.options.mode == kfuse::Mode::Train ? ir::Mode::Train : ir::Mode::Eval;

  // The user's files are read and checked first: their errors need no GPU.
  DimBindings dims = req.dims;
  TensorMap host = req.inputs_dir.empty() ? random_tensors(g, dims, req.seed)
                                          : read_inputs(g, pipeline, req.inputs_dir, dims);
  Driver::get().make_current();
  std::map<std::string, DeviceTensor> device;
  for (auto &[name, t] : host)
    device.emplace(name, upload(t, api_dtype(g[g.find(name)].type.dtype)));
  const TensorMap initial = host;
  std::map<std::string, Tensor> inputs;
  for (const Value &v : g.values) {
    if (v.is_op())
      continue;
    const DeviceTensor &d = device.at(v.name);
    Tensor t{reinterpret_cast<void *>(d.buffer.ptr()), d.shape, d.dtype};
    if (v.kind == ValueKind::Input)
      inputs[v.name] = t;
    else
      pipeline.bind(v.name, t);
  }
  std::vector<DeviceTensor> outs;
  std::vector<Tensor> out_refs;
  for (size_t i = 0; i < pipeline.output_count(); ++i) {
    std::vector<int64_t> shape = pipeline.output_shape(i, dims);
    size_t n = elements(shape);
    const kfuse::DType dtype = api_dtype(g[g.outputs[i]].type.dtype);
    outs.push_back(
        {DeviceBuffer(std::max<size_t>(n * static_cast<size_t>(exec::dtype_bytes(dtype)), 4)),
         shape, dtype});
    out_refs.push_back({reinterpret_cast<void *>(outs.back().buffer.ptr()), shape, dtype});
  }

  std::vector<HostTensor> ref_outs;
  Stream stream;
  pipeline.set_rng(req.rng.seed, req.rng.offset);
  for (int step = 0; step < req.steps; ++step) {
    for (DeviceTensor &o : outs)
      o.buffer.fill_bytes(0xff); // NaN: an element the pipeline forgets to write shows
    const kfuse::RngState rng = pipeline.rng_state(); // what this run draws with
    pipeline.run(inputs, out_refs, stream.handle());
    stream.synchronize();
    if (req.reference)
      ref_outs = interpret(g, mode, dims, host, {rng.seed, rng.offset});
  }
  if (!req.reference) { // judged elsewhere: compare with itself, which only checks finiteness
    for (size_t i = 0; i < outs.size(); ++i)
      ref_outs.push_back({outs[i].shape, download(outs[i], elements(outs[i].shape))});
    for (ValueId id : g.declared(ValueKind::State))
      host.at(g[id].name).data = download(device.at(g[id].name), host.at(g[id].name).data.size());
  }

  CheckResult result;
  auto add = [&](CheckEntry e) {
    result.worst =
        std::max(result.worst, e.finite ? e.relative : std::numeric_limits<double>::infinity());
    result.entries.push_back(std::move(e));
  };
  std::vector<std::vector<double>> gpu_outs;
  for (size_t i = 0; i < outs.size(); ++i) {
    gpu_outs.push_back(download(outs[i], ref_outs[i].data.size()));
    add(compare(fmt::format("out{}", i), gpu_outs.back(), ref_outs[i].data));
  }
  for (ValueId id : g.declared(ValueKind::State))
    add(compare(g[id].name, download(device.at(g[id].name), host.at(g[id].name).data.size()),
                host.at(g[id].name).data));

  // --save DIR: every tensor, states before and after, and meta.json (docs/PERF.md). --inputs
  // DIR alone: the results beside the inputs, outputs and updated state.
  const std::string &dir = req.save_dir.empty() ? req.inputs_dir : req.save_dir;
  const bool everything = !req.save_dir.empty();
  if (dir.empty())
    return result;
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string &file, const std::vector<int64_t> &shape,
                   const std::vector<double> &data) {
    save(dir, file, shape, data);
    result.files.push_back(dir + "/" + file + ".npy");
  };
  std::string meta = fmt::format(
      "{{\n  \"pipeline\": \"{}\",\n  \"mode\": \"{}\",\n  \"steps\": {},\n  \"tensors\": {{\n",
      g.name, mode_name(mode), req.steps);
  std::vector<std::string> rows;
  for (const Value &v : g.values) {
    if (v.is_op() || (!everything && v.kind != ValueKind::State))
      continue;
    const std::vector<int64_t> &shape = initial.at(v.name).shape;
    if (v.kind == ValueKind::State) {
      if (everything)
        write(v.name + ".in", shape, initial.at(v.name).data);
      write(v.name + ".out", shape, download(device.at(v.name), initial.at(v.name).data.size()));
      rows.push_back(fmt::format("    \"{0}.in\": {{\"shape\": {1}, \"role\": \"state_in\"}},\n"
                                 "    \"{0}.out\": {{\"shape\": {1}, \"role\": \"state_out\"}}",
                                 v.name, shape_text(shape)));
    } else {
      write(v.name, shape, initial.at(v.name).data);
      rows.push_back(fmt::format("    \"{}\": {{\"shape\": {}, \"role\": \"{}\"}}", v.name,
                                 shape_text(shape),
                                 v.kind == ValueKind::Input ? "input" : "param"));
    }
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    write(fmt::format("out{}", i), outs[i].shape, gpu_outs[i]);
    rows.push_back(fmt::format("    \"out{}\": {{\"shape\": {}, \"role\": \"output\"}}", i,
                               shape_text(outs[i].shape)));
  }
  if (everything) {
    for (size_t i = 0; i < rows.size(); ++i)
      meta += rows[i] + (i + 1 < rows.size() ? ",\n" : "\n");
    std::ofstream(dir + "/meta.json") << meta << "  }\n}\n";
  }
  return result;
}

} // namespace kfuse::rt
