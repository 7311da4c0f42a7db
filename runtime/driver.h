// The CUDA driver API, loaded at run time.
//
// libcuda.so.1 is opened with dlopen, never linked, so every part of kfuse that does not touch a
// GPU (parsing, planning, emitting, NVRTC compiling) runs on machines with no driver. <cuda.h>
// is used for types, enums and function signatures only.
//
// Driver::get() is the process-wide instance, loaded on first use. It works in the CUDA context
// current on the calling thread (the CUDA runtime's, cuBLAS's and PyTorch's for the device they
// selected), so memory and streams are shared with them; where no context is current it makes
// device 0's primary context current, the one the CUDA runtime would use. Every thread that
// calls into the driver through kfuse calls make_current() first (Module, DeviceBuffer,
// launch... do it for you).
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
  X(cuCtxGetDevice)                                                                                \
  X(cuPointerGetAttributes)                                                                        \
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
  X(cuEventDestroy)                                                                                \
  X(cuStreamBeginCapture)                                                                          \
  X(cuStreamEndCapture)                                                                            \
  X(cuStreamIsCapturing)                                                                           \
  X(cuGraphInstantiate)                                                                            \
  X(cuGraphLaunch)                                                                                 \
  X(cuGraphExecDestroy)                                                                            \
  X(cuGraphDestroy)

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

  // Returns the context current on the calling thread; where there is none, retains device
  // 0's primary context (once per process; never released, so it lives as long as the
  // process), makes it current and returns it. Thread-safe. Throws kfuse::Error when
  // unavailable, CudaError when the driver fails.
  CUcontext make_current();

  // The device of the context current on the calling thread, or device 0 where none is
  // current (without creating a context). Throws kfuse::Error when unavailable.
  CUdevice current_device() const;

  // Properties of current_device(). Throw kfuse::Error when unavailable.
  std::string device_name() const;
  int compute_capability() const; // major * 10 + minor, e.g. 90
  // The NVRTC target for the current device: "sm_XYa" where the device has arch-specific
  // features the templates use (9.0 -> wgmma/setmaxnreg, 10.0 and 10.3 -> tcgen05), else "sm_XY".
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
  CUdevice device_ = 0; // device 0, whose primary context is used where none is current
  int driver_version_ = 0;

  std::mutex context_mutex_;                // serialises the one cuDevicePrimaryCtxRetain
  std::atomic<CUcontext> context_{nullptr}; // device 0's primary; null until retained
};

} // namespace kfuse::rt
