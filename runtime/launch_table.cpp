#include "runtime/launch_table.h"

#include "runtime/driver.h"

#include <fmt/format.h>

namespace kfuse::rt {

using exec::Param;
using exec::WorkspaceEntry;

namespace {

// Every intermediate starts on a 256-byte boundary (what cuMemAlloc guarantees a buffer).
constexpr size_t kWorkspaceAlignment = 256;

int64_t extent(const exec::Extent &d, const Dims &dims) { return d.evaluate(dims); }

} // namespace

LaunchTable::LaunchTable(const exec::Executable &executable, int max_splits)
    : executable_(executable), max_splits_(max_splits) {
  launches_.resize(executable.kernels.size());
  size_t functions = 0;
  for (size_t k = 0; k < executable.kernels.size(); ++k) {
    const exec::Kernel &l = executable.kernels[k];
    Launch &launch = launches_[k];
    launch.function = functions;
    functions += 1 + l.variants.size();
    launch.per_bind = l.per_bind;
    launch.args.resize(l.params.size());
    for (size_t i = 0; i < l.params.size(); ++i) {
      const Param &p = l.params[i];
      Arg &a = launch.args[i];
      a.param = p;
      switch (p.kind) {
      case Param::Kind::Buffer:
      case Param::Kind::PartialMean:
      case Param::Kind::PartialM2:
      case Param::Kind::SplitPartials:
      case Param::Kind::SplitCounters:
      case Param::Kind::StatsSummary:
      case Param::Kind::GatheredSummaries:
        a.from = pointer_of(p.buffer);
        launch.arg_pointers.push_back(&a.ptr);
        break;
      case Param::Kind::Dim:
      case Param::Kind::SmemFloats:
      case Param::Kind::Splits:
        launch.arg_pointers.push_back(&a.value);
        break;
      case Param::Kind::RngSeed:
      case Param::Kind::RngOffset:
        draws_ = true;
        launch.arg_pointers.push_back(&a.rng);
        break;
      case Param::Kind::TensorMap:
        a.from = pointer_of(p.buffer);
        a.tensor = executable.buffers.at(p.buffer).name;
        launch.arg_pointers.push_back(&a.map.map);
        break;
      }
    }
    if (l.bare_gemm) {
      launch.gemm = true;
      launch.trans_b = l.bare_gemm->trans_b;
      launch.a = pointer_of(l.bare_gemm->a);
      launch.b = pointer_of(l.bare_gemm->b);
      launch.c = pointer_of(l.bare_gemm->c);
      launch.operands = l.bare_gemm->operands;
      launch.result = l.bare_gemm->result;
    }
  }
  for (const exec::Exchange &x : executable.exchanges)
    exchanges_.push_back({x.after, pointer_of(x.send), pointer_of(x.recv)});
  for (size_t i = 0; i < executable.output_buffers.size(); ++i) {
    const size_t from = executable.output_buffers[i];
    copies_.push_back(
        {i, pointer_of(from), executable.buffers.at(from).home == exec::Buffer::Home::Declared});
  }
}

LaunchTable::Pointer LaunchTable::pointer_of(size_t buffer) const {
  const exec::Buffer &b = executable_.buffers.at(buffer);
  if (b.home == exec::Buffer::Home::Workspace)
    return {true, b.index};
  return {false, executable_.slot(b)};
}

size_t LaunchTable::entry_bytes(const WorkspaceEntry &k, const Dims &dims,
                                int multiprocessors) const {
  const exec::TensorType &t = k.type;
  switch (k.kind) {
  case WorkspaceEntry::Kind::Value:
    return t.bytes(dims);
  case WorkspaceEntry::Kind::PartialMean: // mean or M2 per column per row tile
  case WorkspaceEntry::Kind::PartialM2:
    return static_cast<size_t>((extent(t.shape[0], dims) + k.tile_rows - 1) / k.tile_rows) *
           static_cast<size_t>(extent(t.shape[1], dims)) * sizeof(float);
  case WorkspaceEntry::Kind::StatsSummary: // count, mean and M2 per column, in double
  case WorkspaceEntry::Kind::GatheredSummaries:
    return static_cast<size_t>(extent(t.shape[1], dims)) * 3 * sizeof(double) *
           static_cast<size_t>(k.kind == WorkspaceEntry::Kind::StatsSummary ? 1 : k.ranks);
  case WorkspaceEntry::Kind::SplitPartials:
  case WorkspaceEntry::Kind::SplitCounters: {
    // program.h: tiles * S partial tiles of tile_rows x tile_cols floats, a counter per tile;
    // nothing where the launch does not split.
    const exec::Kernel &kernel = executable_.kernels.at(k.kernel);
    const exec::Geometry &geo =
        variant(kernel, variant_of(kernel, dims, multiprocessors, max_splits_)).geometry;
    const int splits = split_count(geo, dims, multiprocessors, max_splits_);
    if (splits == 1)
      return 0;
    const size_t tiles =
        static_cast<size_t>((extent(geo.rows, dims) + geo.tile_rows - 1) / geo.tile_rows) *
        static_cast<size_t>((extent(geo.cols, dims) + geo.tile_cols - 1) / geo.tile_cols);
    if (k.kind == WorkspaceEntry::Kind::SplitCounters)
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
  for (const WorkspaceEntry &k : executable_.workspace) {
    const size_t bytes = entry_bytes(k, dims, multiprocessors);
    offsets.push_back(end);
    end += (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
  }
  *total = end;
  return offsets;
}

bool LaunchTable::may_split(const Dims &dims) const {
  for (const exec::Kernel &l : executable_.kernels)
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
  for (const WorkspaceEntry &k : executable_.workspace)
    counter_bytes_.push_back(
        k.kind == WorkspaceEntry::Kind::SplitCounters ? entry_bytes(k, dims, multiprocessors) : 0);
  for (size_t k = 0; k < launches_.size(); ++k) {
    Launch &launch = launches_[k];
    launch.variant = variant_of(executable_.kernels[k], dims, multiprocessors, max_splits_);
    const exec::Kernel &l = variant(executable_.kernels[k], launch.variant);
    launch.shape = resolve(l.geometry, dims, multiprocessors, max_splits_);
    // A launch after an all-gather waits for it in full: a programmatic launch waits only for
    // the kernel before it, and the all-gather may be ordered by events (another stream's).
    for (const ExchangeCall &x : exchanges_)
      if (x.after + 1 == k)
        launch.shape.programmatic = false;
    for (size_t i = 0; i < launch.args.size(); ++i) {
      Arg &a = launch.args[i];
      a.param.map = l.params[i].map; // the variant's tensor map boxes
      const Param &p = a.param;
      if (p.kind == Param::Kind::Dim)
        a.value = static_cast<int>(dims.at(p.dim));
      else if (p.kind == Param::Kind::SmemFloats)
        a.value = launch.shape.row_floats;
      else if (p.kind == Param::Kind::Splits)
        a.value = launch.shape.split_param();
      else if (p.kind == Param::Kind::TensorMap) {
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
  for (OutputCopy &c : copies_)
    c.bytes = executable_.interface.outputs[c.output].bytes(dims);
  for (size_t i = 0; i < exchanges_.size(); ++i)
    exchanges_[i].count = static_cast<size_t>(extent(executable_.exchanges[i].count, dims));
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
      case Param::Kind::Buffer:
      case Param::Kind::PartialMean:
      case Param::Kind::PartialM2:
      case Param::Kind::SplitPartials:
      case Param::Kind::SplitCounters:
      case Param::Kind::StatsSummary:
      case Param::Kind::GatheredSummaries:
        a.ptr = address(a.from, tensors, workspace);
        break;
      case Param::Kind::TensorMap:
        tensor_map(a.map, a.param.map, address(a.from, tensors, workspace), a.map_rows, a.map_inner,
                   where, a.tensor);
        break;
      case Param::Kind::Dim:
      case Param::Kind::SmemFloats:
      case Param::Kind::Splits:
      case Param::Kind::RngSeed:
      case Param::Kind::RngOffset:
        break;
      }
    }
    if (launch.gemm) {
      launch.a_ptr = address(launch.a, tensors, workspace);
      launch.b_ptr = address(launch.b, tensors, workspace);
      launch.c_ptr = address(launch.c, tensors, workspace);
    }
  }
  for (ExchangeCall &x : exchanges_) {
    x.send_ptr = address(x.send, tensors, workspace);
    x.recv_ptr = address(x.recv, tensors, workspace);
  }
  const size_t outputs = executable_.interface.declared.size();
  for (OutputCopy &c : copies_) {
    c.src = address(c.from, tensors, workspace);
    c.dst = tensors[outputs + c.output];
  }
}

size_t LaunchTable::per_bind_slot(size_t i) const {
  return executable_.slot({exec::Buffer::Home::PerBind, i, {}});
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
                          const GemmHook &hook, const AllGather &all_gather) const {
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
    if (l.gemm && hook) {
      hook(gemm_call(l), stream);
      continue;
    }
    launch(functions[l.function + l.variant], l.shape.grid, l.shape.block, l.shape.shared_bytes,
           stream, const_cast<void **>(l.arg_pointers.data()), l.shape.cluster,
           l.shape.programmatic);
    for (const ExchangeCall &x : exchanges_)
      if (x.after == k)
        all_gather(reinterpret_cast<const double *>(x.send_ptr),
                   reinterpret_cast<double *>(x.recv_ptr), x.count, stream);
  }
  copy_outputs(/*declared=*/false);
}

void LaunchTable::set_rng(uint64_t seed, uint64_t offset) {
  for (Launch &launch : launches_)
    for (Arg &a : launch.args)
      if (a.param.kind == Param::Kind::RngSeed)
        a.rng = seed;
      else if (a.param.kind == Param::Kind::RngOffset)
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

const exec::Kernel &LaunchTable::launched(size_t launch) const {
  return variant(executable_.kernels.at(launch), launches_.at(launch).variant);
}

std::vector<std::string> LaunchTable::entries() const {
  std::vector<std::string> names;
  for (const exec::Kernel &l : executable_.kernels)
    for (size_t v = 0; v <= l.variants.size(); ++v)
      names.push_back(variant(l, v).entry);
  return names;
}

} // namespace kfuse::rt
