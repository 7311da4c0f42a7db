#include "compiler/build_executable.h"

#include "compiler/dsl/parser.h"
#include "compiler/ir/grad.h"
#include "compiler/ir/infer.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/views.h"
#include "compiler/plan/plan_printer.h"

#include <fmt/format.h>

namespace kfuse {

using codegen::KernelLaunch;
using codegen::LaunchParam;
using exec::Buffer;
using exec::WorkspaceEntry;
using ir::ValueId;

exec::Geometry geometry_of(const codegen::LaunchGeometry &g) {
  exec::Geometry e;
  e.grid = static_cast<exec::Geometry::Grid>(g.grid);
  e.rows = g.rows;
  e.cols = g.cols;
  e.tile_rows = g.tile_rows;
  e.tile_cols = g.tile_cols;
  e.blocks_per_sm = g.blocks_per_sm;
  e.block_threads = g.block_threads;
  e.smem_bytes = g.smem_bytes;
  e.row_length = g.row_length;
  e.row_bytes_cap = g.row_bytes_cap;
  e.cluster = g.cluster;
  e.inner = g.inner;
  e.tile_k = g.tile_k;
  e.split_cost_kblocks = g.split_cost_kblocks;
  e.max_splits_by_class = g.max_splits_by_class;
  e.kblock_time = g.kblock_time;
  e.min_waves = g.min_waves;
  e.waits_prior_grid = g.waits_prior_grid;
  return e;
}

DType api_dtype(ir::DType t) {
  switch (t) {
  case ir::DType::F32:
    return DType::F32;
  case ir::DType::F16:
    return DType::F16;
  case ir::DType::BF16:
    return DType::BF16;
  case ir::DType::I64:
    return DType::I64;
  }
  throw Error("internal error: an element type with no kfuse::DType");
}

ir::DType ir_dtype(DType t) {
  switch (t) {
  case DType::F32:
    return ir::DType::F32;
  case DType::F16:
    return ir::DType::F16;
  case DType::BF16:
    return ir::DType::BF16;
  case DType::I64:
    return ir::DType::I64;
  }
  throw Error(fmt::format("{} is not a kfuse::DType value", static_cast<int>(t)));
}

exec::TensorType type_of(const ir::TensorType &t) {
  exec::TensorType e{api_dtype(t.dtype), {}};
  for (const ir::Dim &d : t.shape)
    e.shape.push_back(d);
  return e;
}

namespace {

exec::DeclaredTensor::Kind kind_of(ir::ValueKind k) {
  switch (k) {
  case ir::ValueKind::Input:
    return exec::DeclaredTensor::Kind::Input;
  case ir::ValueKind::Param:
    return exec::DeclaredTensor::Kind::Param;
  case ir::ValueKind::State:
    return exec::DeclaredTensor::Kind::State;
  case ir::ValueKind::Op:
    break;
  }
  throw Error("internal error: an op value is no declared tensor");
}

// Builds the Executable in the order the runtime lays out its workspace: each kernel's
// parameters, then its bare GEMM's operands, then the outputs' sources.
class Builder {
public:
  Builder(const plan::Plan &plan, const codegen::Program &program)
      : plan_(plan), g_(plan.graph), program_(program), names_(ir::printed_names(plan.graph)),
        declared_index_(plan.graph.values.size(), -1) {}

  exec::Executable build();

private:
  void add_interface();
  exec::Kernel kernel_of(const KernelLaunch &l, size_t k, const exec::Kernel *main);
  exec::Param param_of(const LaunchParam &p, size_t k);
  void add_bare_gemm(exec::Kernel &kernel, const plan::Kernel &planned);
  void add_exchange(const plan::Kernel &planned, size_t k);
  void add_constraints();
  size_t buffer(Buffer::Home home, size_t index, const std::string &name);
  size_t buffer_of(ValueId v);
  size_t workspace_buffer(WorkspaceEntry::Kind kind, ValueId v, int tile_rows, size_t kernel);
  size_t row_partials_buffer(ValueId v, int floats);
  int row_multiple(ValueId v) const {
    auto it = program_.row_multiples.find(v);
    return it == program_.row_multiples.end() ? 1 : it->second;
  }

