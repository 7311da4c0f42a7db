// kfuse::Pipeline: the .kf text, planned, generated and compiled once; launched many times.
#include "runtime/pipeline.h"
#include "compiler/extent.h"

#include "compiler/codegen/embedded_templates.h"
#include "compiler/dump.h"
#include "runtime/disk_cache.h"
#include "runtime/driver.h"
#include "runtime/gemm_tuner.h"
#include "runtime/launch_geometry.h"
#include "runtime/pipeline_impl.h"
#include "runtime/sass_disassembler.h"
#include "runtime/tuning_store.h"

#include <algorithm>
#include <climits>
#include <fmt/format.h>

namespace kfuse {

using exec::DeclaredTensor;

namespace rt {

std::string target_arch(const std::string &requested) {
  if (!requested.empty())
    return requested;
  Driver &d = Driver::get();
  return d.available() ? d.arch() : "sm_90a";
}

void drop_spilling_variants(exec::Executable &executable, CompileReport &report) {
  for (exec::Kernel &launch : executable.kernels) {
    auto spilled = [&](const exec::Kernel &v) {
      for (KernelReport &k : report.kernels)
        if (k.name == v.entry && (k.spill_stores > 0 || k.spill_loads > 0)) {
          k.unused = fmt::format("ptxas spilled {} bytes (stores) and {} bytes (loads) in it; "
                                 "{} or its other variants run instead",
                                 k.spill_stores, k.spill_loads, launch.entry);
          return true;
        }
      return false;
    };
    launch.variants.erase(std::remove_if(launch.variants.begin(), launch.variants.end(), spilled),
                          launch.variants.end());
  }
}

} // namespace rt

void unify(const std::string &where, const std::string &tensor, const exec::TensorType &type,
           const std::vector<int64_t> &shape, std::map<std::string, int64_t> &dims,
           std::map<std::string, std::string> &bound_by) {
  if (shape.size() != type.shape.size())
    throw Error(fmt::format("{}: tensor '{}' must be {}, got shape {} (rank {} instead of {})",
                            where, tensor, type.str(), exec::shape_text(shape), shape.size(),
                            type.shape.size()));
  for (size_t i = 0; i < shape.size(); ++i) {
    const exec::Extent &d = type.shape[i];
    if (!d.is_symbolic()) {
      if (shape[i] != d.value)
        throw Error(fmt::format("{}: tensor '{}' must be {}, got shape {}", where, tensor,
                                type.str(), exec::shape_text(shape)));
      continue;
    }
    if (!d.factors.empty()) { // a view's product of dims (`B*T`): checked once they are bound
      bool bound = true;
      for (const std::string &name : d.factors)
        bound = bound && dims.count(name);
      if (bound && shape[i] != d.evaluate(dims))
        throw Error(fmt::format("{}: tensor '{}' must be {}, got shape {} ({} = {})", where, tensor,
                                type.str(), exec::shape_text(shape), d.str(), d.evaluate(dims)));
      continue;
    }
    if (auto problem = dim_value_problem(d.sym, shape[i]))
      throw Error(fmt::format("{}: tensor '{}' of shape {}: {}", where, tensor,
                              exec::shape_text(shape), *problem));
    auto [it, fresh] = dims.emplace(d.sym, shape[i]);
    if (!fresh && it->second != shape[i])
      throw Error(fmt::format("{}: dim {} is {} from tensor '{}' but {} from tensor '{}' {}", where,
                              d.sym, it->second, bound_by[d.sym], shape[i], tensor,
                              exec::shape_text(shape)));
    bound_by.emplace(d.sym, tensor);
  }
}

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
  return from_string(exec::read_kf_file(path), path, options);
}

Pipeline Pipeline::from_string(const std::string &kf_text, const std::string &file_name,
                               const Options &options) {
  using rt::PipelineAccess;
  if (!options.tune_at_start.empty()) {
    if (!options.use_tuned)
      throw Error(fmt::format("{}: Options::tune_at_start stores tuned configurations that "
                              "Options::use_tuned = false would not use",
                              file_name));
    if (options.backward)
      throw Error(fmt::format("{}: Options::tune_at_start tunes the pipeline's forward alone, not "
                              "the forward that saves for Options::backward and the backward",
                              file_name));
    rt::TuningRequest request;
    request.dims = options.tune_at_start;
    rt::tune_gemms(kf_text, file_name, options, request);
  }
  const exec::Request request = PipelineAccess::request(options, true);
  if (options.backward)
    return PipelineAccess::compile_training(exec::compile_training(kf_text, file_name, request));
  return PipelineAccess::compile(exec::compile_executable(kf_text, file_name, request));
}

const exec::Executable &rt::PipelineAccess::executable(const Pipeline &p) {
  return p.impl().executable;
}

