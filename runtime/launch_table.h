// A pipeline's kernel launches, ready to enqueue: grids, argument buffers and the workspace
// layout resolved once per binding of the dims (prepare), so that a run only writes its tensor
// pointers into the argument buffers and launches (point, enqueue), with no allocation, map
// lookup or string work. The argument buffers live as long as the table: kernel parameters are
// copied by the driver at launch, and a CUDA graph captured from a run keeps its own copy.
//
// Tensors are named by slot (exec::Executable::slot): declared tensor i, then output i, then
// per-bind value i, which the pipeline owns (not the workspace: a caller's workspace may be
// written by others between runs, and these values live from one bind to the next).
// Intermediates, column-statistics partials and summaries, split-K's partial tiles and counters
// (the Executable's workspace entries) live in one workspace, each at a 256-byte aligned offset.
// Split-K's counters must be zero before a launch that splits: each launch leaves them zero, so
// zero_split_counters() is needed only where their memory is new or may have been written by others
// since.
#pragma once

#include "compiler/executable.h"
#include "runtime/launch_geometry.h"
#include "runtime/module.h"
#include "runtime/pipeline.h"
#include "runtime/tensor_map.h"

#include <cuda.h>

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kfuse::rt {

using Dims = std::map<std::string, int64_t>;

class LaunchTable {
public:
  // `max_splits`: Options::max_split_k. The table refers to `executable`, which must outlive it.
  LaunchTable(const exec::Executable &executable, int max_splits);

  size_t slots() const { return executable_.slots(); }

  // Whether a GEMM may split K at `dims` on some device: where not, workspace_bytes does not
  // depend on the SM count.
  bool may_split(const Dims &dims) const;

  // Bytes of workspace a run at `dims` needs (every dim of the pipeline bound) on a device of
  // `multiprocessors` SMs.
  size_t workspace_bytes(const Dims &dims, int multiprocessors) const;

  // Resolves every launch for `dims` on a device of `multiprocessors` SMs; returns
  // workspace_bytes(dims, multiprocessors). Throws kfuse::Error for a grid the device cannot
  // launch.
  size_t prepare(const Dims &dims, int multiprocessors);

  // Writes the run's pointers into the argument buffers: `tensors[slot]`, and intermediates at
  // their offsets from `workspace`. Re-encodes a tensor map only where its pointer changed
  // (a TMA error names `where`, the pipeline). prepare() first.
  void point(const CUdeviceptr *tensors, CUdeviceptr workspace, const std::string &where);

  // Launches every kernel but the per-bind ones in plan order on `stream`, and copies outputs that
  // are declared tensors or returned twice into place. `hook`, where set, runs the bare-product
  // GEMM kernels instead (benchmarks put cuBLAS there). `all_gather` exchanges the batch
  // statistics after the kernels that summarize them (Executable::exchanges; it must be set
  // where there are any).
  void enqueue(const std::vector<Function> &functions, CUstream stream, const GemmHook &hook,
               const AllGather &all_gather) const;
  // Whether runs exchange batch statistics (an all-gather between kernels).
  bool exchanges() const { return !exchanges_.empty(); }

  // The bare-product GEMMs enqueue() hands a hook instead of launching them, in plan order, at
  // the prepared dims and pointed tensors.
  std::vector<GemmCall> gemm_calls() const;

  // The values the per-bind kernels (exec::Kernel::per_bind) store: their count, slots, and
  // bytes at `dims`.
  size_t per_bind_count() const { return executable_.per_bind.size(); }
  size_t per_bind_slot(size_t i) const;
  size_t per_bind_bytes(size_t i, const Dims &dims) const {
    return executable_.per_bind.at(i).bytes(dims);
  }
  // Launches the per-bind kernels, which enqueue() leaves out, on `stream`. point() first.
  void enqueue_per_bind(const std::vector<Function> &functions, CUstream stream) const;

  // Whether a kernel draws random numbers (a train-mode dropout): then runs set_rng() first.
  bool draws() const { return draws_; }
  // The seed and offset every drawing kernel's next launch passes (templates/dropout.cuh).
  void set_rng(uint64_t seed, uint64_t offset);

  // Zeroes the split-K counters of the launches that split at the prepared dims, on `stream`
  // (nothing where none splits). point() first.
  void zero_split_counters(CUstream stream) const;

  // Every launch's grid and split count at the prepared dims, one line each (KFUSE_DUMP=launch).
  std::string resolved_text() const;
  // Launch `launch`'s K split count S at the prepared dims (1: not split, or not a GEMM).
  int splits(size_t launch) const { return launches_.at(launch).shape.splits; }
  // The compiled variant of launch `launch` that runs at the prepared dims (rt::variant_of).
  const exec::Kernel &launched(size_t launch) const;
  // The entry points run() needs, in the order the functions passed to enqueue() follow: each
  // launch's, then its variants' (KernelLaunch::by_rows).
  std::vector<std::string> entries() const;

private:
  // Where a pointer comes from: a tensor slot, or an offset into the workspace (an entry of the
  // Executable's workspace, at the offset prepare() resolves).
  struct Pointer {
    bool in_workspace = false;
    size_t index = 0; // slot, or workspace entry
  };
  struct Arg {
    exec::Param param;
    Pointer from;               // Buffer, PartialMean, PartialM2, TensorMap
    std::string tensor;         // TensorMap: the matrix's name in errors
    CUdeviceptr ptr = 0;        // the pointer passed (Buffer, partials)
    int value = 0;              // Dim, SmemFloats
    unsigned long long rng = 0; // RngSeed, RngOffset
    int64_t map_rows = 0;       // TensorMap extents, at prepare()
    int64_t map_inner = 0;
    CachedTensorMap map;
  };
  struct Launch {
    LaunchShape shape;
    size_t variant = 0;  // the compiled variant prepare() chose (rt::variant_of)
    size_t function = 0; // the functions' index of the launch's first variant
    std::vector<Arg> args;
    std::vector<void *> arg_pointers; // into args; sized once
    bool gemm = false;                // a bare-product GEMM (a hook's target)
    bool per_bind = false;            // launched by enqueue_per_bind only
    Pointer a, b, c;                  // its operands and result
    bool trans_b = false;
    int64_t m = 0, n = 0, k = 0;
    DType operands = DType::F32, result = DType::F32;
    CUdeviceptr a_ptr = 0, b_ptr = 0, c_ptr = 0;
  };
  static GemmCall gemm_call(const Launch &l);
  // A copy of output `output` from `from`, before the kernels (`declared`) or after.
  struct OutputCopy {
    size_t output;
    Pointer from;
    bool declared;
    size_t bytes = 0;
    CUdeviceptr src = 0, dst = 0;
  };
  // An exchange's buffers and count at the prepared dims (exec::Exchange).
  struct ExchangeCall {
    size_t after;
    Pointer send, recv;
    size_t count = 0;
    CUdeviceptr send_ptr = 0, recv_ptr = 0;
  };
  Pointer pointer_of(size_t buffer) const;
  size_t entry_bytes(const exec::WorkspaceEntry &w, const Dims &dims, int multiprocessors) const;
  std::vector<size_t> workspace_offsets(const Dims &dims, int multiprocessors, size_t *total) const;
  CUdeviceptr address(const Pointer &p, const CUdeviceptr *tensors, CUdeviceptr workspace) const;

  const exec::Executable &executable_;
  int max_splits_;
  std::vector<Launch> launches_;
  std::vector<OutputCopy> copies_;
  std::vector<ExchangeCall> exchanges_;
  std::vector<size_t> offsets_;       // of the workspace entries, at prepare()
  std::vector<size_t> counter_bytes_; // of the workspace entries (SplitCounters, else 0)
  CUdeviceptr workspace_ = 0;         // at point()
  bool draws_ = false;
};

} // namespace kfuse::rt
