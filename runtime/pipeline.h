// Internals of kfuse::Pipeline (include/kfuse/kfuse.h) that tools share, and the benchmark
// hooks that stay out of the public API.
#pragma once

#include "compiler/executable.h"
#include "kfuse/kfuse.h"

#include <cuda.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kfuse::rt {

struct CompiledModule; // runtime/nvrtc_compiler.h

// The NVRTC target: `requested`, else the current GPU's, else sm_90a (compiling needs no GPU).
std::string target_arch(const std::string &requested);

// A GEMM's variants (exec::Kernel::variants: the same GEMM with another tile) are there to run
// faster than the kernel they stand beside where the bound dims suit them. One that ptxas
// compiled with spills cannot be trusted to, and the kernel beside it always exists: this drops
// every variant whose report entry (in `report`, by entry name) shows spills from `executable`,
// so runs never take it, and says so in that entry's `unused`.
void drop_spilling_variants(exec::Executable &executable, CompileReport &report);

// A bare-product GEMM kernel as a run would launch it, row-major: C = A @ B^T when trans_b, else
// A @ B. A and B hold `operands` elements, C `result` elements (the plan's buffer types).
struct GemmCall {
  bool trans_b;
  int64_t m, n, k;
  const void *a;
  const void *b;
  void *c;
  int64_t lda, ldb, ldc;
  DType operands, result;
};

// Runs a bare-product GEMM on the stream instead of its kernel (benchmarks put cuBLAS here).
using GemmHook = std::function<void(const GemmCall &, CUstream)>;

// A fused GEMM kernel as a run launched it: the compiled variant its dims took (its entry), its
// tile ("128x256x1": rows x columns x blocks per SM; empty where the mainloop has one), its config
// and why, and the K split count S the last run's dims resolved (0 before any run).
struct GemmLaunch {
  std::string kernel, tile, config;
  int splits = 0;
};

struct PipelineAccess {
  // What the compiler is asked for a pipeline of `options` (the target arch resolved). `fuse`
  // false: the unfused baseline benchmarks compare against (one kernel per matrix op, every GEMM
  // a bare product). Fused, with Options::use_tuned and a GPU present, the GEMMs take the
  // configurations the tuning store (runtime/tuning_store.h) holds for that GPU.
  static exec::Request request(const Options &options, bool fuse);
  // Every Pipeline is made here: NVRTC (through the disk cache) on `executable`, for its target
  // (the compiler built it for request(options, ...)), so each front end lowers once.
  static Pipeline compile(exec::Executable executable);
  // compile() where `module` is already NVRTC's result on `executable` (compile_source).
  static Pipeline compile(exec::Executable executable, CompiledModule module);
  // NVRTC on `executable`'s source for its target, through the disk cache: compile()'s first
  // step, callable on any thread.
  static CompiledModule compile_source(const exec::Executable &executable);
  // A pipeline compiled with Options::backward: its forward and its backward, both through
  // compile(), NVRTC compiling the backward on a second thread meanwhile
  // (runtime/pipeline_backward.cpp).
  static Pipeline compile_training(exec::Training training);
  // The backward of such a pipeline (its plan, source and compile report); throws for another.
  static const Pipeline &backward(const Pipeline &p);
  // The values the last run of such a pipeline saved for its backward, in the order of
  // exec::Training's sources.saved (memory the pipeline owns; the next run overwrites it).
  static std::vector<Tensor> saved(const Pipeline &p);
  static const exec::Executable &executable(const Pipeline &p);
  // Every later run (and backward() of a training pipeline) hands its bare-product GEMM kernels
  // (exec::Kernel::bare_gemm) to `hook` instead of launching them; an empty hook launches them
  // again.
  static void set_gemm_hook(Pipeline &p, GemmHook hook);
  // Every GEMM kernel of `p` in launch order, with S at the dims of its last run (kfuse bench
  // reports them beside the fused pipeline's time).
  static std::vector<GemmLaunch> gemm_launches(const Pipeline &p);

private:
  static Pipeline compile_with(exec::Executable executable, std::optional<CompiledModule> module);
};

} // namespace kfuse::rt
