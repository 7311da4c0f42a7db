// kfuse's C++ API: compile a .kf pipeline once at program start, bind its parameters and
// state to device memory, then run it on a stream as often as needed.
//
//   auto p = kfuse::Pipeline::from_file("gemm_bn_scale_softmax.kf", {kfuse::Mode::Eval});
//   p.bind("weight", {d_weight, {8192, 8192}});  // params and state, by name
//   p.run({{"x", {d_x, {1024, 8192}}}}, {{d_out, {1024, 8192}}}, stream);
//
// Training: compiled with Options::backward, a run keeps what backward() reads, and
// backward(output gradients, {{"x", d_x_grad}, {"weight", d_weight_grad}, ...}, stream) writes
// the gradients (docs/DSL.md, "Training from C++ and the command line").
//
// Every error is a kfuse::Error (kfuse/error.h) naming the pipeline, the tensor and what was
// expected. Compiling is thread-safe; a Pipeline runs on one stream at a time (use one per
// concurrent stream), in the CUDA context current on the thread when it first runs (else device
// 0's primary context), and in that context only.
#pragma once

#include "kfuse/error.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

typedef struct CUstream_st *CUstream; // the same type as cudaStream_t

namespace kfuse {

enum class Mode { Train, Eval };
// How GEMMs of f32 tensors multiply: fp32 (exact FMA), tf32 (operands rounded to nearest, as
// cuBLAS; on sm_90a weights are rounded once per bind(): docs/DSL.md, "Precision tf32"), 3xtf32
// (FP32x3), or BF16: their operands rounded to bf16 (as torch.autocast), fp32 accumulation, f32
// results; weights are rounded once per bind() (docs/DSL.md, "Precision bf16"). GEMMs of
// bf16/f16 tensors multiply in their type whatever the precision, accumulating in fp32.
enum class Precision { FP32, TF32, BF16, FP32x3 };

struct Options {
  Mode mode = Mode::Train;
  Precision precision = Precision::FP32;
  std::string arch; // "sm_90a"; empty: the current GPU's, or sm_90a where there is none
  // A GEMM with fewer output tiles than the GPU has SMs (few rows) splits its K into up to 8
  // parts that run on idle SMs and are summed in a fixed order (split-K, bitwise repeatable);
  // the count is chosen from the shape and the SM count when a run binds the dims. 0: that
  // choice; n >= 1: at most n parts (1: never split, e.g. to compare).
  int max_split_k = 0;
  // GEMM configurations `kfuse tune` stored for this device (the tuning store under the disk
  // cache's directory) replace the heuristics' where they exist; the store is only read. false:
  // the heuristics always.
  bool use_tuned = true;
  // Non-empty: before compiling, tune the pipeline's GEMM kernels on the current GPU at these
  // dims (every dim of the pipeline, e.g. {{"N", 1024}}), as `kfuse tune` does, and store the
  // results; the compile then uses them. Takes seconds (a compile per candidate tile, a timed run
  // per candidate); never done unless asked here. Needs a GPU and use_tuned. A max_split_k set
  // here still caps every run's split count, tuned caps included.
  std::map<std::string, int64_t> tune_at_start;
  // Train-mode batchnorm statistics over the batches of several processes (SyncBatchNorm):
  // n >= 1 ranks, each running this pipeline on its own batch. Every run then merges its
  // statistics into per-feature (count, mean, M2) summaries, has the all-gather set with
  // set_all_gather() exchange them, and merges the gathered summaries in rank order, so every
  // rank normalizes with, and updates its running statistics from, the whole batch. 0: each
  // run's own batch only.
  int batch_stats_ranks = 0;
  // Also compile the pipeline's backward (reverse mode, docs/DSL.md "Gradients"): every run then
  // keeps what the backward reads (saved values, in memory the pipeline owns) and backward()
  // writes the gradients of the inputs and params. With batch_stats_ranks, the backward takes
  // the means of its batchnorms' input gradients over every rank's batch too (through the same
  // all-gather), its parameter gradients being the rank's own, as nn.SyncBatchNorm's before
  // DDP averages them. Not with tune_at_start.
  bool backward = false;
  // With backward: inputs and params whose gradients backward() does not write (frozen
  // parameters, inputs that need none; gradients() leaves them out). The backward computes
  // nothing only they need and the forward saves nothing for them: the dX GEMM of a linear whose
  // input needs no gradient is not run. A name that is no f32/bf16/f16 input or param of the
  // pipeline is refused.
  std::vector<std::string> frozen;
};

// The all-gather of a pipeline compiled with Options::batch_stats_ranks = n: gathers `count`
// doubles at `send` from every rank into `recv` (n * count doubles, rank r's at r * count),
// enqueued on `stream` or ordered with it both ways (as ncclAllGather on that stream is), in the
// same order on every rank.
using AllGather =
    std::function<void(const double *send, double *recv, size_t count, CUstream stream)>;

// Element types: a Tensor's dtype must be the one its .kf declaration names. f32 is 4 bytes,
// f16 (IEEE half) and bf16 (bfloat16) 2 bytes; i64 (8 bytes) holds class indices, an input
// read as cross_entropy's target (torch.int64).
enum class DType { F32, F16, BF16, I64 };

// A device tensor: a pointer from cudaMalloc/cuMemAlloc (or a framework) in the pipeline's
// CUDA context, its shape (rank 1 to 4, the last axis the features: a [B, T, F] tensor is B*T
// rows), dtype and row stride. Rows are stored one after another (row-major); the elements of
// a row are contiguous. kfuse takes tensors aligned to their
// element size (4 bytes for f32, 2 for f16/bf16; a GEMM operand on the sm_90a GEMM: 16 bytes)
// and contiguous: row_stride 0 (or the row length); anything else is refused clearly.
struct Tensor {
  void *data = nullptr;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  int64_t row_stride = 0; // elements from one row's start to the next (rank 2-4); 0: contiguous
};

// Where a pipeline's train-mode dropouts draw (docs/DSL.md, "Dropout"): the Philox key and the
// counter word each train-mode run advances by one.
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

struct KernelReport {
  std::string name;
  int registers = 0, shared_bytes = 0, stack_bytes = 0, spill_stores = 0, spill_loads = 0;
  std::string config; // GEMM kernels: the tile configuration the code generator chose, and why
  // A variant of the planned kernel listed before it (the same GEMM with another tile, which
  // runs take by the bound dims), not a kernel of the plan.
  bool variant = false;
  // A variant runs never take, and why (ptxas spilled it); empty where runs may take it.
  std::string unused;
};

struct CompileReport {
  double milliseconds = 0; // NVRTC time, or the cache lookup on a hit
  bool cache_hit = false;
  std::string arch;
  std::string cache_key;
  std::vector<KernelReport> kernels;
};

namespace rt {
struct PipelineAccess; // the runtime's and the tools' way in (runtime/pipeline.h)
}

class Pipeline {
public:
  static Pipeline from_file(const std::string &path, const Options &options = {});
  // `file_name` names the text in diagnostics.
  static Pipeline from_string(const std::string &kf_text, const std::string &file_name,
                              const Options &options = {});
  Pipeline(Pipeline &&) noexcept;
  Pipeline &operator=(Pipeline &&) noexcept;
  ~Pipeline();

