// kfuse::Pipeline: the .kf text, planned, generated and compiled once; launched many times.
#include "runtime/pipeline.h"

#include "compiler/codegen/embedded_templates.h"
#include "compiler/dsl/parser.h"
#include "compiler/dump.h"
#include "compiler/ir/interpreter.h"
#include "compiler/ir/printer.h"
#include "compiler/lower.h"
#include "compiler/plan/plan_printer.h"
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

using codegen::KernelLaunch;
using ir::ValueId;

namespace rt {

void require_supported(Precision p) {
  if (p != Precision::FP32 && p != Precision::TF32 && p != Precision::BF16 &&
      p != Precision::FP32x3)
    throw Error(fmt::format("{} is not a kfuse::Precision value (FP32, TF32, BF16, FP32x3)",
                            static_cast<int>(p)));
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

void drop_spilling_variants(codegen::Program &program, CompileReport &report) {
  for (KernelLaunch &launch : program.launches) {
    auto spilled = [&](const KernelLaunch &v) {
      for (KernelReport &k : report.kernels)
        if (k.name == v.entry && (k.spill_stores > 0 || k.spill_loads > 0)) {
          k.unused = fmt::format("ptxas spilled {} bytes (stores) and {} bytes (loads) in it; "
                                 "{} or its other variants run instead",
                                 k.spill_stores, k.spill_loads, launch.entry);
          return true;
        }
      return false;
    };
    launch.by_rows.erase(std::remove_if(launch.by_rows.begin(), launch.by_rows.end(), spilled),
                         launch.by_rows.end());
  }
}

} // namespace rt

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
    if (!d.factors.empty()) { // a view's product of dims (`B*T`): checked once they are bound
      bool bound = true;
      for (const std::string &name : d.factors)
        bound = bound && dims.count(name);
      if (bound && shape[i] != d.evaluate(dims))
        throw Error(fmt::format("{}: tensor '{}' must be {}, got shape {} ({} = {})", where, tensor,
                                type.str(), ir::shape_text(shape), d.str(), d.evaluate(dims)));
      continue;
    }
    if (auto problem = ir::dim_value_problem(d.sym, shape[i]))
      throw Error(fmt::format("{}: tensor '{}' of shape {}: {}", where, tensor,
                              ir::shape_text(shape), *problem));
    auto [it, fresh] = dims.emplace(d.sym, shape[i]);
    if (!fresh && it->second != shape[i])
      throw Error(fmt::format("{}: dim {} is {} from tensor '{}' but {} from tensor '{}' {}", where,
                              d.sym, it->second, bound_by[d.sym], shape[i], tensor,
                              ir::shape_text(shape)));
    bound_by.emplace(d.sym, tensor);
  }
}

