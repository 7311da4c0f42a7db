// cuBLAS, loaded at run time: the GEMM of `kfuse bench`'s baselines.
//
// libcublas.so.13 is opened with dlopen, never linked, so `kfuse` starts (and every command
// but `bench` works) on machines without cuBLAS. <cublas_v2.h> is used for types and enums
// only; the loader takes the exact symbols named below.
//
// cuBLAS runs in the current context of the calling thread; kfuse's tools make a context
// current first (rt::Driver::make_current: device 0's primary where none is), the one
// cuBLAS's own runtime would pick, so buffers and streams from kfuse are valid there.
#pragma once

#include "compiler/ir/types.h"

#include <cuda.h>

#include <cstdint>
#include <string>

typedef struct cublasContext *cublasHandle_t;

namespace kfuse::tool {

// The GEMM arithmetic of f32 operands: exact fp32 FMA, or tf32 tensor cores
// (CUBLAS_COMPUTE_32F_FAST_TF32). bf16/f16 operands always run on tensor cores with fp32
// accumulation (CUBLAS_COMPUTE_32F), as PyTorch runs them; TF32 does not apply to them.
enum class GemmMath { FP32, TF32 };

// The element types of a GEMM: A and B share `operands` (as the DSL's type rules require),
// C is `result`. cuBLAS takes f32 x f32 -> f32, and bf16 x bf16 or f16 x f16 -> the same
// half type or f32.
struct GemmTypes {
  ir::DType operands = ir::DType::F32;
  ir::DType result = ir::DType::F32;
};

// A cuBLAS handle. Move-only; destroyed with the object.
class Cublas {
public:
  // Loads the library (once per process) and creates a handle. Throws kfuse::Error naming the
  // library or the failing call, e.g. "libcublas.so.13 not found: ...".
  Cublas();
  ~Cublas();
  Cublas(Cublas &&other) noexcept;
  Cublas &operator=(Cublas &&other) noexcept;
  Cublas(const Cublas &) = delete;
  Cublas &operator=(const Cublas &) = delete;

  // Row-major C[m,n] = A[m,k] @ B^T with B[n,k] when `trans_b`, else A @ B with B[k,n];
  // lda/ldb/ldc are row strides in elements of `types`. Enqueued on `stream`; asynchronous.
  // Throws kfuse::Error for types cuBLAS does not take (see GemmTypes) and for TF32 math on
  // half operands.
  void gemm(GemmMath math, GemmTypes types, bool trans_b, int64_t m, int64_t n, int64_t k,
            const void *a, int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc,
            CUstream stream);

  // cuBLAS's version, e.g. 130000 -> "13.0.0".
  std::string version() const;

private:
  cublasHandle_t handle_ = nullptr;
};

} // namespace kfuse::tool