  const std::string &name() const;
  const std::string &cuda_source() const; // the generated translation unit
  std::string plan_text() const;
  const CompileReport &report() const;
  // Declared names, in declaration order; outputs are positional (the `return` order).
  std::vector<std::string> inputs() const;
  std::vector<std::string> params() const; // params and state
  size_t output_count() const;
  // Shapes once the pipeline's dims are bound, e.g. {{"N", 1024}}: of a declared input,
  // param or state, and of output `i`.
  std::vector<int64_t> shape(const std::string &name,
                             const std::map<std::string, int64_t> &dims) const;
  std::vector<int64_t> output_shape(size_t i, const std::map<std::string, int64_t> &dims) const;
  // The declared element type of output `i` (what run() checks the output tensor against).
  DType output_dtype(size_t i) const;
  // The dims that tensors of these shapes (inputs, params or state, by name) bind, checked as
  // run() checks them: to allocate outputs, output_shape(i, dims({{"x", x_shape}})).
  std::map<std::string, int64_t>
  dims(const std::map<std::string, std::vector<int64_t>> &shapes) const;

  // Binds a param or state; its shape is checked against the declaration (symbolic dims
  // are bound by it and checked against every other tensor at run). Kernels that read params
  // only run once per bind, at the first run (and backward()) after it: precision BF16's
  // rounding of weights to bf16, on sm_90a precision TF32's rounding of a linear's weight to
  // tf32, and on sm_90a the transposed copy of a weight that a GEMM
  // multiplies by as [in, out] (matmul, and every backward's dX = dY W). A weight updated in
  // place must be bound again for runs to see the update; binding the tensor that is bound
  // (same pointer, shape, dtype and stride) only runs those kernels again, checking nothing anew.
  void bind(const std::string &name, const Tensor &t);
  // Runs every kernel on `stream` (asynchronously). Dims are inferred from the tensors'
  // shapes; each input, output and bound tensor is checked: shape, dtype, stride, that it is
  // device memory of the pipeline's context, and that no output overlaps another tensor.
  // State is updated in place. Orders the inputs by name and calls the positional run().
  void run(const std::map<std::string, Tensor> &inputs, const std::vector<Tensor> &outputs,
           CUstream stream = nullptr);
  // The same, positional: `inputs` in declaration order (inputs()), `outputs` in return order.
  // This is the hot path: a run whose tensors equal the last run's (pointer, shape, dtype,
  // stride), with no bind() or set_workspace() in between, reuses that run's checks, kernel
  // arguments and workspace, and only launches: no allocation, no synchronisation, no string
  // work. Where only pointers differ, the moved tensors are checked as new ones (layout,
  // device memory, overlaps); any other difference is checked in full. The errors are the
  // by-name run's. A run can be captured in a CUDA graph; replays read the tensors' memory
  // anew (new data, updated params).
  void run(const Tensor *inputs, size_t input_count, const Tensor *outputs, size_t output_count,
           CUstream stream = nullptr);
  // Runs now, on `stream` (the runs' stream), the kernels that read params for those bound since
  // the last run, which would otherwise run at the next one: a caller that binds updated weights
  // before it needs the run starts them early (kfuse.torch.Fused, the backward's transposed
  // weights during the forward). Runs nothing and returns false where the next run must check
  // first: before a first run, or after binding a tensor other than the one bound (pointer,
  // shape, dtype or stride).
  bool prepare_params(CUstream stream = nullptr);

