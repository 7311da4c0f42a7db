// Internals of kfuse::Pipeline (include/kfuse/kfuse.h) that tools share, and the benchmark
// hooks that stay out of the public API.
#pragma once

#include "compiler/codegen/program.h"
#include "compiler/lower.h"
#include "kfuse/kfuse.h"

#include <cuda.h>

#include <functional>
#include <string>
#include <vector>

namespace kfuse::rt {

// Throws kfuse::Error for a value that is no Precision, and for a precision the GEMM
// templates do not implement (bf16).
void require_supported(Precision p);
// The GEMM template a precision runs on (after require_supported).
codegen::GemmMath gemm_math(Precision p);

// The NVRTC target: `requested`, else the current GPU's, else sm_90a (compiling needs no GPU).
std::string target_arch(const std::string &requested);

// A GEMM's variants (KernelLaunch::by_rows: the same GEMM with another tile) are there to run
// faster than the kernel they stand beside where the bound dims suit them. One that ptxas
// compiled with spills cannot be trusted to, and the kernel beside it always exists: this drops
// every variant whose report entry (in `report`, by entry name) shows spills from `program`, so
// runs never take it, and says so in that entry's `unused`.
void drop_spilling_variants(codegen::Program &program, CompileReport &report);

// A bare GEMM of an unfused pipeline, row-major: C = A @ B^T when trans_b, else A @ B. A and
// B hold `operands` elements, C `result` elements (the unfused plan's buffer types).
struct GemmCall {
  bool trans_b;
  int64_t m, n, k;
  const void *a;
  const void *b;
  void *c;
  int64_t lda, ldb, ldc;
  ir::DType operands, result;
};

// A fused GEMM kernel as a run launched it: the compiled variant its dims took (its entry), its
// tile ("128x256x1": rows x columns x blocks per SM; empty where the mainloop has one), its config
// and why, and the K split count S the last run's dims resolved (0 before any run).
struct GemmLaunch {
  std::string kernel, tile, config;
  int splits = 0;
};

struct PipelineAccess {
  // What lower() is asked for a pipeline of `options` (the target arch resolved). Throws
  // kfuse::Error for a value that is no Mode or Precision, and for bf16. `fuse` false: the
  // unfused baseline benchmarks compare against (one kernel per matrix op, every GEMM a bare
  // product). Fused, with Options::use_tuned and a GPU present, the GEMMs take the
  // configurations the tuning store (runtime/tuning_store.h) holds for that GPU.
  static LowerOptions lower_options(const Options &options, bool fuse);
  // Every Pipeline is made here: NVRTC (through the disk cache) on what
  // lower(src, lower_options(options, fuse)) returned, so each front end lowers once.
  static Pipeline compile(Lowered lowered, const Options &options, bool fuse);
  // The pipeline's graph as parsed (before any pass): what the fp64 reference interprets.
  static const ir::Graph &graph(const Pipeline &p);
  // Unfused pipelines only: run every GEMM kernel through `gemm` instead (benchmarks put
  // cuBLAS here). Throws on a fused pipeline, whose GEMMs carry epilogues.
  static void set_gemm_override(Pipeline &p, std::function<void(const GemmCall &, CUstream)> gemm);
  // Every GEMM kernel of `p` in launch order, with S at the dims of its last run (kfuse bench
  // reports them beside the fused pipeline's time).
  static std::vector<GemmLaunch> gemm_launches(const Pipeline &p);
};

} // namespace kfuse::rt
