// The CUDA driver API, loaded at run time.
//
// libcuda.so.1 is opened with dlopen, never linked, so every part of kfuse that does not touch a
// GPU (parsing, planning, emitting, NVRTC compiling) runs on machines with no driver. <cuda.h>
// is used for types, enums and function signatures only.
//
// Driver::get() is the process-wide instance, loaded on first use. It works in device 0's
// primary context, the one the CUDA runtime, cuBLAS and PyTorch use, so memory and streams are
// shared with them. Every thread that calls into the driver through kfuse calls make_current()
// first (Module, DeviceBuffer, launch... do it for you); it makes the primary context current on
// that thread, replacing whatever context was current there.
//
// The function pointers below are named after the API (cuMemAlloc, ...). Where <cuda.h> maps a
// name to a versioned symbol (cuMemAlloc -> cuMemAlloc_v2) the macro applies to the member too,
// and the loader looks up exactly that versioned symbol, so the pointer's type and the symbol's
// ABI always agree.
#pragma once

#include <cuda.h>

#include <atomic>
#include <mutex>
#include <string>

#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
// The member names would expand to the *_ptds/_ptsz symbols in this translation unit only.
#error "kfuse::rt::Driver needs the legacy default stream API names"
#endif

// X-macro of every driver entry point the runtime uses.
#define KFUSE_DRIVER_FUNCTIONS(X)                                                                  \
  X(cuGetErrorName)                                                                                \
  X(cuGetErrorString)                                                                              \
  X(cuInit)                                                                                        \
  X(cuDriverGetVersion)                                                                            \
  X(cuDeviceGet)                                                                                   \
  X(cuDeviceGetCount)                                                                              \
  X(cuDeviceGetName)                                                                               \
  X(cuDeviceGetAttribute)                                                                          \
  X(cuDevicePrimaryCtxRetain)                                                                      \
  X(cuCtxGetCurrent)                                                                               \
  X(cuCtxSetCurrent)                                                                               \
  X(cuCtxSynchronize)                                                                              \
  X(cuModuleLoadData)                                                                              \
  X(cuModuleUnload)                                                                                \
  X(cuModuleGetFunction)                                                                           \
  X(cuFuncGetAttribute)                                                                            \
  X(cuFuncSetAttribute)                                                                            \
  X(cuLaunchKernelEx)                                                                              \
  X(cuTensorMapEncodeTiled)                                                                        \
  X(cuMemAlloc)                                                                                    \
  X(cuMemFree)                                                                                     \
  X(cuMemcpyHtoD)                                                                                  \
  X(cuMemcpyDtoH)                                                                                  \
  X(cuMemcpyDtoD)                                                                                  \
  X(cuMemcpyHtoDAsync)                                                                             \
  X(cuMemcpyDtoHAsync)                                                                             \
  X(cuMemcpyDtoDAsync)                                                                             \
  X(cuMemsetD8)                                                                                    \
  X(cuMemsetD32)                                                                                   \
  X(cuMemsetD8Async)                                                                               \
  X(cuMemsetD32Async)                                                                              \
  X(cuStreamCreate)                                                                                \
  X(cuStreamDestroy)                                                                               \
  X(cuStreamSynchronize)                                                                           \
  X(cuEventCreate)                                                                                 \
  X(cuEventRecord)                                                                                 \
  X(cuEventSynchronize)                                                                            \
  X(cuEventElapsedTime)                                                                            \
  X(cuEventDestroy)

namespace kfuse::rt {

class Driver {
public:
  // The process-wide driver (libcuda.so.1). Loading never throws: a machine without a driver
  // or a GPU gives an unavailable Driver that says why.
  static Driver &get();

  // Loads a specific library (tests use this to exercise the failure paths). Never throws.
  explicit Driver(const std::string &library);
  ~Driver();
  Driver(const Driver &) = delete;
  Driver &operator=(const Driver &) = delete;

  // True when the library loaded, exports every entry point, cuInit succeeded and there is at
  // least one device. Otherwise why_unavailable() says which of these failed, e.g.
  // "libcuda.so.1 not found: <dlerror>", "cuInit failed: CUDA_ERROR_NO_DEVICE (...)".
  bool available() const { return available_; }
  std::string why_unavailable() const { return why_unavailable_; }

  // Throws kfuse::Error("CUDA driver unavailable: <why>") unless available().
  void require() const;

  // Retains device 0's primary context (once per process; it is never released, so it lives
  // as long as the process) and makes it current on the calling thread. Thread-safe. Throws
  // kfuse::Error when unavailable, CudaError when the driver fails.
  void make_current();

  // Device 0's properties. Throw kfuse::Error when unavailable.
  std::string device_name() const;
  int compute_capability() const; // major * 10 + minor, e.g. 90
  // The NVRTC target for device 0: "sm_XYa" where the device has arch-specific features the
  // templates use (9.0 -> wgmma/setmaxnreg, 10.0 and 10.3 -> tcgen05), otherwise "sm_XY".
  std::string arch() const;
  int driver_version() const; // e.g. 13000

  // Throws CudaError naming `call` unless r == CUDA_SUCCESS.
  void check(CUresult r, const char *call) const;
  void check(CUresult r, const std::string &call) const { check(r, call.c_str()); }

#define KFUSE_DRIVER_DECLARE(fn) decltype(&::fn) fn = nullptr;
  KFUSE_DRIVER_FUNCTIONS(KFUSE_DRIVER_DECLARE)
#undef KFUSE_DRIVER_DECLARE

private:
  void load(const std::string &library);

  void *library_ = nullptr;
  bool available_ = false;
  std::string why_unavailable_;
  CUdevice device_ = 0;
  int cc_major_ = 0;
  int cc_minor_ = 0;
  int driver_version_ = 0;
  std::string device_name_;

  std::mutex context_mutex_;                // serialises the one cuDevicePrimaryCtxRetain
  std::atomic<CUcontext> context_{nullptr}; // null until retained, then never changes
};

} // namespace kfuse::rt