  // Bytes of workspace (intermediates, partial statistics, split-K's partial tiles) a run at
  // `dims` needs, e.g. workspace_size(dims({{"x", x_shape}})); every dim must be bound. 0: the
  // pipeline keeps none. Where a GEMM may split K at these dims, the size depends on the SM count
  // of the device: the pipeline's once it has run, the current context's device (else device 0)
  // before; on a machine without a GPU, the most any device needs (K split the most it allows).
  size_t workspace_size(const std::map<std::string, int64_t> &dims) const;

  // The dropout stream: a run of a pipeline that draws (a dropout in train mode) uses
  // rng_state() and then advances its offset by one, so successive runs drop different elements
  // and a run repeats from the (seed, offset) it used. A CUDA graph captured from a run replays
  // that run's (seed, offset): the same mask on every replay. Both start at 0.
  void set_rng(uint64_t seed, uint64_t offset = 0);
  RngState rng_state() const;
  // Later runs keep their intermediates in [data, data + bytes) instead of memory the pipeline
  // allocates (at the first run of each larger shape): device memory of the pipeline's context,
  // 256-byte aligned, that no tensor of a run overlaps and that no other run uses at the same
  // time (other pipelines may use it between runs: every run then zeroes its split-K counters
  // there). A run that needs more than `bytes` throws. set_workspace(nullptr, 0) goes back to
  // the pipeline's own.
  void set_workspace(void *data, size_t bytes);
  // Training (a pipeline compiled with Options::backward; on any other these throw). A run keeps
  // what backward() reads: the values the forward saves (in memory the pipeline allocates at the
  // first run of each larger shape, written on the run's stream), the params and, in train mode,
  // the state as the run read them, and its input tensors by pointer: leave those unchanged until
  // backward(). backward() then runs in the pipeline's mode at the run's dropout stream (the
  // run's masks), for the last run: a later run replaces what an earlier one kept.
  //
  // The inputs and params (declaration order) whose gradients backward() writes: those an output
  // depends on through differentiable ops. State gets none.
  std::vector<std::string> gradients() const;
  // The shape and element type of gradient `i` (those of the tensor it is the gradient of).
  std::vector<int64_t> gradient_shape(size_t i, const std::map<std::string, int64_t> &dims) const;
  DType gradient_dtype(size_t i) const;
  // The gradient of the loss with respect to every output (grad_outputs, in return order, each of
  // its output's shape and type at the last run's dims) in, the gradient of every input and
  // param of gradients() out, by name, on `stream` (asynchronously, ordered after the run when
  // on its stream). Orders the gradients by gradients() and calls the positional backward().
  void backward(const std::vector<Tensor> &grad_outputs,
                const std::map<std::string, Tensor> &gradients, CUstream stream = nullptr);
  // The same, positional: `gradients` in gradients() order. Like run(), a backward whose
  // tensors equal the last one's only launches.
  void backward(const Tensor *grad_outputs, size_t grad_output_count, const Tensor *gradients,
                size_t gradient_count, CUstream stream = nullptr);

  // The all-gather runs of a pipeline compiled with Options::batch_stats_ranks > 0 call between
  // their kernels, once per train-mode batchnorm; such a run without one throws. Runs that call
  // it launch their kernels one by one (no replayed graph), on the caller's stream. With
  // Options::backward, backward() calls it too, for the means each train-mode batchnorm's input
  // gradient takes (of the output gradient and of its product with the normalized input).
  void set_all_gather(AllGather all_gather);
  // The all-gathers each run makes: one per train-mode batchnorm where the pipeline was compiled
  // with Options::batch_stats_ranks > 0, else none (backward() makes its own).
  size_t all_gathers_per_run() const;

private:
  friend struct rt::PipelineAccess;
  struct Impl;
  explicit Pipeline(std::unique_ptr<Impl> impl);
  Impl &impl() const; // throws kfuse::Error on a moved-from Pipeline
  std::unique_ptr<Impl> impl_;
};

} // namespace kfuse