exec::Request rt::PipelineAccess::request(const Options &options, bool fuse) {
  if (options.batch_stats_ranks < 0)
    throw Error(fmt::format("Options::batch_stats_ranks is {}; it must be 0 (each run's own "
                            "batch) or the number of ranks that exchange batch statistics",
                            options.batch_stats_ranks));
  const Target target{rt::target_arch(options.arch), options.precision, options.max_split_k,
                      options.batch_stats_ranks};
  exec::Request r{options.mode, target, fuse, {}, {options.frozen.begin(), options.frozen.end()}};
  // Tuned configurations are per device: without one there is nothing to look up.
  if (fuse && options.use_tuned && rt::Driver::get().available())
    r.tunings = [](const std::vector<exec::TunableGemm> &gemms) {
      return rt::TuningStore::from_environment().tunings(rt::DeviceKey::current(), gemms);
    };
  return r;
}

namespace {

rt::CompileRequest compile_request(const exec::Executable &e) {
  rt::CompileRequest req;
  req.source = e.source;
  req.file_name = e.file_name;
  req.arch = e.target.arch;
  req.headers = codegen::embedded_templates();
  return req;
}

} // namespace

rt::CompiledModule rt::PipelineAccess::compile_source(const exec::Executable &executable) {
  rt::DiskCache cache = rt::DiskCache::from_environment();
  return rt::compile(compile_request(executable), &cache);
}

// Compiles the executable's source with NVRTC (through the disk cache) unless `done` holds
// that compile already, dumps PTX and SASS where KFUSE_DUMP asks, and reports every kernel's
// resources in launch order (not ptxas's).
void Pipeline::Impl::compile_module(std::optional<rt::CompiledModule> done) {
  Impl &im = *this;
  im.compiled = done ? std::move(*done) : rt::PipelineAccess::compile_source(im.executable);
  const Dump dump(im.executable.interface.name,
                  im.executable.mode == Mode::Train ? "train" : "eval");
  if (dump.wants("ptx"))
    dump.emit("ptx", ".ptx", rt::compile_ptx(compile_request(im.executable)));
  if (dump.wants("sass"))
    dump.emit("sass", ".sass", rt::disassemble_sass(im.compiled.cubin, rt::sass_tool_dirs()));

  CompileReport &r = im.report;
  r.milliseconds = im.compiled.compile_ms;
  r.cache_hit = im.compiled.cache_hit;
  r.arch = im.executable.target.arch;
  r.cache_key = im.compiled.key;
  for (const exec::Kernel &launch : im.executable.kernels)
    for (size_t v = 0; v <= launch.variants.size(); ++v) {
      const exec::Kernel &l = rt::variant(launch, v);
      for (const rt::KernelResources &k : im.compiled.kernels)
        if (k.name == l.entry)
          r.kernels.push_back({k.name, k.registers, k.shared_bytes, k.stack_bytes, k.spill_stores,
                               k.spill_loads, l.config, v > 0, ""});
    }
}

Pipeline rt::PipelineAccess::compile(exec::Executable executable) {
  return compile_with(std::move(executable), std::nullopt);
}

Pipeline rt::PipelineAccess::compile(exec::Executable executable, CompiledModule module) {
  return compile_with(std::move(executable), std::move(module));
}

Pipeline rt::PipelineAccess::compile_with(exec::Executable executable,
                                          std::optional<CompiledModule> module) {
  auto impl = std::make_unique<Pipeline::Impl>();
  impl->executable = std::move(executable);
  const Target &target = impl->executable.target;
  const exec::Interface &in = impl->executable.interface;
  impl->where = "pipeline '" + in.name + "'";
  impl->input_position.assign(in.declared.size(), -1);
  for (size_t i = 0; i < in.declared.size(); ++i)
    if (in.declared[i].kind == DeclaredTensor::Kind::Input) {
      impl->input_position[i] = static_cast<int>(impl->input_ids.size());
      impl->input_ids.push_back(i);
    }
  for (size_t i = 0; i < in.outputs.size(); ++i)
    impl->output_names.push_back(fmt::format("output {}", i));
  impl->own_outputs = in.outputs.size();
  if (target.max_split_k < 0)
    throw Error(fmt::format("{}: Options::max_split_k is {}; it must be 0 (the shape's choice) "
                            "or a positive cap",
                            impl->where, target.max_split_k));
  impl->compile_module(std::move(module));
  rt::drop_spilling_variants(impl->executable, impl->report);
  impl->table = std::make_unique<rt::LaunchTable>(impl->executable, target.max_split_k);
  return Pipeline(std::move(impl));
}

const std::string &Pipeline::name() const { return impl().executable.interface.name; }
const std::string &Pipeline::cuda_source() const { return impl().executable.source; }
std::string Pipeline::plan_text() const { return impl().executable.plan_text; }
const CompileReport &Pipeline::report() const { return impl().report; }

std::vector<std::string> Pipeline::inputs() const {
  std::vector<std::string> out;
  for (const DeclaredTensor &d : impl().executable.interface.declared)
    if (d.kind == DeclaredTensor::Kind::Input)
      out.push_back(d.name);
  return out;
}

std::vector<std::string> Pipeline::params() const {
  std::vector<std::string> out;
  for (const DeclaredTensor &d : impl().executable.interface.declared)
    if (d.kind != DeclaredTensor::Kind::Input)
      out.push_back(d.name);
  return out;
}

size_t Pipeline::output_count() const { return impl().own_outputs; }