  const plan::Plan &plan_;
  const ir::Graph &g_;
  const codegen::Program &program_;
  std::vector<std::string> names_;  // printed names of the plan graph's values
  std::vector<int> declared_index_; // per value: its index in interface.declared, or -1
  std::vector<ValueId> per_bind_values_;
  struct Key {
    WorkspaceEntry::Kind kind;
    ValueId value;
    int tile_rows;
    size_t kernel;
  };
  std::vector<Key> keys_; // of e_.workspace (a RowPartials value: tile_rows, its floats per row)
  exec::Executable e_;
};

exec::Executable Builder::build() {
  e_.mode = plan_.mode == ir::Mode::Train ? Mode::Train : Mode::Eval;
  e_.file_name = program_.file_name;
  e_.source = program_.source;
  e_.plan_text = plan::print_plan_text(plan_, {});
  add_interface();
  for (const plan::Kernel &k : plan_.kernels)
    if (k.per_bind)
      for (ValueId v : k.stores) {
        per_bind_values_.push_back(v);
        e_.per_bind.push_back(type_of(g_[v].type));
        e_.per_bind.back().dtype = api_dtype(plan::buffer_type(plan_, v).dtype);
        e_.per_bind.back().row_multiple = row_multiple(v);
      }
  for (size_t k = 0; k < program_.launches.size(); ++k) {
    e_.kernels.push_back(kernel_of(program_.launches[k], k, nullptr));
    e_.kernels.back().per_bind = plan_.kernels[k].per_bind;
    add_bare_gemm(e_.kernels.back(), plan_.kernels[k]);
    add_exchange(plan_.kernels[k], k);
  }
  for (ValueId o : g_.outputs)
    e_.output_buffers.push_back(buffer_of(ir::view_source(g_, o)));
  add_constraints();
  return std::move(e_);
}

void Builder::add_interface() {
  exec::Interface &in = e_.interface;
  in.name = g_.name;
  in.dims = g_.dims;
  for (size_t id = 0; id < g_.values.size(); ++id) {
    const ir::Value &v = g_.values[id];
    if (v.is_op())
      continue;
    declared_index_[id] = static_cast<int>(in.declared.size());
    in.declared.push_back({v.name, kind_of(v.kind), type_of(v.type)});
  }
  for (ValueId o : g_.outputs)
    in.outputs.push_back(type_of(g_[o].type));
}

size_t Builder::buffer(Buffer::Home home, size_t index, const std::string &name) {
  for (size_t i = 0; i < e_.buffers.size(); ++i)
    if (e_.buffers[i].home == home && e_.buffers[i].index == index)
      return i;
  e_.buffers.push_back({home, index, name});
  return e_.buffers.size() - 1;
}

// A declared tensor is its own buffer; an op value returned as output i, itself or through
// views, writes output i's memory (the last such i where it is returned twice: the others are
// copied from it); a value a per-bind kernel stores has its own buffer, which the pipeline
// owns (a caller's workspace may be written by others between runs, and these values live from
// one bind to the next); any other op value is an intermediate in the workspace.
size_t Builder::buffer_of(ValueId v) {
  const std::string &name = names_[static_cast<size_t>(v)];
  if (!g_[v].is_op())
    return buffer(Buffer::Home::Declared, static_cast<size_t>(declared_index_[v]), name);
  for (size_t i = g_.outputs.size(); i-- > 0;)
    if (ir::view_source(g_, g_.outputs[i]) == v)
      return buffer(Buffer::Home::Output, i, name);
  for (size_t i = 0; i < per_bind_values_.size(); ++i)
    if (per_bind_values_[i] == v)
      return buffer(Buffer::Home::PerBind, i, name);
  return workspace_buffer(WorkspaceEntry::Kind::Value, v, 0, 0);
}

size_t Builder::workspace_buffer(WorkspaceEntry::Kind kind, ValueId v, int tile_rows,
                                 size_t kernel) {
  size_t index = keys_.size();
  for (size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i].kind == kind && keys_[i].value == v && keys_[i].tile_rows == tile_rows &&
        keys_[i].kernel == kernel)
      index = i;
  if (index == keys_.size()) {
    keys_.push_back({kind, v, tile_rows, kernel});
    WorkspaceEntry w{kind,
                     {},
                     tile_rows,
                     kernel,
                     kind == WorkspaceEntry::Kind::GatheredSummaries ? plan_.stats_ranks : 0};
    if (kind == WorkspaceEntry::Kind::Value) {
      w.type = type_of(g_[v].type);
      w.type.dtype = api_dtype(plan::buffer_type(plan_, v).dtype);
      w.type.row_multiple = row_multiple(v);
    } else { // partials summarise the columns of the value as a matrix
      w.type = type_of(g_[v].type.matrix_view());
    }
    e_.workspace.push_back(std::move(w));
  }
  return buffer(Buffer::Home::Workspace, index, names_[static_cast<size_t>(v)]);
}

// The row partials of matrix `v` (row_partials_epilogue): a workspace value of f32[rows, floats],
// keyed apart from v's own buffer by its floats per row.
size_t Builder::row_partials_buffer(ValueId v, int floats) {
  size_t index = keys_.size();
  for (size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i].kind == WorkspaceEntry::Kind::Value && keys_[i].value == v &&
        keys_[i].tile_rows == floats)
      index = i;
  if (index == keys_.size()) {
    keys_.push_back({WorkspaceEntry::Kind::Value, v, floats, 0});
    WorkspaceEntry w{WorkspaceEntry::Kind::Value, type_of(g_[v].type.matrix_view()), 0, 0, 0};
    w.type.dtype = api_dtype(ir::DType::F32);
    w.type.shape.back() = exec::Extent::constant(floats);
    e_.workspace.push_back(std::move(w));
  }
  return buffer(Buffer::Home::Workspace, index, names_[static_cast<size_t>(v)] + ".row_partials");
}

