// kfuse::Pipeline: the .kf text, planned, generated and compiled once; launched many times.
#include "runtime/pipeline.h"

#include "compiler/codegen/embedded_templates.h"
#include "compiler/codegen/program.h"
#include "compiler/dsl/parser.h"
#include "compiler/ir/interpreter.h"
#include "compiler/ir/printer.h"
#include "compiler/lower.h"
#include "compiler/plan/plan_printer.h"
#include "compiler/plan/planner.h"
#include "runtime/device_buffer.h"
#include "runtime/disk_cache.h"
#include "runtime/driver.h"
#include "runtime/launch_geometry.h"
#include "runtime/module.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/tensor_checks.h"
#include "runtime/tensor_map.h"

#include <climits>
#include <fmt/format.h>
#include <mutex>
#include <set>

namespace kfuse {

using codegen::KernelLaunch;
using codegen::LaunchParam;
using ir::ValueId;
using rt::GemmCall;

namespace rt {

void require_supported(Precision p) {
  if (p != Precision::FP32 && p != Precision::TF32 && p != Precision::BF16 &&
      p != Precision::FP32x3)
    throw Error(fmt::format("{} is not a kfuse::Precision value (FP32, TF32, BF16, FP32x3)",
                            static_cast<int>(p)));
  if (p == Precision::BF16)
    throw Error("precision bf16 is not implemented yet: kfuse's GEMM templates take f32 data "
                "(use fp32, tf32 or 3xtf32)");
}

codegen::GemmMath gemm_math(Precision p) {
  require_supported(p);
  return p == Precision::TF32     ? codegen::GemmMath::Tf32
         : p == Precision::FP32x3 ? codegen::GemmMath::Tf32x3
                                  : codegen::GemmMath::Fp32;
}

std::string target_arch(const std::string &requested) {
  if (!requested.empty())
    return requested;
  Driver &d = Driver::get();
  return d.available() ? d.arch() : "sm_90a";
}

} // namespace rt

struct Pipeline::Impl {
  Options options;
  bool fuse = true; // false: the unfused baseline (rt::PipelineAccess)
  ir::Graph graph;  // as parsed
  plan::Plan plan;
  codegen::Program program;
  rt::CompiledModule compiled;
  CompileReport report;
  std::vector<std::string> names; // printed names of plan.graph's values

  std::mutex mutex; // run() and bind() on one pipeline are serialised
  std::unique_ptr<rt::Module> module;
  std::vector<rt::Function> functions;
  CUcontext context = nullptr; // the module's: current at the first run
  CUdevice device = 0;         // the context's
  int multiprocessors = 0;     // of that device
  std::map<std::string, Tensor> bound;
  std::set<std::string> on_device;             // bound tensors found in device memory of `device`
  std::map<ValueId, rt::DeviceBuffer> scratch; // intermediates and partials, grown as needed
  std::map<std::pair<size_t, size_t>, rt::CachedTensorMap> tensor_maps; // (launch, param)
  std::function<void(const GemmCall &, CUstream)> gemm_override;

