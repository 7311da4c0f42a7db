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

  // NVRTC on the executable's source for `arch`; fills `compiled` and `report`.
  void compile_module(const std::string &arch);
  // Output i's declared type; throws kfuse::Error where there is no output i.
  const exec::TensorType &output_type(size_t i) const;

  // The steps of a run whose tensors changed (pipeline_run.cpp), in this order.
  void check_tensors(const Tensor *inputs, const Tensor *outputs); // needs no driver
  void load_module(CUcontext current);
  void check_memory(const Tensor *inputs, const Tensor *outputs);
  void prepare();
  // Instead of all of the above, where only data pointers changed.
  void check_moved(const Tensor *inputs, const Tensor *outputs);
};

// Binds symbolic dims of `type` from `shape`, checking every extent; `bound_by` names the tensor
// that bound each dim (for the message when another disagrees).
void unify(const std::string &where, const std::string &tensor, const exec::TensorType &type,
           const std::vector<int64_t> &shape, std::map<std::string, int64_t> &dims,
           std::map<std::string, std::string> &bound_by);

} // namespace kfuse