exec::Param Builder::param_of(const LaunchParam &p, size_t k) {
  exec::Param e;
  e.kind = static_cast<exec::Param::Kind>(p.kind);
  e.dim = p.dim;
  switch (p.kind) {
  case LaunchParam::Kind::Buffer:
    e.buffer = buffer_of(p.value);
    break;
  case LaunchParam::Kind::PartialMean:
  case LaunchParam::Kind::PartialM2:
    e.buffer = workspace_buffer(p.kind == LaunchParam::Kind::PartialMean
                                    ? WorkspaceEntry::Kind::PartialMean
                                    : WorkspaceEntry::Kind::PartialM2,
                                p.value, p.tile_rows, 0);
    break;
  case LaunchParam::Kind::SplitPartials:
  case LaunchParam::Kind::SplitCounters:
    e.buffer = workspace_buffer(p.kind == LaunchParam::Kind::SplitPartials
                                    ? WorkspaceEntry::Kind::SplitPartials
                                    : WorkspaceEntry::Kind::SplitCounters,
                                p.value, 0, k);
    break;
  case LaunchParam::Kind::StatsSummary:
  case LaunchParam::Kind::GatheredSummaries:
    e.buffer = workspace_buffer(p.kind == LaunchParam::Kind::StatsSummary
                                    ? WorkspaceEntry::Kind::StatsSummary
                                    : WorkspaceEntry::Kind::GatheredSummaries,
                                p.value, 0, 0);
    break;
  case LaunchParam::Kind::TensorMap:
    e.buffer = buffer_of(p.value);
    e.map = {
        p.map.rows,        p.map.inner, p.map.box_rows, p.map.box_inner, api_dtype(p.map.element),
        p.map.row_multiple};
    break;
  case LaunchParam::Kind::RowPartials: // to the runtime, a workspace buffer like any other
    e.kind = exec::Param::Kind::Buffer;
    e.buffer = row_partials_buffer(p.value, p.row_floats);
    break;
  case LaunchParam::Kind::Dim:
  case LaunchParam::Kind::SmemFloats:
  case LaunchParam::Kind::Splits:
  case LaunchParam::Kind::RngSeed:
  case LaunchParam::Kind::RngOffset:
    break;
  }
  return e;
}

