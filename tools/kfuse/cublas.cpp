#include "tools/kfuse/cublas.h"

#include "runtime/driver.h"
#include "runtime/error.h"

#include <cublas_v2.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <climits>
#include <initializer_list>
#include <type_traits>
#include <utility>

namespace kfuse::tool {
namespace {

// cublasGemmEx is overloaded in C++ (a wrapper takes the legacy cudaDataType compute type),
// so its pointer type is spelled out; the static_assert resolves the overload in an
// unevaluated context, which checks the signature against the header without linking cuBLAS.
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void *, const void *, cudaDataType, int,
                                    const void *, cudaDataType, int, const void *, void *,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
static_assert(std::is_same_v<decltype(static_cast<GemmExFn>(&::cublasGemmEx)), GemmExFn>);

constexpr const char *kLibrary = "libcublas.so.13";
// Where the loader's search path does not reach the toolkit, its usual home is tried too.
constexpr const char *kToolkitLibrary = "/usr/local/cuda/lib64/libcublas.so.13";

struct CublasLibrary {
  std::string why_unavailable; // empty when loaded
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasSetMathMode) set_math_mode = nullptr;
  decltype(&::cublasGetVersion_v2) get_version = nullptr;
  decltype(&::cublasGetStatusName) status_name = nullptr;
  GemmExFn gemm_ex = nullptr;

  // The process-wide instance. The library is never closed: handles may be destroyed
  // during exit.
  static const CublasLibrary &get() {
    static const CublasLibrary *library = new CublasLibrary();
    return *library;
  }

  void require() const {
    if (!why_unavailable.empty())
      throw Error("cuBLAS unavailable: " + why_unavailable);
  }

  void check(cublasStatus_t s, const char *call) const {
    if (s == CUBLAS_STATUS_SUCCESS)
      return;
    const char *name = status_name != nullptr ? status_name(s) : nullptr;
    throw Error(fmt::format("cuBLAS call {} failed: {} ({})", call,
                            name != nullptr ? name : "unknown status", static_cast<int>(s)));
  }

private:
  CublasLibrary() {
    std::string tried;
    void *lib = nullptr;
    for (const char *name : {kLibrary, kToolkitLibrary}) {
      dlerror();
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr)
        break;
      const char *why = dlerror();
      tried += fmt::format("{}{}", tried.empty() ? "" : "; ", why != nullptr ? why : name);
    }
    if (lib == nullptr) {
      why_unavailable = fmt::format("{} not found ({}); set LD_LIBRARY_PATH to the CUDA "
                                    "toolkit's lib64",
                                    kLibrary, tried);
      return;
    }
    std::string missing;
    auto resolve = [&](auto &pointer, const char *symbol) {
      void *address = dlsym(lib, symbol);
      if (address == nullptr)
        missing += missing.empty() ? symbol : fmt::format(", {}", symbol);
      pointer = reinterpret_cast<std::remove_reference_t<decltype(pointer)>>(address);
    };
    resolve(create, "cublasCreate_v2");
    resolve(destroy, "cublasDestroy_v2");
    resolve(set_stream, "cublasSetStream_v2");
    resolve(set_math_mode, "cublasSetMathMode");
    resolve(get_version, "cublasGetVersion_v2");
    resolve(status_name, "cublasGetStatusName");
    resolve(gemm_ex, "cublasGemmEx");
    if (!missing.empty())
      why_unavailable = fmt::format("{} lacks {}", kLibrary, missing);
  }
};

cudaDataType cuda_type(ir::DType t) {
  switch (t) {
  case ir::DType::F32:
    return CUDA_R_32F;
  case ir::DType::F16:
    return CUDA_R_16F;
  case ir::DType::BF16:
    return CUDA_R_16BF;
  case ir::DType::I64: // class indices are never a GEMM operand (infer_type)
    break;
  }
  throw Error("cuBLAS GEMM: not a kfuse element type");
}

int to_int(int64_t v, const char *what) {
  if (v < 0 || v > INT_MAX)
    throw Error(fmt::format("cuBLAS GEMM: {} = {} does not fit cublasGemmEx's int", what, v));
  return static_cast<int>(v);
}

} // namespace

Cublas::Cublas() {
  rt::Driver::get().make_current();
  const CublasLibrary &lib = CublasLibrary::get();
  lib.require();
  lib.check(lib.create(&handle_), "cublasCreate_v2");
  // Default math: with CUBLAS_COMPUTE_32F no reduced-precision path is taken, so an fp32 GEMM
  // is an fp32 GEMM; tf32 is asked for through the compute type instead.
  lib.check(lib.set_math_mode(handle_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
}

Cublas::~Cublas() {
  if (handle_ == nullptr)
    return;
  // Errors are ignored: at process exit the context may already be gone.
  CublasLibrary::get().destroy(handle_);
}

Cublas::Cublas(Cublas &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}

Cublas &Cublas::operator=(Cublas &&other) noexcept {
  if (this != &other) {
    Cublas doomed(std::move(*this));
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void Cublas::gemm(GemmMath math, GemmTypes types, bool trans_b, int64_t m, int64_t n, int64_t k,
                  const void *a, int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc,
                  CUstream stream) {
  const bool half = types.operands != ir::DType::F32;
  if (half && math == GemmMath::TF32)
    throw Error(fmt::format("cuBLAS GEMM: tf32 math does not apply to {} operands",
                            ir::dtype_name(types.operands)));
  if (types.result != ir::DType::F32 && types.result != types.operands)
    throw Error(fmt::format("cuBLAS GEMM: {} operands cannot produce a {} result (f32 or {})",
                            ir::dtype_name(types.operands), ir::dtype_name(types.result),
                            ir::dtype_name(types.operands)));
  const CublasLibrary &lib = CublasLibrary::get();
  lib.check(lib.set_stream(handle_, stream), "cublasSetStream_v2");
  // cuBLAS is column-major: a row-major C[m,n] is a column-major C^T[n,m], so compute
  // C^T = op(B)^T A^T, i.e. swap the operands and the roles of m and n. With CUBLAS_COMPUTE_32F
  // alpha and beta are floats for every operand type.
  const float one = 1.0f, zero = 0.0f;
  cublasComputeType_t compute =
      math == GemmMath::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType ab = cuda_type(types.operands);
  lib.check(lib.gemm_ex(handle_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, to_int(n, "n"),
                        to_int(m, "m"), to_int(k, "k"), &one, b, ab, to_int(ldb, "ldb"), a, ab,
                        to_int(lda, "lda"), &zero, c, cuda_type(types.result), to_int(ldc, "ldc"),
                        compute, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx");
}

std::string Cublas::version() const {
  const CublasLibrary &lib = CublasLibrary::get();
  int v = 0;
  lib.check(lib.get_version(handle_, &v), "cublasGetVersion_v2");
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

} // namespace kfuse::tool
