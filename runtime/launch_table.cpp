#include "runtime/launch_table.h"

#include "compiler/ir/views.h"
#include "runtime/driver.h"

#include <fmt/format.h>

namespace kfuse::rt {

using codegen::KernelLaunch;
using codegen::LaunchParam;
using ir::ValueId;

namespace {

// Every intermediate starts on a 256-byte boundary (what cuMemAlloc guarantees a buffer).
constexpr size_t kWorkspaceAlignment = 256;

int64_t extent(const ir::Dim &d, const Dims &dims) { return d.evaluate(dims); }

size_t elements(const ir::TensorType &t, const Dims &dims) {
  size_t n = 1;
  for (const ir::Dim &d : t.shape)
    n *= static_cast<size_t>(extent(d, dims));
  return n;
}

} // namespace

LaunchTable::LaunchTable(const codegen::Program &program, const plan::Plan &plan,
                         const std::vector<std::string> &names, int max_splits)
    : program_(program), plan_(plan), max_splits_(max_splits) {
  const ir::Graph &g = plan.graph;
  for (const plan::Kernel &k : plan.kernels)
    if (k.per_bind)
      per_bind_values_.insert(per_bind_values_.end(), k.stores.begin(), k.stores.end());
  slots_ = g.values.size() + g.outputs.size() + per_bind_values_.size();
  launches_.resize(program.launches.size());
  size_t functions = 0;
  for (size_t k = 0; k < program.launches.size(); ++k) {
    const KernelLaunch &l = program.launches[k];
    Launch &launch = launches_[k];
    launch.function = functions;
    functions += 1 + l.by_rows.size();
    launch.per_bind = plan.kernels[k].per_bind;
    launch.args.resize(l.params.size());
    for (size_t i = 0; i < l.params.size(); ++i) {
      const LaunchParam &p = l.params[i];
      Arg &a = launch.args[i];
      a.param = p;
      switch (p.kind) {
      case LaunchParam::Kind::Buffer:
        a.from = pointer_of(p.value);
        launch.arg_pointers.push_back(&a.ptr);
        break;
      case LaunchParam::Kind::PartialMean:
      case LaunchParam::Kind::PartialM2:
        a.from = {true,
                  key_of({p.value,
                          p.kind == LaunchParam::Kind::PartialMean ? WorkspaceKey::Kind::PartialMean
                                                                   : WorkspaceKey::Kind::PartialM2,
                          p.tile_rows, 0})};
        launch.arg_pointers.push_back(&a.ptr);
        break;
      case LaunchParam::Kind::SplitPartials:
      case LaunchParam::Kind::SplitCounters:
        a.from = {true, key_of({p.value,
                                p.kind == LaunchParam::Kind::SplitPartials
                                    ? WorkspaceKey::Kind::SplitPartials
                                    : WorkspaceKey::Kind::SplitCounters,
                                0, k})};
        launch.arg_pointers.push_back(&a.ptr);
        break;
      case LaunchParam::Kind::Dim:
      case LaunchParam::Kind::SmemFloats:
      case LaunchParam::Kind::Splits:
        launch.arg_pointers.push_back(&a.value);
        break;
      case LaunchParam::Kind::RngSeed:
      case LaunchParam::Kind::RngOffset:
        draws_ = true;
        launch.arg_pointers.push_back(&a.rng);
        break;
      case LaunchParam::Kind::TensorMap:
        a.from = pointer_of(p.value);
        a.tensor = names[static_cast<size_t>(p.value)];
        launch.arg_pointers.push_back(&a.map.map);
        break;
      }
    }
    // A GEMM's operands and product, for the unfused baseline's override (whose GEMMs are bare
    // products: they store their result). An operand that is a view is read where its source
    // lies, as the kernel's own parameters are (codegen works on the plan's matrix view).
    const plan::Kernel &kernel = plan.kernels[k];
    if (l.kind == plan::KernelKind::Gemm && kernel.row_stages.empty()) {
      const ir::Value &mm = g[kernel.anchor];
      launch.gemm = true;
      launch.trans_b = mm.op == ir::OpKind::Linear;
      launch.a = pointer_of(ir::view_source(g, mm.args[0]));
      launch.b = pointer_of(ir::view_source(g, mm.args[1]));
      launch.c = pointer_of(kernel.stores.at(0));
      launch.operands = plan::buffer_type(plan, mm.args[0]).dtype;
      launch.result = plan::buffer_type(plan, kernel.stores.at(0)).dtype;
    }
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const ValueId source = ir::view_source(g, g.outputs[i]);
    copies_.push_back({i, pointer_of(source), !g[source].is_op()});
  }
}

// A declared tensor's own slot; an op value returned as output i, itself or through views,
// writes output i's memory (the last such i where it is returned twice: the others are copied
// from it); a value a per-bind kernel stores has its slot after the outputs'; any other op
// value is an intermediate.
LaunchTable::Pointer LaunchTable::pointer_of(ValueId v) {
  const ir::Graph &g = plan_.graph;
  if (!g[v].is_op())
    return {false, static_cast<size_t>(v)};
  for (size_t i = g.outputs.size(); i-- > 0;)
    if (ir::view_source(g, g.outputs[i]) == v)
      return {false, g.values.size() + i};
  for (size_t i = 0; i < per_bind_values_.size(); ++i)
    if (per_bind_values_[i] == v)
      return {false, per_bind_slot(i)};
  return {true, key_of({v, WorkspaceKey::Kind::Value, 0, 0})};
}

size_t LaunchTable::key_of(const WorkspaceKey &key) {
  for (size_t i = 0; i < workspace_keys_.size(); ++i) {
    const WorkspaceKey &k = workspace_keys_[i];
    if (k.value == key.value && k.kind == key.kind && k.tile_rows == key.tile_rows &&
        k.launch == key.launch)
      return i;
  }
  workspace_keys_.push_back(key);
  return workspace_keys_.size() - 1;
}

size_t LaunchTable::value_bytes(ir::ValueId v, const Dims &dims) const {
  return elements(plan_.graph[v].type, dims) *
         static_cast<size_t>(ir::dtype_bytes(plan::buffer_type(plan_, v).dtype));
}

size_t LaunchTable::key_bytes(const WorkspaceKey &k, const Dims &dims, int multiprocessors) const {
  // Partials summarize the columns of the value as a matrix (a rank-3/4 input under a view).
  const ir::TensorType t = plan_.graph[k.value].type.matrix_view();
  switch (k.kind) {
  case WorkspaceKey::Kind::Value:
    return value_bytes(k.value, dims);
  case WorkspaceKey::Kind::PartialMean: // mean or M2 per column per row tile
  case WorkspaceKey::Kind::PartialM2:
    return static_cast<size_t>((extent(t.shape[0], dims) + k.tile_rows - 1) / k.tile_rows) *
           static_cast<size_t>(extent(t.shape[1], dims)) * sizeof(float);
  case WorkspaceKey::Kind::SplitPartials:
  case WorkspaceKey::Kind::SplitCounters: {
    // program.h: tiles * S partial tiles of tile_rows x tile_cols floats, a counter per tile;
    // nothing where the launch does not split.
    const codegen::LaunchGeometry &geo =
        variant(program_.launches[k.launch],
                variant_of(program_.launches[k.launch], dims, multiprocessors, max_splits_))
            .geometry;
    const int splits = split_count(geo, dims, multiprocessors, max_splits_);
    if (splits == 1)
      return 0;
    const size_t tiles =
        static_cast<size_t>((extent(geo.rows, dims) + geo.tile_rows - 1) / geo.tile_rows) *
        static_cast<size_t>((extent(geo.cols, dims) + geo.tile_cols - 1) / geo.tile_cols);
    if (k.kind == WorkspaceKey::Kind::SplitCounters)
      return tiles * sizeof(unsigned);
    return tiles * static_cast<size_t>(splits) * static_cast<size_t>(geo.tile_rows) *
           static_cast<size_t>(geo.tile_cols) * sizeof(float);
  }
  }
  return 0;
}

std::vector<size_t> LaunchTable::workspace_offsets(const Dims &dims, int multiprocessors,
                                                   size_t *total) const {
  std::vector<size_t> offsets;
  size_t end = 0;
  for (const WorkspaceKey &k : workspace_keys_) {
    const size_t bytes = key_bytes(k, dims, multiprocessors);
    offsets.push_back(end);
    end += (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
  }
  *total = end;
  return offsets;
}

bool LaunchTable::may_split(const Dims &dims) const {
  for (const KernelLaunch &l : program_.launches)
    if (rt::may_split(l.geometry, dims, max_splits_))
      return true;
  return false;
}

size_t LaunchTable::workspace_bytes(const Dims &dims, int multiprocessors) const {
  size_t total = 0;
  workspace_offsets(dims, multiprocessors, &total);
  return total;
}

size_t LaunchTable::prepare(const Dims &dims, int multiprocessors) {
  size_t total = 0;
  offsets_ = workspace_offsets(dims, multiprocessors, &total);
  counter_bytes_.clear();
  for (const WorkspaceKey &k : workspace_keys_)
    counter_bytes_.push_back(
        k.kind == WorkspaceKey::Kind::SplitCounters ? key_bytes(k, dims, multiprocessors) : 0);
  for (size_t k = 0; k < launches_.size(); ++k) {
    Launch &launch = launches_[k];
    launch.variant = variant_of(program_.launches[k], dims, multiprocessors, max_splits_);
    const KernelLaunch &l = variant(program_.launches[k], launch.variant);
    launch.shape = resolve(l.geometry, dims, multiprocessors, max_splits_);
    for (size_t i = 0; i < launch.args.size(); ++i) {
      Arg &a = launch.args[i];
      a.param.map = l.params[i].map; // the variant's tensor map boxes
      const LaunchParam &p = a.param;
      if (p.kind == LaunchParam::Kind::Dim)
        a.value = static_cast<int>(dims.at(p.dim));
      else if (p.kind == LaunchParam::Kind::SmemFloats)
        a.value = launch.shape.row_floats;
      else if (p.kind == LaunchParam::Kind::Splits)
        a.value = launch.shape.split_param();
      else if (p.kind == LaunchParam::Kind::TensorMap) {
        a.map_rows = extent(p.map.rows, dims);
        a.map_inner = extent(p.map.inner, dims);
      }
    }
    if (launch.gemm) {
      launch.m = extent(l.rows, dims);
      launch.n = extent(l.cols, dims);
      launch.k = extent(l.inner, dims);
    }
  }
  const ir::Graph &g = plan_.graph;
  for (OutputCopy &c : copies_)
    c.bytes = elements(g[g.outputs[c.output]].type, dims) *
              static_cast<size_t>(ir::dtype_bytes(g[g.outputs[c.output]].type.dtype));
  return total;
}

CUdeviceptr LaunchTable::address(const Pointer &p, const CUdeviceptr *tensors,
                                 CUdeviceptr workspace) const {
  return p.in_workspace ? workspace + offsets_[p.index] : tensors[p.index];
}

void LaunchTable::point(const CUdeviceptr *tensors, CUdeviceptr workspace,
                        const std::string &where) {
  workspace_ = workspace;
  for (Launch &launch : launches_) {
    for (Arg &a : launch.args) {
      switch (a.param.kind) {
      case LaunchParam::Kind::Buffer:
      case LaunchParam::Kind::PartialMean:
      case LaunchParam::Kind::PartialM2:
      case LaunchParam::Kind::SplitPartials:
      case LaunchParam::Kind::SplitCounters:
        a.ptr = address(a.from, tensors, workspace);
        break;
      case LaunchParam::Kind::TensorMap:
        tensor_map(a.map, a.param.map, address(a.from, tensors, workspace), a.map_rows, a.map_inner,
                   where, a.tensor);
        break;
      case LaunchParam::Kind::Dim:
      case LaunchParam::Kind::SmemFloats:
      case LaunchParam::Kind::Splits:
      case LaunchParam::Kind::RngSeed:
      case LaunchParam::Kind::RngOffset:
        break;
      }
    }
    if (launch.gemm) {
      launch.a_ptr = address(launch.a, tensors, workspace);
      launch.b_ptr = address(launch.b, tensors, workspace);
      launch.c_ptr = address(launch.c, tensors, workspace);
    }
  }
  const size_t outputs = plan_.graph.values.size();
  for (OutputCopy &c : copies_) {
    c.src = address(c.from, tensors, workspace);
    c.dst = tensors[outputs + c.output];
  }
}

size_t LaunchTable::per_bind_slot(size_t i) const {
  return plan_.graph.values.size() + plan_.graph.outputs.size() + i;
}

void LaunchTable::enqueue_per_bind(const std::vector<Function> &functions, CUstream stream) const {
  for (size_t k = 0; k < launches_.size(); ++k) {
    const Launch &l = launches_[k];
    if (l.per_bind)
      launch(functions[l.function + l.variant], l.shape.grid, l.shape.block, l.shape.shared_bytes,
             stream, const_cast<void **>(l.arg_pointers.data()), l.shape.cluster,
             l.shape.programmatic);
  }
}

GemmCall LaunchTable::gemm_call(const Launch &l) {
  const auto *a = reinterpret_cast<const void *>(l.a_ptr);
  const auto *b = reinterpret_cast<const void *>(l.b_ptr);
  auto *c = reinterpret_cast<void *>(l.c_ptr);
  const int64_t ldb = l.trans_b ? l.k : l.n;
  return GemmCall{l.trans_b, l.m, l.n, l.k, a, b, c, l.k, ldb, l.n, l.operands, l.result};
}

std::vector<GemmCall> LaunchTable::gemm_calls() const {
  std::vector<GemmCall> calls;
  for (const Launch &l : launches_)
    if (l.gemm && !l.per_bind)
      calls.push_back(gemm_call(l));
  return calls;
}

void LaunchTable::enqueue(const std::vector<Function> &functions, CUstream stream,
                          const std::function<void(const GemmCall &, CUstream)> &gemm) const {
  Driver &driver = Driver::get();
  // A returned state is its value at entry, as every read of state sees it: copied before any
  // kernel can update it in place; a returned op value once the kernels have written it.
  auto copy_outputs = [&](bool declared) {
    for (const OutputCopy &c : copies_)
      if (c.declared == declared && c.src != c.dst)
        driver.check(driver.cuMemcpyDtoDAsync(c.dst, c.src, c.bytes, stream),
                     "cuMemcpyDtoDAsync(output)");
  };
  copy_outputs(/*declared=*/true);
  for (size_t k = 0; k < launches_.size(); ++k) {
    const Launch &l = launches_[k];
    if (l.per_bind)
      continue;
    if (l.gemm && gemm) {
      gemm(gemm_call(l), stream);
      continue;
    }
    launch(functions[l.function + l.variant], l.shape.grid, l.shape.block, l.shape.shared_bytes,
           stream, const_cast<void **>(l.arg_pointers.data()), l.shape.cluster,
           l.shape.programmatic);
  }
  copy_outputs(/*declared=*/false);
}

void LaunchTable::set_rng(uint64_t seed, uint64_t offset) {
  for (Launch &launch : launches_)
    for (Arg &a : launch.args)
      if (a.param.kind == LaunchParam::Kind::RngSeed)
        a.rng = seed;
      else if (a.param.kind == LaunchParam::Kind::RngOffset)
        a.rng = offset;
}

void LaunchTable::zero_split_counters(CUstream stream) const {
  Driver &driver = Driver::get();
  for (size_t i = 0; i < counter_bytes_.size(); ++i)
    if (counter_bytes_[i] > 0)
      driver.check(driver.cuMemsetD32Async(workspace_ + offsets_[i], 0,
                                           counter_bytes_[i] / sizeof(unsigned), stream),
                   "cuMemsetD32Async(split-K counters)");
}

std::string LaunchTable::resolved_text() const {
  std::string s;
  for (size_t k = 0; k < launches_.size(); ++k) {
    const LaunchShape &shape = launches_[k].shape;
    s += fmt::format("{}: grid {} x {} x {}, block {}, dynamic smem {} B", launched(k).entry,
                     shape.grid.x, shape.grid.y, shape.grid.z, shape.block.x, shape.shared_bytes);
    if (launched(k).geometry.tile_k > 0)
      s += shape.splits > 1 ? fmt::format(", split-K S = {}{}", shape.splits,
                                          shape.split_major ? " (units split-major)" : "")
                            : std::string(", K not split (S = 1)");
    s += "\n";
  }
  return s;
}

const codegen::KernelLaunch &LaunchTable::launched(size_t launch) const {
  return variant(program_.launches.at(launch), launches_.at(launch).variant);
}

std::vector<std::string> LaunchTable::entries() const {
  std::vector<std::string> names;
  for (const KernelLaunch &l : program_.launches)
    for (size_t v = 0; v <= l.by_rows.size(); ++v)
      names.push_back(variant(l, v).entry);
  return names;
}

} // namespace kfuse::rt