// `main`: the kernel a variant stands beside, whose buffers its parameters share.
exec::Kernel Builder::kernel_of(const KernelLaunch &l, size_t k, const exec::Kernel *main) {
  exec::Kernel e;
  e.entry = l.entry;
  e.gemm = l.kind == plan::KernelKind::Gemm;
  e.geometry = geometry_of(l.geometry);
  for (size_t i = 0; i < l.params.size(); ++i) {
    if (!main) {
      e.params.push_back(param_of(l.params[i], k));
      continue;
    }
    exec::Param p = main->params.at(i);
    p.map.box_rows = l.params[i].map.box_rows;
    p.map.box_inner = l.params[i].map.box_inner;
    e.params.push_back(std::move(p));
  }
  e.rows = l.rows;
  e.cols = l.cols;
  e.inner = l.inner;
  e.config = l.config;
  e.tile = l.tile;
  e.signature = l.signature;
  e.tiles = l.tiles;
  for (const KernelLaunch &v : l.by_rows)
    e.variants.push_back(kernel_of(v, k, main ? main : &e));
  return e;
}

// A bare-product GEMM's operands and product, for a launch hook (the unfused baseline's GEMMs are
// bare products: they compute the product alone and store it). An operand that is a view is read
// where its source lies, as the kernel's own parameters are (codegen works on the plan's matrix
// view).
void Builder::add_bare_gemm(exec::Kernel &kernel, const plan::Kernel &planned) {
  if (!kernel.gemm || !planned.row_stages.empty() || planned.stats_of >= 0 ||
      planned.stores != std::vector<ValueId>{planned.anchor})
    return;
  for (ValueId v : planned.computes)
    if (v != planned.anchor && ir::op_info(g_[v].op).cls != ir::OpClass::View)
      return;
  const ir::Value &mm = g_[planned.anchor];
  // A bare GEMM reads A row-major; matmul_tn's baseline is its fused kernel alone.
  if (mm.op == ir::OpKind::MatmulTN)
    return;
  exec::BareGemm b;
  b.trans_b = mm.op == ir::OpKind::Linear;
  b.a = buffer_of(ir::view_source(g_, mm.args[0]));
  b.b = buffer_of(ir::view_source(g_, mm.args[1]));
  b.c = buffer_of(planned.stores.at(0));
  b.operands = api_dtype(plan::buffer_type(plan_, mm.args[0]).dtype);
  b.result = api_dtype(plan::buffer_type(plan_, planned.stores.at(0)).dtype);
  kernel.bare_gemm = b;
}

// After a Summary kernel, the run all-gathers its summary for the Column kernel that follows.
void Builder::add_exchange(const plan::Kernel &planned, size_t k) {
  if (planned.kind != plan::KernelKind::Summary)
    return;
  const ir::Dim features = g_[planned.stats_of].type.matrix_view().shape[1];
  exec::Exchange x;
  x.after = k;
  x.send = workspace_buffer(WorkspaceEntry::Kind::StatsSummary, planned.stats_of, 0, 0);
  x.recv = workspace_buffer(WorkspaceEntry::Kind::GatheredSummaries, planned.stats_of, 0, 0);
  x.count = Extent::product({features, Extent::constant(3)});
  e_.exchanges.push_back(std::move(x));
}

// What the bound dims must meet, in the order a run checks it: kernels count rows in int, a
// view's two sides have as many rows, groupnorm's groups divide the channels, train-mode
// batchnorm has more than one row.
void Builder::add_constraints() {
  using exec::Constraint;
  auto line = [](const ir::Value &v) {
    return v.loc.known() ? fmt::format(" (line {})", v.loc.line) : std::string();
  };
  for (size_t id = 0; id < g_.values.size(); ++id) {
    const ir::TensorType &t = g_.values[id].type;
    if (t.rank() <= 2)
      continue;
    Constraint c{Constraint::Kind::RowsFitInt, {}, 0, "", ""};
    for (size_t a = 0; a + 1 < t.shape.size(); ++a)
      c.extents.push_back(t.shape[a]);
    c.subject = fmt::format("{} {} has {}", ir::describe(g_, static_cast<ValueId>(id)), t.str(),
                            t.matrix_view().shape[0].str());
    e_.constraints.push_back(std::move(c));
  }
  for (size_t id = 0; id < g_.values.size(); ++id) {
    const ir::Value &v = g_.values[id];
    if (!v.is_op() || ir::op_info(v.op).cls != ir::OpClass::View)
      continue;
    const ir::TensorType &x = g_[v.args[0]].type;
    e_.constraints.push_back(
        {Constraint::Kind::EqualRows,
         {ir::row_extent(x), ir::row_extent(v.type)},
         0,
         fmt::format("{}{} views {} {} as {}", ir::describe(g_, static_cast<ValueId>(id)), line(v),
                     ir::describe(g_, v.args[0]), x.str(), v.type.str()),
         ""});
  }
  for (const ir::Value &v : g_.values)
    if (v.is_op() && v.op == ir::OpKind::GroupNorm) {
      const double groups = v.attrs.at("groups").number;
      e_.constraints.push_back(
          {Constraint::Kind::Divides,
           {v.type.shape.back()},
           groups,
           fmt::format("{}: groups={}", ir::op_info(v.op).name, ir::format_number(groups)),
           line(v)});
    }
  // Across ranks a batch of one row is allowed, as in PyTorch's SyncBatchNorm: the others have
  // rows.
  for (const ir::Value &v : g_.values)
    if (v.is_effect() && plan_.stats_ranks < 2)
      e_.constraints.push_back({Constraint::Kind::MoreThanOne,
                                {v.attrs.at("count").shape.front()},
                                0,
                                "batchnorm in train mode",
                                ""});
}

} // namespace