namespace {

int64_t value_of(const ir::Dim &d, const std::map<std::string, int64_t> &dims) {
  return d.evaluate(dims);
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
  using rt::PipelineAccess;
  const dsl::SourceFile src(file_name, kf_text);
  if (!options.tune_at_start.empty()) {
    if (!options.use_tuned)
      throw Error(fmt::format("{}: Options::tune_at_start stores tuned configurations that "
                              "Options::use_tuned = false would not use",
                              file_name));
    rt::TuningRequest request;
    request.dims = options.tune_at_start;
    rt::tune_gemms(src, options, request);
  }
  return PipelineAccess::compile(lower(src, PipelineAccess::lower_options(options, true)), options,
                                 true);
}

const ir::Graph &rt::PipelineAccess::graph(const Pipeline &p) { return p.impl().graph; }

LowerOptions rt::PipelineAccess::lower_options(const Options &options, bool fuse) {
  if (options.mode != Mode::Train && options.mode != Mode::Eval)
    throw Error(
        fmt::format("{} is not a kfuse::Mode value (Train, Eval)", static_cast<int>(options.mode)));
  LowerOptions lo{options.mode == Mode::Train ? ir::Mode::Train : ir::Mode::Eval,
                  rt::gemm_math(options.precision), fuse, rt::target_arch(options.arch)};
  lo.autocast_bf16 = options.precision == Precision::BF16;
  // Tuned configurations are per device: without one there is nothing to look up.
  if (fuse && options.use_tuned && rt::Driver::get().available())
    lo.tunings = [](const std::vector<select::GemmKey> &gemms) {
      return rt::TuningStore::from_environment().tunings(rt::DeviceKey::current(), gemms);
    };
  return lo;
}

Pipeline rt::PipelineAccess::compile(Lowered lowered, const Options &options, bool fuse) {
  const LowerOptions lowered_for = lower_options(options, fuse);
  auto impl = std::make_unique<Pipeline::Impl>();
  impl->options = options;
  impl->fuse = fuse;
  const ir::Mode mode = lowered_for.mode;
  const std::string &arch = lowered_for.arch;
  impl->graph = std::move(lowered.graph);
  impl->plan = std::move(lowered.plan);
  impl->program = std::move(lowered.program);
  impl->names = ir::printed_names(impl->plan.graph);
  impl->where = "pipeline '" + impl->graph.name + "'";
  const ir::Graph &g = impl->plan.graph;
  impl->input_position.assign(g.values.size(), -1);
  for (ValueId id : impl->graph.declared(ir::ValueKind::Input)) {
    impl->input_position[static_cast<size_t>(g.find(impl->graph[id].name))] =
        static_cast<int>(impl->input_ids.size());
    impl->input_ids.push_back(g.find(impl->graph[id].name));
  }
  for (size_t i = 0; i < g.outputs.size(); ++i)
    impl->output_names.push_back(fmt::format("output {}", i));
  if (options.max_split_k < 0)
    throw Error(fmt::format("{}: Options::max_split_k is {}; it must be 0 (the shape's choice) "
                            "or a positive cap",
                            impl->where, options.max_split_k));

  rt::CompileRequest req;
  req.source = impl->program.source;
  req.file_name = impl->program.file_name;
  req.arch = arch;
  req.headers = codegen::embedded_templates();
  rt::DiskCache cache = rt::DiskCache::from_environment();
  impl->compiled = rt::compile(req, &cache);
  const Dump dump(impl->graph.name, mode);
  if (dump.wants("ptx"))
    dump.emit("ptx", ".ptx", rt::compile_ptx(req));
  if (dump.wants("sass"))
    dump.emit("sass", ".sass", rt::disassemble_sass(impl->compiled.cubin, rt::sass_tool_dirs()));

  CompileReport &r = impl->report;
  r.milliseconds = impl->compiled.compile_ms;
  r.cache_hit = impl->compiled.cache_hit;
  r.arch = req.arch;
  r.cache_key = impl->compiled.key;
  for (KernelLaunch &launch : impl->program.launches) // in launch order, not ptxas's
    for (size_t v = 0; v <= launch.by_rows.size(); ++v) {
      const KernelLaunch &l = rt::variant(launch, v);
      for (const rt::KernelResources &k : impl->compiled.kernels)
        if (k.name == l.entry)
          r.kernels.push_back({k.name, k.registers, k.shared_bytes, k.stack_bytes, k.spill_stores,
                               k.spill_loads, l.config, v > 0, ""});
    }
  rt::drop_spilling_variants(impl->program, r);
  impl->table = std::make_unique<rt::LaunchTable>(impl->program, impl->plan, impl->names,
                                                  options.max_split_k);
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
  if (auto problem = ir::dim_values_problem(dims))
    throw Error(fmt::format("{}: {}", where, *problem));
  std::vector<int64_t> shape;
  for (const ir::Dim &d : t.shape) {
    // A view's extent may be a product of dims (`B*T`): each of them must be bound.
    for (const std::string &name : d.factors.empty() ? std::vector<std::string>{d.sym} : d.factors)
      if (!name.empty() && !dims.count(name))
        throw Error(fmt::format("{}: dim {} is not bound", where, name));
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
    throw Error(fmt::format("{}: no input, param or state named '{}'", impl_->where, name));
  return bound_shape(impl_->where, g[id].type, dims);
}

std::vector<int64_t> Pipeline::output_shape(size_t i,
                                            const std::map<std::string, int64_t> &dims) const {
  const ir::Graph &g = impl().graph;
  if (i >= g.outputs.size())
    throw Error(fmt::format("{}: no output {} (it has {})", impl_->where, i, g.outputs.size()));
  return bound_shape(impl_->where, g[g.outputs[i]].type, dims);
}

DType Pipeline::output_dtype(size_t i) const {
  const ir::Graph &g = impl().graph;
  if (i >= g.outputs.size())
    throw Error(fmt::format("{}: no output {} (it has {})", impl_->where, i, g.outputs.size()));
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
      throw Error(fmt::format("{}: no input, param or state named '{}'", im.where, name));
    unify(im.where, name, im.graph[id].type, shape, dims, bound_by);
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
    throw Error(fmt::format("{}: '{}' is not a param or state of the pipeline", im.where, name));
  rt::check_layout(im.where, name, g[id].type, t);
  std::map<std::string, int64_t> dims;
  std::map<std::string, std::string> bound_by;
  unify(im.where, name, g[id].type, t.shape, dims, bound_by);
  im.bound[name] = t;
  im.on_device.erase(name);
  im.recheck = true;
  im.per_bind_stale = true;
}

void rt::PipelineAccess::set_gemm_override(Pipeline &p,
                                           std::function<void(const GemmCall &, CUstream)> gemm) {
  Pipeline::Impl &im = p.impl();
  if (im.fuse)
    throw Error(im.where + ": a GEMM override needs an unfused pipeline (lowered with fuse off)");
  im.gemm_override = std::move(gemm);
}

std::vector<rt::GemmLaunch> rt::PipelineAccess::gemm_launches(const Pipeline &p) {
  const Pipeline::Impl &im = p.impl();
  std::vector<GemmLaunch> gemms;
  for (size_t k = 0; k < im.program.launches.size(); ++k) {
    const KernelLaunch &l = im.program.launches[k];
    if (l.kind != plan::KernelKind::Gemm)
      continue;
    // The SM count is read at the first run, which also resolves the table for its dims.
    if (im.multiprocessors == 0) { // not run yet
      gemms.push_back({l.entry, l.tile, l.config, 0});
      continue;
    }
    const KernelLaunch &run = im.table->launched(k);
    gemms.push_back({run.entry, run.tile, run.config, im.table->splits(k)});
  }
  return gemms;
}

} // namespace kfuse
