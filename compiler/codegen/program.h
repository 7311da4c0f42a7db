// Code generation: a plan becomes one CUDA translation unit plus a launch description
// for each of its kernels, in plan order.
//
// The translation unit includes the template headers (templates/*.cuh), defines one
// generated functor per kernel (the epilogue, prologue or element function the template
// calls) and one `extern "C"` entry point per kernel named after it (k0_gemm, ...). Output
// is deterministic: the same plan gives byte-identical source.
#pragma once

#include "kfuse/error.h"

#include "compiler/plan/plan.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace kfuse::codegen {

// A plan the code generator cannot express (e.g. an f16 tensor); names the tensor or op.
struct CodegenError : kfuse::Error {
  using kfuse::Error::Error;
};

// How GEMM kernels multiply: the fp32 SIMT template, or tensor cores (gemm_tc.cuh) with
// inputs rounded to tf32, or split into two tf32 terms each (3xTF32, fp32-level accuracy).
enum class GemmMath : uint8_t { Fp32, Tf32, Tf32x3 };

// One kernel argument, in entry-point order.
struct LaunchParam {
  enum class Kind : uint8_t {
    Buffer,      // the device buffer of `value` (declared tensor or stored value)
    PartialMean, // column partials of `value`
    PartialM2,
    Dim,         // the bound extent of `dim`, as int
    SmemFloats,  // row kernels: how many floats of the row fit in dynamic shared memory
  };
  Kind kind;
  ir::ValueId value = -1;
  std::string dim;
};

struct KernelLaunch {
  std::string entry; // the kernel's name
  plan::KernelKind kind;
  // The iteration space: GEMM m x n (k is `inner`), row kernels rows x row length,
  // elementwise and column-partials rows x cols, column kernels 1 x features.
  ir::Dim rows, cols, inner;
  int block_threads = 0; // row kernels: the Threads the template was instantiated with
  GemmMath math = GemmMath::Fp32; // GEMM kernels: which template runs
  std::vector<LaunchParam> params;
};

struct Program {
  std::string file_name; // "<pipeline>.cu"
  std::string source;    // #include "name.cuh" lines; the runtime supplies the headers
  std::vector<KernelLaunch> launches;
};

Program generate(const plan::Plan &p, GemmMath math = GemmMath::Fp32);

// `source` with every #include of a template replaced by the template's text (once
// each), so `nvcc -c` compiles it with no other file.
std::string inline_templates(const std::string &source);

// Rows of the per-tile column partials of a matrix with `m` rows.
int64_t partial_tiles(int64_t m);

} // namespace kfuse::codegen