namespace {

std::vector<int64_t> bound_shape(const std::string &where, const exec::TensorType &t,
                                 const std::map<std::string, int64_t> &dims) {
  if (auto problem = dim_values_problem(dims))
    throw Error(fmt::format("{}: {}", where, *problem));
  std::vector<int64_t> shape;
  for (const exec::Extent &d : t.shape) {
    // A view's extent may be a product of dims (`B*T`): each of them must be bound.
    for (const std::string &name : d.factors.empty() ? std::vector<std::string>{d.sym} : d.factors)
      if (!name.empty() && !dims.count(name))
        throw Error(fmt::format("{}: dim {} is not bound", where, name));
    shape.push_back(d.evaluate(dims));
  }
  return shape;
}

} // namespace

const exec::TensorType &Pipeline::Impl::output_type(size_t i) const {
  if (i >= own_outputs)
    throw Error(fmt::format("{}: no output {} (it has {})", where, i, own_outputs));
  return executable.interface.outputs[i];
}

std::vector<int64_t> Pipeline::shape(const std::string &name,
                                     const std::map<std::string, int64_t> &dims) const {
  const exec::Interface &in = impl().executable.interface;
  const int i = in.find(name);
  if (i < 0)
    throw Error(fmt::format("{}: no input, param or state named '{}'", impl_->where, name));
  return bound_shape(impl_->where, in.declared[static_cast<size_t>(i)].type, dims);
}

std::vector<int64_t> Pipeline::output_shape(size_t i,
                                            const std::map<std::string, int64_t> &dims) const {
  return bound_shape(impl().where, impl_->output_type(i), dims);
}

DType Pipeline::output_dtype(size_t i) const { return impl().output_type(i).dtype; }

std::map<std::string, int64_t>
Pipeline::dims(const std::map<std::string, std::vector<int64_t>> &shapes) const {
  const Impl &im = impl();
  const exec::Interface &in = im.executable.interface;
  std::map<std::string, int64_t> dims;
  std::map<std::string, std::string> bound_by;
  for (const auto &[name, shape] : shapes) {
    const int i = in.find(name);
    if (i < 0)
      throw Error(fmt::format("{}: no input, param or state named '{}'", im.where, name));
    unify(im.where, name, in.declared[static_cast<size_t>(i)].type, shape, dims, bound_by);
  }
  return dims;
}

// Where the memory lives is checked at the first run after binding (it needs the driver and
// the pipeline's context; bind() needs neither).
void Pipeline::bind(const std::string &name, const Tensor &t) {
  Impl &im = impl();
  std::lock_guard<std::mutex> lock(im.mutex);
  const exec::Interface &in = im.executable.interface;
  const int i = in.find(name);
  if (i < 0 || in.declared[static_cast<size_t>(i)].kind == DeclaredTensor::Kind::Input)
    throw Error(fmt::format("{}: '{}' is not a param or state of the pipeline", im.where, name));
  const exec::TensorType &type = in.declared[static_cast<size_t>(i)].type;
  rt::check_layout(im.where, name, type, t);
  std::map<std::string, int64_t> dims;
  std::map<std::string, std::string> bound_by;
  unify(im.where, name, type, t.shape, dims, bound_by);
  // The tensor already bound, bound again (a weight updated in place): its checks hold and the
  // launch table points at it; only its per-bind kernels run again.
  auto was = im.bound.find(name);
  const bool same =
      was != im.bound.end() && was->second.data == t.data && rt::same_layout(was->second, t);
  im.bound[name] = t;
  if (!same) {
    im.on_device.erase(name);
    im.recheck = true;
  }
  im.per_bind_stale = true;
  if (im.training) // the backward binds it again, running its own per-bind kernels again
    for (size_t p = 0; p < im.training->params.size(); ++p)
      if (im.training->params[p] == name && p < im.training->backward_bound.size())
        im.training->backward_bound[p] = Tensor{};
}

void rt::PipelineAccess::set_gemm_hook(Pipeline &p, GemmHook hook) {
  Pipeline::Impl &im = p.impl();
  std::lock_guard<std::mutex> lock(im.mutex);
  if (im.training) // a training pipeline's backward runs its GEMMs through the hook too
    set_gemm_hook(im.training->backward, hook);
  im.gemm_hook = std::move(hook);
  im.run_graph.reset(); // a captured graph holds the launches the hook would replace
  im.steady_runs = 0;
}

std::vector<rt::GemmLaunch> rt::PipelineAccess::gemm_launches(const Pipeline &p) {
  const Pipeline::Impl &im = p.impl();
  std::vector<GemmLaunch> gemms;
  for (size_t k = 0; k < im.executable.kernels.size(); ++k) {
    const exec::Kernel &l = im.executable.kernels[k];
    if (!l.gemm)
      continue;
    // The SM count is read at the first run, which also resolves the table for its dims.
    if (im.multiprocessors == 0) { // not run yet
      gemms.push_back({l.entry, l.tile, l.config, 0});
      continue;
    }
    const exec::Kernel &run = im.table->launched(k);
    gemms.push_back({run.entry, run.tile, run.config, im.table->splits(k)});
  }
  return gemms;
}

} // namespace kfuse
