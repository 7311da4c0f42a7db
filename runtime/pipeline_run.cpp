// kfuse::Pipeline::run: the checks a run's tensors get, made once per change of tensors, and
// the launches, made every time from the pipeline's LaunchTable.
#include "compiler/dump.h"
#include "compiler/extent.h"
#include "runtime/driver.h"
#include "runtime/pipeline_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace kfuse {

using exec::DeclaredTensor;

namespace {

// cuMemAlloc's alignment; intermediates inside a workspace keep it.
constexpr uintptr_t kWorkspaceAlignment = 256;

// How the tensors of a run differ from the last checked run's.
enum class Change { None, Pointers, Tensors };

Change change(const Tensor *given, const std::vector<Tensor> &seen) {
  Change c = Change::None;
  for (size_t i = 0; i < seen.size(); ++i) {
    if (!rt::same_layout(given[i], seen[i]))
      return Change::Tensors;
    if (given[i].data != seen[i].data)
      c = Change::Pointers;
  }
  return c;
}

std::string dims_text(const rt::Dims &dims) {
  std::vector<std::string> parts;
  for (const auto &[name, value] : dims)
    parts.push_back(fmt::format("{}={}", name, value));
  return fmt::format("{}", fmt::join(parts, " "));
}

} // namespace

// Shape, dtype and layout of every tensor of the run, the dims they bind, and that nothing
// written overlaps anything else: the checks that need no driver. Fills im.dims, im.pointers
// and the aliasing lists.
void Pipeline::Impl::check_tensors(const Tensor *inputs, const Tensor *outputs) {
  Impl &im = *this;
  const exec::Interface &in = im.executable.interface;
  rt::Dims bound_dims;
  std::map<std::string, std::string> bound_by;
  im.pointers.assign(im.table->slots(), 0);
  im.written.clear(); // outputs, then state: the order messages name overlaps in
  im.read.clear();
  im.input_bytes.assign(im.input_ids.size(), 0);
  std::vector<rt::TensorBytes> states;
  for (size_t i = 0; i < in.declared.size(); ++i) {
    const DeclaredTensor &v = in.declared[i];
    const Tensor *t = nullptr;
    const int position = im.input_position[i];
    if (position >= 0) {
      t = &inputs[position];
    } else {
      auto it = im.bound.find(v.name);
      if (it == im.bound.end())
        throw Error(fmt::format("{}: {} '{}' ({}) is not bound", im.where, exec::kind_name(v.kind),
                                v.name, v.type.str()));
      t = &it->second;
    }
    rt::check_layout(im.where, v.name, v.type, *t);
    unify(im.where, v.name, v.type, t->shape, bound_dims, bound_by);
    im.pointers[i] = reinterpret_cast<CUdeviceptr>(t->data);
    if (position >= 0)
      im.input_bytes[static_cast<size_t>(position)] = im.read.size();
    (v.kind == DeclaredTensor::Kind::State ? states : im.read)
        .push_back(rt::bytes_of(fmt::format("{} '{}'", exec::kind_name(v.kind), v.name), *t));
  }
  for (size_t i = 0; i < im.own_outputs; ++i) { // the saved values are the pipeline's own
    const std::string &name = im.output_names[i];
    rt::check_layout(im.where, name, in.outputs[i], outputs[i]);
    unify(im.where, name, in.outputs[i], outputs[i].shape, bound_dims, bound_by);
    im.pointers[in.declared.size() + i] = reinterpret_cast<CUdeviceptr>(outputs[i].data);
    im.written.push_back(rt::bytes_of(name, outputs[i]));
  }
  im.written.insert(im.written.end(), states.begin(), states.end());
  for (const std::string &d : in.dims)
    if (!bound_dims.count(d))
      throw Error(fmt::format("{}: dim {} is bound by no tensor", im.where, d));
  for (const exec::Constraint &c : im.executable.constraints)
    if (auto problem = exec::violation(c, bound_dims))
      throw Error(fmt::format("{}: {}", im.where, *problem));
  if (im.user_workspace) {
    Tensor w{im.user_workspace, {static_cast<int64_t>(im.user_workspace_bytes / sizeof(float))}};
    im.written.push_back(rt::bytes_of("workspace", w));
  }
  rt::check_no_aliasing(im.where, im.written, im.read);
  im.dims = std::move(bound_dims);
}