  std::string where() const { return "pipeline '" + graph.name + "'"; }
};

namespace {

// Binds symbolic dims of `type` from `shape`, checking every extent.
void unify(const std::string &where, const std::string &tensor, const ir::TensorType &type,
           const std::vector<int64_t> &shape, std::map<std::string, int64_t> &dims,
           std::map<std::string, std::string> &bound_by) {
  if (shape.size() != type.shape.size())
    throw Error(fmt::format("{}: tensor '{}' must be {}, got shape {} (rank {} instead of {})",
                            where, tensor, type.str(), ir::shape_text(shape), shape.size(),
                            type.rank()));
  for (size_t i = 0; i < shape.size(); ++i) {
    const ir::Dim &d = type.shape[i];
    if (!d.is_symbolic()) {
      if (shape[i] != d.value)
        throw Error(fmt::format("{}: tensor '{}' must be {}, got shape {}", where, tensor,
                                type.str(), ir::shape_text(shape)));
      continue;
    }
    if (shape[i] <= 0 || shape[i] > INT_MAX)
      throw Error(fmt::format("{}: tensor '{}' has extent {} for dim {}; dims must be in [1, {}]",
                              where, tensor, shape[i], d.sym, INT_MAX));
    auto [it, fresh] = dims.emplace(d.sym, shape[i]);
    if (!fresh && it->second != shape[i])
      throw Error(fmt::format("{}: dim {} is {} from tensor '{}' but {} from tensor '{}' {}", where,
                              d.sym, it->second, bound_by[d.sym], shape[i], tensor,
                              ir::shape_text(shape)));
    bound_by.emplace(d.sym, tensor);
  }
}

int64_t value_of(const ir::Dim &d, const std::map<std::string, int64_t> &dims) {
  return d.is_symbolic() ? dims.at(d.sym) : d.value;
}

} // namespace

Pipeline::Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pipeline::Pipeline(Pipeline &&) noexcept = default;
Pipeline &Pipeline::operator=(Pipeline &&) noexcept = default;
Pipeline::~Pipeline() = default;

Pipeline::Impl &Pipeline::impl() const {
  if (!impl_)
    throw Error("kfuse::Pipeline used after it was moved from");
  return *impl_;
}

Pipeline Pipeline::from_file(const std::string &path, const Options &options) {
  dsl::SourceFile src = dsl::SourceFile::read(path);
  return from_string(src.text(), path, options);
}

Pipeline Pipeline::from_string(const std::string &kf_text, const std::string &file_name,
                               const Options &options) {
  return rt::PipelineAccess::compile(kf_text, file_name, options, true);
}

Pipeline rt::PipelineAccess::unfused_from_file(const std::string &path, const Options &options) {
  dsl::SourceFile src = dsl::SourceFile::read(path);
  return compile(src.text(), path, options, false);
}

const ir::Graph &rt::PipelineAccess::graph(const Pipeline &p) { return p.impl().graph; }

Pipeline rt::PipelineAccess::compile(const std::string &kf_text, const std::string &file_name,
                                     const Options &options, bool fuse) {
  if (options.mode != Mode::Train && options.mode != Mode::Eval)
    throw Error(
        fmt::format("{} is not a kfuse::Mode value (Train, Eval)", static_cast<int>(options.mode)));
  rt::require_supported(options.precision);
  auto impl = std::make_unique<Pipeline::Impl>();
  impl->options = options;
  impl->fuse = fuse;
  ir::Mode mode = options.mode == Mode::Train ? ir::Mode::Train : ir::Mode::Eval;
  const std::string arch = rt::target_arch(options.arch);
  Lowered lowered = lower(dsl::SourceFile(file_name, kf_text),
                          {mode, rt::gemm_math(options.precision), fuse, arch});
  impl->graph = std::move(lowered.graph);
  impl->plan = std::move(lowered.plan);
  impl->program = std::move(lowered.program);
  impl->names = ir::printed_names(impl->plan.graph);

  rt::CompileRequest req;
  req.source = impl->program.source;
  req.file_name = impl->program.file_name;
  req.arch = arch;
  req.headers = codegen::embedded_templates();
  rt::DiskCache cache = rt::DiskCache::from_environment();
  impl->compiled = rt::compile(req, &cache);

  CompileReport &r = impl->report;
  r.milliseconds = impl->compiled.compile_ms;
  r.cache_hit = impl->compiled.cache_hit;
  r.arch = req.arch;
  r.cache_key = impl->compiled.key;
  for (const KernelLaunch &l : impl->program.launches) // in launch order, not ptxas's
    for (const rt::KernelResources &k : impl->compiled.kernels)
      if (k.name == l.entry)
        r.kernels.push_back(
            {k.name, k.registers, k.shared_bytes, k.stack_bytes, k.spill_stores, k.spill_loads});
  return Pipeline(std::move(impl));
}

const std::string &Pipeline::name() const { return impl().graph.name; }
const std::string &Pipeline::cuda_source() const { return impl().program.source; }
std::string Pipeline::plan_text() const { return plan::print_plan_text(impl().plan, {}); }
const CompileReport &Pipeline::report() const { return impl().report; }

std::vector<std::string> Pipeline::inputs() const {
  std::vector<std::string> out;
  for (ValueId id : impl().graph.declared(ir::ValueKind::Input))
    out.push_back(impl_->graph[id].name);
  return out;
}

std::vector<std::string> Pipeline::params() const {
  std::vector<std::string> out;
  for (const ir::Value &v : impl().graph.values)
    if (v.kind == ir::ValueKind::Param || v.kind == ir::ValueKind::State)
      out.push_back(v.name);
  return out;
}

size_t Pipeline::output_count() const { return impl().graph.outputs.size(); }

namespace {

std::vector<int64_t> bound_shape(const std::string &where, const ir::TensorType &t,
                                 const std::map<std::string, int64_t> &dims) {
  std::vector<int64_t> shape;
  for (const ir::Dim &d : t.shape) {
    if (d.is_symbolic() && !dims.count(d.sym))
      throw Error(fmt::format("{}: dim {} is not bound", where, d.sym));
    shape.push_back(value_of(d, dims));
  }
  return shape;
}

} // namespace

std::vector<int64_t> Pipeline::shape(const std::string &name,
                                     const std::map<std::string, int64_t> &dims) const {
  const ir::Graph &g = impl().graph;
  ValueId id = g.find(name);
  if (id < 0)
    throw Error(fmt::format("{}: no input, param or state named '{}'", impl_->where(), name));
  return bound_shape(impl_->where(), g[id].type, dims);
}

std::vector<int64_t> Pipeline::output_shape(size_t i,
                                            const std::map<std::string, int64_t> &dims) const {
  const ir::Graph &g = impl().graph;
  if (i >= g.outputs.size())
    throw Error(fmt::format("{}: no output {} (it has {})", impl_->where(), i, g.outputs.size()));
  return bound_shape(impl_->where(), g[g.outputs[i]].type, dims);
}

DType Pipeline::output_dtype(size_t i) const {
  const ir::Graph &g = impl().graph;
  if (i >= g.outputs.size())
    throw Error(fmt::format("{}: no output {} (it has {})", impl_->where(), i, g.outputs.size()));
  return rt::api_dtype(g[g.outputs[i]].type.dtype);
}

std::map<std::string, int64_t>
Pipeline::dims(const std::map<std::string, std::vector<int64_t>> &shapes) const {
  const Impl &im = impl();
  std::map<std::string, int64_t> dims;
  std::map<std::string, std::string> bound_by;
  for (const auto &[name, shape] : shapes) {
    ValueId id = im.graph.find(name);
    if (id < 0 || im.graph[id].is_op())
      throw Error(fmt::format("{}: no input, param or state named '{}'", im.where(), name));
    unify(im.where(), name, im.graph[id].type, shape, dims, bound_by);
  }
  return dims;
}

// Where the memory lives is checked at the first run after binding (it needs the driver and
// the pipeline's context; bind() needs neither).
void Pipeline::bind(const std::string &name, const Tensor &t) {
  Impl &im = impl();
  std::lock_guard<std::mutex> lock(im.mutex);
  const ir::Graph &g = im.graph;
  ValueId id = g.find(name);
  if (id < 0 || g[id].kind == ir::ValueKind::Input)
    throw Error(fmt::format("{}: '{}' is not a param or state of the pipeline", im.where(), name));
  rt::check_layout(im.where(), name, g[id].type, t);
  std::map<std::string, int64_t> dims;
  std::map<std::string, std::string> bound_by;
  unify(im.where(), name, g[id].type, t.shape, dims, bound_by);
  im.bound[name] = t;
  im.on_device.erase(name);
}

void rt::PipelineAccess::set_gemm_override(Pipeline &p,
                                           std::function<void(const GemmCall &, CUstream)> gemm) {
  Pipeline::Impl &im = p.impl();
  if (im.fuse)
    throw Error(im.where() +
                ": a GEMM override needs an unfused pipeline (PipelineAccess::unfused_from_file)");
  im.gemm_override = std::move(gemm);
}

void Pipeline::run(const std::map<std::string, Tensor> &inputs, const std::vector<Tensor> &outputs,
                   CUstream stream) {
  Impl &im = impl();
  std::lock_guard<std::mutex> lock(im.mutex);
  const ir::Graph &g = im.plan.graph;
  const std::string where = im.where();

  // Every declared tensor, checked and unified into the dims.
  std::map<std::string, int64_t> dims;
  std::map<std::string, std::string> bound_by;
  std::map<std::string, void *> pointers;
  for (const auto &[name, t] : inputs) {
    ValueId id = g.find(name);
    if (id < 0 || g[id].kind != ir::ValueKind::Input)
      throw Error(fmt::format("{}: '{}' is not an input of the pipeline", where, name));
  }
  for (const ir::Value &v : g.values) {
    if (v.is_op())
      continue;
    const Tensor *t = nullptr;
    if (v.kind == ir::ValueKind::Input) {
      auto it = inputs.find(v.name);
      if (it == inputs.end())
        throw Error(fmt::format("{}: input '{}' ({}) is missing", where, v.name, v.type.str()));
      t = &it->second;
    } else {
      auto it = im.bound.find(v.name);
      if (it == im.bound.end())
        throw Error(fmt::format("{}: {} '{}' ({}) is not bound", where,
                                v.kind == ir::ValueKind::State ? "state" : "param", v.name,
                                v.type.str()));
      t = &it->second;
    }
    rt::check_layout(where, v.name, v.type, *t);
    unify(where, v.name, v.type, t->shape, dims, bound_by);
    pointers[v.name] = t->data;
  }
  if (outputs.size() != g.outputs.size())
    throw Error(fmt::format("{}: expected {} output tensor(s), got {}", where, g.outputs.size(),
                            outputs.size()));
  std::map<ValueId, void *> output_of;
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::string name = fmt::format("output {}", i);
    rt::check_layout(where, name, g[g.outputs[i]].type, outputs[i]);
    unify(where, name, g[g.outputs[i]].type, outputs[i].shape, dims, bound_by);
    output_of[g.outputs[i]] = outputs[i].data;
  }
  for (const std::string &d : g.dims)
    if (!dims.count(d))
      throw Error(fmt::format("{}: dim {} is bound by no tensor", where, d));
  for (const ir::Value &v : g.values)
    if (v.is_effect()) {
      const ir::AttrValue &c = v.attrs.at("count");
      int64_t count = c.dim.empty() ? static_cast<int64_t>(c.number) : dims.at(c.dim);
      if (count <= 1)
        throw Error(fmt::format("{}: batchnorm in train mode needs more than 1 row, got {}{}",
                                where, c.dim.empty() ? "" : c.dim + "=", count));
    }
  {
    std::vector<rt::TensorBytes> written, read;
    for (size_t i = 0; i < outputs.size(); ++i)
      written.push_back(rt::bytes_of(fmt::format("output {}", i), outputs[i]));
    for (const ir::Value &v : g.values) {
      if (v.is_op())
        continue;
      const Tensor &t = v.kind == ir::ValueKind::Input ? inputs.at(v.name) : im.bound.at(v.name);
      (v.kind == ir::ValueKind::State ? written : read)
          .push_back(rt::bytes_of(fmt::format("{} '{}'", ir::value_kind_name(v.kind), v.name), t));
    }
    rt::check_no_aliasing(where, written, read);
  }

