// kfuse's C++ API: compile a .kf pipeline once at program start, bind its parameters and
// state to device memory, then run it on a stream as often as needed.
//
//   kfuse::Pipeline p = kfuse::Pipeline::from_file("gemm_bn_scale_softmax.kf", {kfuse::Mode::Eval});
//   p.bind("weight", {d_weight, {8192, 8192}});        // params and state, by name
//   ...
//   p.run({{"x", {d_x, {1024, 8192}}}}, {{d_out, {1024, 8192}}}, stream);
//
// Every error is a kfuse::Error (runtime/error.h) whose message names the pipeline, the
// tensor and what was expected. Compiling is thread-safe; one Pipeline runs on one stream
// at a time (its intermediates are its own), so use a Pipeline per concurrent stream.
#pragma once

#include "runtime/error.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

typedef struct CUstream_st *CUstream; // the same type as cudaStream_t

namespace kfuse {

enum class Mode { Train, Eval };
// fp32: exact fp32 FMA GEMM. Other precisions are rejected until their GEMM templates exist.
enum class Precision { FP32, TF32, BF16, FP32x3 };

struct Options {
  Mode mode = Mode::Train;
  Precision precision = Precision::FP32;
  std::string arch; // "sm_90a"; empty: the GPU's, or sm_90a where there is none
  // false: the unfused baseline benchmarks compare against (lowering only, one kernel per
  // matrix op, every GEMM a bare product).
  bool fuse = true;
};

// A bare GEMM of an unfused pipeline, row-major: C = A @ B^T when trans_b, else A @ B.
struct GemmCall {
  bool trans_b;
  int64_t m, n, k;
  const float *a;
  const float *b;
  float *c;
  int64_t lda, ldb, ldc;
};

// A device tensor: a pointer from cudaMalloc/cuMemAlloc (or a framework) and its shape.
// kfuse tensors are f32, row-major, contiguous, 4-byte aligned.
struct Tensor {
  void *data = nullptr;
  std::vector<int64_t> shape;
};

struct KernelReport {
  std::string name;
  int registers = 0, shared_bytes = 0, stack_bytes = 0, spill_stores = 0, spill_loads = 0;
};

struct CompileReport {
  double milliseconds = 0; // NVRTC time, or the cache lookup on a hit
  bool cache_hit = false;
  std::string arch;
  std::string cache_key;
  std::vector<KernelReport> kernels;
};

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
  std::vector<std::string> params() const;  // params and state
  size_t output_count() const;
  // Shapes once the pipeline's dims are bound, e.g. {{"N", 1024}}: of a declared input,
  // param or state, and of output `i`.
  std::vector<int64_t> shape(const std::string &name, const std::map<std::string, int64_t> &dims) const;
  std::vector<int64_t> output_shape(size_t i, const std::map<std::string, int64_t> &dims) const;

  // Binds a param or state; its shape is checked against the declaration (symbolic dims
  // are bound by it and checked against every other tensor at run).
  void bind(const std::string &name, const Tensor &t);
  // Runs every kernel on `stream` (asynchronously). Dims are inferred from the tensors'
  // shapes; each input, output and bound tensor is checked. State is updated in place.
  void run(const std::map<std::string, Tensor> &inputs, const std::vector<Tensor> &outputs,
           CUstream stream = nullptr);

  // Unfused pipelines only: run every GEMM kernel through `gemm` instead (benchmarks put
  // cuBLAS here). Throws on a fused pipeline, whose GEMMs carry epilogues.
  void set_gemm_override(std::function<void(const GemmCall &, CUstream)> gemm);

private:
  struct Impl;
  explicit Pipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace kfuse