// Loads the module into the context current now, on the first run; later runs must find the
// same context current.
void Pipeline::Impl::load_module(CUcontext current) {
  Impl &im = *this;
  rt::Driver &driver = rt::Driver::get();
  if (!im.module) {
    im.module = std::make_unique<rt::Module>(im.compiled.cubin);
    for (const std::string &entry : im.table->entries())
      im.functions.push_back(im.module->function(entry));
    im.context = current;
    im.device = driver.current_device();
    driver.check(driver.cuDeviceGetAttribute(&im.multiprocessors,
                                             CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, im.device),
                 "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  }
  if (current != im.context)
    throw Error(fmt::format(
        "{}: the current CUDA context is not the one the pipeline ran in first (device {}); "
        "use one Pipeline per device or context",
        im.where, im.device));
}

// Where the run's memory lives: inputs and outputs whose pointer changed since the last checked
// run, bound tensors once per bind, the caller's workspace once per set_workspace.
void Pipeline::Impl::check_memory(const Tensor *inputs, const Tensor *outputs) {
  Impl &im = *this;
  for (size_t i = 0; i < im.input_ids.size(); ++i)
    if (i >= im.seen_inputs.size() || inputs[i].data != im.seen_inputs[i].data)
      rt::check_device_memory(im.where, im.executable.interface.declared[im.input_ids[i]].name,
                              inputs[i], im.device);
  for (size_t i = 0; i < im.own_outputs; ++i)
    if (i >= im.seen_outputs.size() || outputs[i].data != im.seen_outputs[i].data)
      rt::check_device_memory(im.where, im.output_names[i], outputs[i], im.device);
  for (const auto &[name, t] : im.bound)
    if (!im.on_device.count(name)) {
      rt::check_device_memory(im.where, name, t, im.device);
      im.on_device.insert(name);
    }
  if (im.user_workspace && !im.user_workspace_checked) {
    Tensor w{im.user_workspace, {static_cast<int64_t>(im.user_workspace_bytes / sizeof(float))}};
    rt::check_device_memory(im.where, "workspace", w, im.device);
    im.user_workspace_checked = true;
  }
}

// Only data pointers moved since the last checked run (same shapes, dtypes, strides: the dims
// and the table's geometry hold): each moved tensor is checked as a new one would be, then
// the overlaps of all of them. No allocation.
void Pipeline::Impl::check_moved(const Tensor *inputs, const Tensor *outputs) {
  const exec::Interface &in = executable.interface;
  auto move = [&](const Tensor &t, const Tensor &seen, const std::string &name,
                  const exec::TensorType &type, size_t slot, rt::TensorBytes &bytes) {
    if (t.data == seen.data)
      return;
    rt::check_layout(where, name, type, t);
    rt::check_device_memory(where, name, t, device);
    pointers[slot] = reinterpret_cast<CUdeviceptr>(t.data);
    const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data);
    bytes.end = begin + (bytes.end - bytes.begin);
    bytes.begin = begin;
  };
  for (size_t i = 0; i < input_ids.size(); ++i) {
    const DeclaredTensor &v = in.declared[input_ids[i]];
    move(inputs[i], seen_inputs[i], v.name, v.type, input_ids[i], read[input_bytes[i]]);
  }
  for (size_t i = 0; i < own_outputs; ++i)
    move(outputs[i], seen_outputs[i], output_names[i], in.outputs[i], in.declared.size() + i,
         written[i]);
  rt::check_no_aliasing(where, written, read);
}

// The launch table for the run's dims, the per-bind buffers and the workspace it points into.
void Pipeline::Impl::prepare() {
  Impl &im = *this;
  const size_t bytes = im.table->prepare(im.dims, im.multiprocessors);
  im.per_bind_buffers.resize(im.table->per_bind_count());
  for (size_t i = 0; i < im.per_bind_buffers.size(); ++i) {
    const size_t value_bytes = im.table->per_bind_bytes(i, im.dims);
    if (im.per_bind_buffers[i].size() != value_bytes) {
      im.per_bind_buffers[i] = rt::DeviceBuffer(value_bytes);
      im.per_bind_stale = true;
    }
    im.pointers[im.table->per_bind_slot(i)] = im.per_bind_buffers[i].ptr();
  }
  if (im.training)
    im.place_saved();
  im.split_counters_zero = false;
  const Dump dump(im.executable.interface.name,
                  im.executable.mode == Mode::Train ? "train" : "eval");
  if (dump.wants("launch"))
    dump.emit("launch.bound", ".txt",
              fmt::format("at {}:\n{}", dims_text(im.dims), im.table->resolved_text()));
  if (im.user_workspace) {
    if (bytes > im.user_workspace_bytes)
      throw Error(fmt::format("{}: the workspace of {} bytes is too small: a run at {} needs {} "
                              "bytes (workspace_size)",
                              im.where, im.user_workspace_bytes, dims_text(im.dims), bytes));
    im.workspace = reinterpret_cast<CUdeviceptr>(im.user_workspace);
    return;
  }
  // Grown, never shrunk: a pipeline alternating between sizes allocates once per new maximum.
  if (im.own_workspace.size() < bytes)
    im.own_workspace = rt::DeviceBuffer(bytes);
  im.workspace = im.own_workspace.ptr();
}

void Pipeline::run(const std::map<std::string, Tensor> &inputs, const std::vector<Tensor> &outputs,
                   CUstream stream) {
  Impl &im = impl();
  const exec::Interface &in = im.executable.interface;
  for (const auto &[name, t] : inputs) {
    const int i = in.find(name);
    if (i < 0 || in.declared[static_cast<size_t>(i)].kind != DeclaredTensor::Kind::Input)
      throw Error(fmt::format("{}: '{}' is not an input of the pipeline", im.where, name));
  }
  std::vector<Tensor> ordered;
  for (size_t id : im.input_ids) {
    const DeclaredTensor &d = in.declared[id];
    auto it = inputs.find(d.name);
    if (it == inputs.end())
      throw Error(fmt::format("{}: input '{}' ({}) is missing", im.where, d.name, d.type.str()));
    ordered.push_back(it->second);
  }
  run(ordered.data(), ordered.size(), outputs.data(), outputs.size(), stream);
}

// The checked tensors become the ones later runs compare with: the launch table points at them
// and the replayed graph of the earlier ones is dropped.
void Pipeline::Impl::adopt(const Tensor *inputs, size_t input_count, const Tensor *outputs,
                           size_t output_count) {
  table->point(pointers.data(), workspace, where);
  seen_inputs.assign(inputs, inputs + input_count);
  seen_outputs.assign(outputs, outputs + output_count);
  recheck = false;
  run_graph.reset();
  steady_runs = 0;
  if (training)
    keep_layout();
}

bool Pipeline::prepare_params(CUstream stream) {
  Impl &im = impl();
  std::lock_guard<std::mutex> lock(im.mutex);
  if (im.recheck || !im.per_bind_stale)
    return false;
  im.load_module(rt::Driver::get().make_current());
  im.table->enqueue_per_bind(im.functions, stream);
  im.per_bind_stale = false;
  return true;
}

void Pipeline::run(const Tensor *inputs, size_t input_count, const Tensor *outputs,
                   size_t output_count, CUstream stream) {
  Impl &im = impl();
  std::lock_guard<std::mutex> lock(im.mutex);
  if (input_count != im.input_ids.size() || (input_count > 0 && !inputs))
    throw Error(fmt::format("{}: expected {} input tensor(s), got {}", im.where,
                            im.input_ids.size(), inputs ? input_count : 0));
  if (output_count != im.own_outputs || (output_count > 0 && !outputs))
    throw Error(fmt::format("{}: expected {} output tensor(s), got {}", im.where, im.own_outputs,
                            outputs ? output_count : 0));
  if (im.training) { // the saved values follow the caller's outputs
    outputs = im.with_saved(outputs);
    output_count = im.output_names.size();
  }
  if (im.table->exchanges() && !im.all_gather)
    throw Error(fmt::format("{}: it exchanges batch statistics across {} ranks "
                            "(Options::batch_stats_ranks), but no all-gather is set "
                            "(Pipeline::set_all_gather)",
                            im.where, im.executable.target.batch_stats_ranks));
  Change changed = Change::Tensors;
  if (!im.recheck)
    changed = std::max(change(inputs, im.seen_inputs), change(outputs, im.seen_outputs));
  if (changed != Change::None)
    im.recheck = true; // until every check passed and the table points at these tensors
  if (changed == Change::Tensors)
    im.check_tensors(inputs, outputs);

  CUcontext context = rt::Driver::get().make_current();
  im.load_module(context);
  if (changed == Change::Pointers)
    im.check_moved(inputs, outputs);
  if (changed == Change::Tensors) {
    im.check_memory(inputs, outputs);
    im.prepare();
  }
  if (changed != Change::None)
    im.adopt(inputs, input_count, outputs, output_count);
  // Per-bind kernels (precision bf16's rounded weights) run before the first run after a bind,
  // outside the replayed graph.
  if (im.per_bind_stale) {
    im.table->enqueue_per_bind(im.functions, stream);
    im.per_bind_stale = false;
  }
  // A caller's workspace may be written by others between runs: its counters are zeroed every
  // time, in the graph too.
  const bool zero_counters = im.user_workspace || !im.split_counters_zero;
  auto enqueue = [&](CUstream s) {
    if (zero_counters)
      im.table->zero_split_counters(s);
    im.table->enqueue(im.functions, s, im.gemm_hook, im.all_gather);
  };
  // A pipeline that draws (dropout in train mode) gives each run its own offset: its kernels'
  // arguments change every run.
  const bool draws = im.table->draws();
  if (im.training)
    im.keep_for_backward(inputs, im.rng, stream);
  if (draws) {
    im.table->set_rng(im.rng.seed, im.rng.offset);
    ++im.rng.offset;
  }
  // Steady runs replay one graph of the launches; a run captured into the caller's own graph
  // launches one by one, and so do runs that draw and runs through a GEMM hook or an all-gather
  // (they call the host).
  if (changed == Change::None && !draws && !im.gemm_hook && !im.table->exchanges() &&
      !rt::capturing(stream)) {
    constexpr int kSteadyRunsBeforeGraph = 2; // a one-off run never pays for a capture
    if (!im.run_graph.captured() && ++im.steady_runs >= kSteadyRunsBeforeGraph)
      im.run_graph.capture(enqueue);
    if (im.run_graph.captured()) {
      im.run_graph.launch(stream);
      im.split_counters_zero = true;
      return;
    }
  }
  enqueue(stream);
  im.split_counters_zero = true;
}

void Pipeline::set_all_gather(AllGather all_gather) {
  Impl &im = impl();
  std::lock_guard<std::mutex> lock(im.mutex);
  if (all_gather && !im.table->exchanges())
    throw Error(fmt::format("{}: an all-gather is set, but the pipeline exchanges no batch "
                            "statistics (Options::batch_stats_ranks is {}{})",
                            im.where, im.executable.target.batch_stats_ranks,
                            im.executable.mode == Mode::Eval ? ", and eval mode has none" : ""));
  im.all_gather = std::move(all_gather);
  // The backward (Options::backward) exchanges the statistics its batchnorms' input gradients
  // take through the same all-gather, after the forward's, in the same order on every rank.
  if (im.training && im.training->backward.impl().table->exchanges())
    im.training->backward.set_all_gather(im.all_gather);
}

size_t Pipeline::all_gathers_per_run() const { return impl().executable.exchanges.size(); }

void Pipeline::set_rng(uint64_t seed, uint64_t offset) {
  Impl &im = impl();
  std::lock_guard<std::mutex> lock(im.mutex);
  im.rng = {seed, offset};
}

RngState Pipeline::rng_state() const {
  Impl &im = impl();
  std::lock_guard<std::mutex> lock(im.mutex);
  return im.rng;
}

size_t Pipeline::workspace_size(const std::map<std::string, int64_t> &dims) const {
  const Impl &im = impl();
  for (const std::string &d : im.executable.interface.dims)
    if (!dims.count(d))
      throw Error(fmt::format("{}: dim {} is not bound", im.where, d));
  if (auto problem = dim_values_problem(dims))
    throw Error(fmt::format("{}: {}", im.where, *problem));
  // The SM count decides split-K's share; where no GEMM can split, any count gives the same size.
  int multiprocessors = im.multiprocessors;
  if (multiprocessors == 0 && im.table->may_split(dims)) {
    rt::Driver &driver = rt::Driver::get();
    if (driver.available())
      driver.check(driver.cuDeviceGetAttribute(&multiprocessors,
                                               CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                               driver.current_device()),
                   "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
    else // no device to ask (sizing on a build machine): enough for any, K split the most
      multiprocessors = std::numeric_limits<int>::max();
  }
  return im.table->workspace_bytes(dims, multiprocessors);
}

void Pipeline::set_workspace(void *data, size_t bytes) {
  Impl &im = impl();
  std::lock_guard<std::mutex> lock(im.mutex);
  if (!data && bytes != 0)
    throw Error(fmt::format("{}: a workspace of {} bytes at a null pointer", im.where, bytes));
  if (reinterpret_cast<uintptr_t>(data) % kWorkspaceAlignment != 0)
    throw Error(fmt::format("{}: the workspace at {} is not {}-byte aligned", im.where, data,
                            kWorkspaceAlignment));
  im.user_workspace = data;
  im.user_workspace_bytes = data ? bytes : 0;
  im.user_workspace_checked = false;
  im.recheck = true;
}

} // namespace kfuse