exec::Executable build_executable(const plan::Plan &plan, const codegen::Program &program,
                                  const Target &target) {
  exec::Executable e = Builder(plan, program).build();
  e.target = target;
  return e;
}

exec::Executable build_executable(const Lowered &lowered) {
  return build_executable(lowered.plan, lowered.program, lowered.target);
}

LowerOptions lower_options(const exec::Request &request) {
  if (request.mode != Mode::Train && request.mode != Mode::Eval)
    throw Error(
        fmt::format("{} is not a kfuse::Mode value (Train, Eval)", static_cast<int>(request.mode)));
  require_supported(request.target.precision);
  LowerOptions lo;
  lo.mode = request.mode == Mode::Train ? ir::Mode::Train : ir::Mode::Eval;
  lo.target = request.target;
  lo.fuse = request.fuse;
  lo.tunings = request.tunings;
  lo.frozen = request.frozen;
  return lo;
}

TrainingSources training_sources(const dsl::SourceFile &src, ir::Mode mode,
                                 const std::set<std::string> &frozen) {
  dsl::Diagnostics diags(src);
  const ir::Graph forward = dsl::parse_kf(src, diags);
  const ir::GradResult r = ir::grad(forward, mode, frozen);
  // The printed graphs name their file after `src`: a message about either says whose it is.
  const std::string where = fmt::format("{} ({} mode", src.name(), ir::mode_name(mode));
  return {dsl::SourceFile(where + ", forward that saves)", ir::print_kf(ir::forward_with_saves(r))),
          dsl::SourceFile(where + ", backward)", ir::print_kf(r.backward)),
          forward.outputs.size(),
          r.grad_inputs,
          r.saved_names,
          ir::gradient_names(r)};
}

LoweredTraining lower_training(const dsl::SourceFile &src, const LowerOptions &options) {
  TrainingSources sources = training_sources(src, options.mode, options.frozen);
  Lowered forward = lower(sources.forward, options);
  Lowered backward = lower(sources.backward, options);
  return {std::move(sources), std::move(forward), std::move(backward)};
}

exec::Training build_training(const LoweredTraining &t) {
  return build_training(t.sources, t.forward, t.backward);
}

exec::Training build_training(const TrainingSources &sources, const Lowered &forward,
                              const Lowered &backward) {
  return {build_executable(forward),
          build_executable(backward),
          sources.outputs,
          sources.grad_inputs,
          sources.saved,
          sources.gradients};
}

namespace exec {

std::string read_kf_file(const std::string &path) { return dsl::SourceFile::read(path).text(); }

Executable compile_executable(const std::string &kf_text, const std::string &file_name,
                              const Request &request) {
  return build_executable(lower(dsl::SourceFile(file_name, kf_text), lower_options(request)));
}

Training compile_training(const std::string &kf_text, const std::string &file_name,
                          const Request &request) {
  // With batch statistics exchanged across ranks, the forward and the backward exchange
  // theirs alike: the backward's batch statistics are the means its batchnorms' input
  // gradients take (ir::is_batch_statistic), its parameter gradients the rank's own sums.
  return build_training(
      lower_training(dsl::SourceFile(file_name, kf_text), lower_options(request)));
}

} // namespace exec

} // namespace kfuse
