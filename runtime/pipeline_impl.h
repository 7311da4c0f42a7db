// kfuse::Pipeline's state, shared by its compile and bind side (pipeline.cpp) and its run side
// (pipeline_run.cpp).
#pragma once

#include "compiler/executable.h"
#include "runtime/device_buffer.h"
#include "runtime/launch_table.h"
#include "runtime/module.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/pipeline.h"
#include "runtime/run_graph.h"
#include "runtime/tensor_checks.h"

#include <cuda.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kfuse {

struct Pipeline::Impl {
  exec::Executable executable;
  rt::CompiledModule compiled;
  CompileReport report;
  std::string where; // "pipeline 'NAME'", as every message starts

  // The run's interface: the declared inputs in declaration order (the positional entry's
  // order), and for every declared tensor its input position or -1.
  std::vector<size_t> input_ids;
  std::vector<int> input_position;
  std::vector<std::string> output_names; // "output 0", ...: how messages name outputs
  size_t own_outputs = 0; // the outputs run() takes; a training forward's saved values follow

  // Options::backward: the backward and what each run keeps for it (pipeline_backward.cpp).
  struct Training;
  std::unique_ptr<Training> training;
  std::vector<Tensor> all_outputs; // training: the caller's outputs, then the saved values
  std::unique_ptr<rt::LaunchTable> table;
  RngState rng; // the next train-mode run's dropout stream; each such run advances the offset

  std::mutex mutex; // run() and bind() on one pipeline are serialised
  std::unique_ptr<rt::Module> module;
  std::vector<rt::Function> functions;
  CUcontext context = nullptr; // the module's: current at the first run
  CUdevice device = 0;         // the context's
  int multiprocessors = 0;     // of that device
  std::map<std::string, Tensor> bound;
  std::set<std::string> on_device; // bound tensors found in device memory of `device`
  rt::GemmHook gemm_hook;          // rt::PipelineAccess::set_gemm_hook
  AllGather all_gather;            // set_all_gather: batch statistics across ranks

  // What the last run was checked with. A run whose tensors equal these (pointer, shape,
  // dtype, stride) with no bind() or set_workspace() since skips every check; where only
  // pointers differ, the moved tensors and the overlaps are checked; any other difference is
  // checked again in full.
  std::vector<Tensor> seen_inputs, seen_outputs;
  bool recheck = true;
  rt::Dims dims;                              // bound by the last checked run: the table's
  std::vector<CUdeviceptr> pointers;          // the table's slots, of the last checked run
  std::vector<rt::TensorBytes> written, read; // outputs, then state; inputs and params
  std::vector<size_t> input_bytes;            // input i's entry in `read`

  // The values per-bind kernels store (precision bf16's weights in bf16), one buffer each
  // (LaunchTable::per_bind_count), sized at the dims of the run that allocated it. Stale after
  // every bind() and every new buffer: the next run launches the per-bind kernels first. A
  // weight changed in place without bind() keeps its old rounding.
  std::vector<rt::DeviceBuffer> per_bind_buffers;
  bool per_bind_stale = true;

  rt::DeviceBuffer own_workspace; // grown to the largest run's needs
  void *user_workspace = nullptr; // set_workspace(): used instead of own_workspace
  size_t user_workspace_bytes = 0;
  bool user_workspace_checked = false; // found in device memory of `device`
  CUdeviceptr workspace = 0;           // the one the table points into
  // The table's split-K counters in `workspace` are zero (each run leaves them so) unless the
  // layout or the memory is new since the last run: then, and with a caller's workspace that
  // others may write between runs, the run zeroes them first.
  bool split_counters_zero = false;

  // Runs with the same tensors as the last (nothing bound or set since) are steady; from the
  // second in a row they replay `run_graph`, the launches captured once (run_graph.h).
  int steady_runs = 0;
  rt::RunGraph run_graph;

  // NVRTC on the executable's source (PipelineAccess::compile_source) unless `done` holds its
  // result already; fills `compiled` and `report`.
  void compile_module(std::optional<rt::CompiledModule> done);
  // Output i's declared type; throws kfuse::Error where there is no output i.
  const exec::TensorType &output_type(size_t i) const;

  // The steps of a run whose tensors changed (pipeline_run.cpp), in this order.
  void check_tensors(const Tensor *inputs, const Tensor *outputs); // needs no driver
  void load_module(CUcontext current);
  void check_memory(const Tensor *inputs, const Tensor *outputs);
  void prepare();
  // Instead of all of the above, where only data pointers changed.
  void check_moved(const Tensor *inputs, const Tensor *outputs);
  void adopt(const Tensor *inputs, size_t input_count, const Tensor *outputs, size_t output_count);

  // Training (pipeline_backward.cpp). The caller's outputs followed by the saved values, which
  // place_saved() lays out in memory the pipeline owns for the run's dims (from prepare());
  // keep_layout() records the dims and the params and state a run reads (after its tensors
  // changed); keep_for_backward() what else backward() needs of each run, before its launches.
  const Tensor *with_saved(const Tensor *outputs);
  void place_saved();
  void keep_layout();
  void keep_for_backward(const Tensor *inputs, const RngState &drawn, CUstream stream);
  Training &training_or_throw(const char *what) const;
};

// Where every tensor a backward run reads comes from, and what the last forward run kept.
struct Pipeline::Impl::Training {
  explicit Training(Pipeline backward_pipeline) : backward(std::move(backward_pipeline)) {}

  Pipeline backward;
  std::vector<std::string> gradients;
  std::vector<DType> gradient_dtypes;
  // Per backward input position: the gradient of output `index`, saved value `index` (forward
  // output own_outputs + index), or forward input `index`.
  enum class Source : uint8_t { GradOutput, Saved, ForwardInput };
  std::vector<std::pair<Source, size_t>> inputs;
  // Per backward param or state (by name): the forward's declared tensor it is, and in train
  // mode for a state, the snapshot a run takes at entry (runs update state in place).
  std::vector<std::string> params;
  std::vector<size_t> param_declared;
  std::vector<bool> snapshot;

  rt::DeviceBuffer memory; // the saved values and snapshots at 256-byte offsets; grown
  // Of the last run: its dims, the shapes backward() expects, its inputs, params and state (or
  // their snapshots) and the dropout stream it drew from.
  bool ran = false;
  rt::Dims dims;
  std::vector<std::vector<int64_t>> grad_output_shapes, gradient_shapes;
  // Each backward input's declared shape at those dims: a value of a view's shape ([B*T, F]) is
  // declared in the backward by its dims ([B, T, F]), the same rows.
  std::vector<std::vector<int64_t>> backward_input_shapes;
  std::vector<Tensor> forward_inputs, param_tensors, snapshots;
  RngState rng;
  // What backward() hands the backward pipeline, and what it has bound there.
  std::vector<Tensor> backward_inputs, backward_bound;
};

// Binds symbolic dims of `type` from `shape`, checking every extent; `bound_by` names the tensor
// that bound each dim (for the message when another disagrees).
void unify(const std::string &where, const std::string &tensor, const exec::TensorType &type,
           const std::vector<int64_t> &shape, std::map<std::string, int64_t> &dims,
           std::map<std::string, std::string> &bound_by);

} // namespace kfuse