  rt::Driver &driver = rt::Driver::get();
  CUcontext context = driver.make_current();
  if (!im.module) { // first run: load once, so later runs only launch
    im.module = std::make_unique<rt::Module>(im.compiled.cubin);
    for (const KernelLaunch &l : im.program.launches)
      im.functions.push_back(im.module->function(l.entry));
    im.context = context;
    im.device = driver.current_device();
    driver.check(driver.cuDeviceGetAttribute(&im.multiprocessors,
                                             CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, im.device),
                 "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  }
  if (context != im.context)
    throw Error(fmt::format(
        "{}: the current CUDA context is not the one the pipeline ran in first (device {}); "
        "use one Pipeline per device or context",
        where, im.device));
  for (const auto &[name, t] : inputs)
    rt::check_device_memory(where, name, t, im.device);
  for (size_t i = 0; i < outputs.size(); ++i)
    rt::check_device_memory(where, fmt::format("output {}", i), outputs[i], im.device);
  for (const auto &[name, t] : im.bound)
    if (!im.on_device.count(name)) {
      rt::check_device_memory(where, name, t, im.device);
      im.on_device.insert(name);
    }
  const int sms = im.multiprocessors;
  auto buffer = [&](ValueId key, size_t bytes) -> CUdeviceptr {
    rt::DeviceBuffer &b = im.scratch[key];
    if (b.size() < bytes)
      b = rt::DeviceBuffer(bytes);
    return b.ptr();
  };
  auto elements = [&](const ir::TensorType &t) {
    size_t n = 1;
    for (const ir::Dim &d : t.shape)
      n *= static_cast<size_t>(value_of(d, dims));
    return n;
  };
  auto pointer_of = [&](ValueId v) -> CUdeviceptr {
    if (!g[v].is_op())
      return reinterpret_cast<CUdeviceptr>(pointers.at(g[v].name));
    auto it = output_of.find(v);
    if (it != output_of.end())
      return reinterpret_cast<CUdeviceptr>(it->second);
    return buffer(v, elements(g[v].type) * sizeof(float)); // intermediates are f32 (plan.h)
  };
  // Partials: mean and M2 per column per row tile, keyed after the value ids.
  auto partials = [&](const LaunchParam &p) {
    const ir::TensorType &t = g[p.value].type;
    const int64_t rows = value_of(t.shape[0], dims);
    size_t bytes = static_cast<size_t>((rows + p.tile_rows - 1) / p.tile_rows) *
                   static_cast<size_t>(value_of(t.shape[1], dims)) * sizeof(float);
    return buffer(static_cast<ValueId>(g.values.size()) + 2 * p.value +
                      (p.kind == LaunchParam::Kind::PartialM2),
                  bytes);
  };

  // An output that is a declared tensor, or a value returned twice, is copied into place. A
  // returned state is its value at entry, as every read of state sees it: copied before any
  // kernel can update it in place; a returned op value once the kernels have written it.
  auto copy_outputs = [&](bool declared) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (g[g.outputs[i]].is_op() == declared)
        continue;
      CUdeviceptr written = pointer_of(g.outputs[i]);
      CUdeviceptr dest = reinterpret_cast<CUdeviceptr>(outputs[i].data);
      if (written != dest)
        driver.check(driver.cuMemcpyDtoDAsync(
                         dest, written,
                         elements(g[g.outputs[i]].type) *
                             static_cast<size_t>(ir::dtype_bytes(g[g.outputs[i]].type.dtype)),
                         stream),
                     "cuMemcpyDtoDAsync(output)");
    }
  };
  copy_outputs(/*declared=*/true);
  for (size_t k = 0; k < im.program.launches.size(); ++k) {
    const KernelLaunch &l = im.program.launches[k];
    const rt::LaunchShape shape = rt::resolve(l.geometry, dims, sms);
    std::vector<CUdeviceptr> ptrs;
    std::vector<int> ints;
    ptrs.reserve(l.params.size());
    ints.reserve(l.params.size());
    std::vector<void *> args;
    for (size_t i = 0; i < l.params.size(); ++i) {
      const LaunchParam &p = l.params[i];
      switch (p.kind) {
      case LaunchParam::Kind::Buffer:
        ptrs.push_back(pointer_of(p.value));
        args.push_back(&ptrs.back());
        break;
      case LaunchParam::Kind::PartialMean:
      case LaunchParam::Kind::PartialM2:
        ptrs.push_back(partials(p));
        args.push_back(&ptrs.back());
        break;
      case LaunchParam::Kind::Dim:
        ints.push_back(static_cast<int>(dims.at(p.dim)));
        args.push_back(&ints.back());
        break;
      case LaunchParam::Kind::SmemFloats:
        ints.push_back(shape.row_floats);
        args.push_back(&ints.back());
        break;
      case LaunchParam::Kind::TensorMap: {
        const CUtensorMap &map = rt::tensor_map(
            im.tensor_maps[{k, i}], p.map, pointer_of(p.value), value_of(p.map.rows, dims),
            value_of(p.map.inner, dims), where, im.names[static_cast<size_t>(p.value)]);
        args.push_back(const_cast<CUtensorMap *>(&map));
        break;
      }
      }
    }
    const plan::Kernel &kernel = im.plan.kernels[k];
    if (l.kind == plan::KernelKind::Gemm && im.gemm_override) {
      const ir::Value &mm = g[kernel.anchor];
      int64_t m = value_of(l.rows, dims), n = value_of(l.cols, dims),
              inner = value_of(l.inner, dims);
      bool trans_b = mm.op == ir::OpKind::Linear;
      im.gemm_override(GemmCall{trans_b, m, n, inner,
                                reinterpret_cast<const float *>(pointer_of(mm.args[0])),
                                reinterpret_cast<const float *>(pointer_of(mm.args[1])),
                                reinterpret_cast<float *>(pointer_of(kernel.stores.at(0))), inner,
                                trans_b ? inner : n, n},
                       stream);
      continue;
    }
    rt::launch(im.functions[k], shape.grid, shape.block, shape.shared_bytes, stream, args.data(),
               shape.cluster);
  }
  copy_outputs(/*declared=*/false);
}

} // namespace kfuse
