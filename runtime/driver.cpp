#include "runtime/driver.h"

#include "runtime/error.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstring>
#include <type_traits>

namespace kfuse::rt {
namespace {

// Names for the results a driver that cannot describe itself (the toolkit's link stub, a
// half-installed driver) returns from cuInit; cuGetErrorName fails there too.
const char *fallback_error_name(CUresult r) {
  switch (r) {
  case CUDA_ERROR_STUB_LIBRARY:
    return "CUDA_ERROR_STUB_LIBRARY (the toolkit's link stub was loaded, not a driver)";
  case CUDA_ERROR_NO_DEVICE:
    return "CUDA_ERROR_NO_DEVICE";
  case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
  case CUDA_ERROR_DEVICE_UNAVAILABLE:
    return "CUDA_ERROR_DEVICE_UNAVAILABLE";
  default:
    return "unknown error";
  }
}

} // namespace

#define KFUSE_STRINGIFY_EXPANDED(x) #x
#define KFUSE_STRINGIFY(x) KFUSE_STRINGIFY_EXPANDED(x)

Driver &Driver::get() {
  // Deliberately never destroyed: modules and buffers owned by other static objects may be
  // released during exit, after a destroyed Driver would have closed the library.
  static Driver *driver = new Driver("libcuda.so.1");
  return *driver;
}

Driver::Driver(const std::string &library) { load(library); }

Driver::~Driver() {
  if (library_ != nullptr)
    dlclose(library_);
}

void Driver::load(const std::string &library) {
  dlerror();
  library_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library_ == nullptr) {
    const char *why = dlerror();
    why_unavailable_ = fmt::format("{} not found: {}", library, why ? why : "dlopen failed");
    return;
  }

  std::string missing;
  auto resolve = [&](auto &pointer, const char *symbol) {
    void *address = dlsym(library_, symbol);
    // cuEventElapsedTime_v2 (same signature, stricter validation) appeared in 12.8; older
    // drivers only export the original symbol.
    if (address == nullptr && std::strcmp(symbol, "cuEventElapsedTime_v2") == 0)
      address = dlsym(library_, "cuEventElapsedTime");
    if (address == nullptr)
      missing += missing.empty() ? symbol : fmt::format(", {}", symbol);
    pointer = reinterpret_cast<std::remove_reference_t<decltype(pointer)>>(address);
  };
#define KFUSE_DRIVER_RESOLVE(fn) resolve(fn, KFUSE_STRINGIFY(fn));
  KFUSE_DRIVER_FUNCTIONS(KFUSE_DRIVER_RESOLVE)
#undef KFUSE_DRIVER_RESOLVE
  if (!missing.empty()) {
    why_unavailable_ =
        fmt::format("{} lacks {} (driver too old for this kfuse build?)", library, missing);
    return;
  }

  auto failure = [&](CUresult r, const char *call) {
    const char *name = nullptr;
    const char *text = nullptr;
    if (cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr)
      name = fallback_error_name(r);
    if (cuGetErrorString(r, &text) != CUDA_SUCCESS || text == nullptr)
      text = "no description";
    return fmt::format("{} failed: {} ({}, code {})", call, name, text, static_cast<int>(r));
  };
  if (CUresult r = cuInit(0); r != CUDA_SUCCESS) {
    why_unavailable_ = failure(r, "cuInit");
    return;
  }
  int count = 0;
  if (CUresult r = cuDeviceGetCount(&count); r != CUDA_SUCCESS) {
    why_unavailable_ = failure(r, "cuDeviceGetCount");
    return;
  }
  if (count == 0) {
    why_unavailable_ = "no CUDA device";
    return;
  }
  CUresult r = cuDeviceGet(&device_, 0);
  if (r == CUDA_SUCCESS)
    r = cuDriverGetVersion(&driver_version_);
  if (r != CUDA_SUCCESS) {
    why_unavailable_ = failure(r, "querying device 0");
    return;
  }
  available_ = true;
}

void Driver::require() const {
  if (!available_)
    throw Error("CUDA driver unavailable: " + why_unavailable_);
}

CUcontext Driver::make_current() {
  require();
  CUcontext current = nullptr;
  check(cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current != nullptr)
    return current;
  CUcontext context = context_.load(std::memory_order_acquire);
  if (context == nullptr) {
    std::lock_guard<std::mutex> lock(context_mutex_);
    context = context_.load(std::memory_order_relaxed);
    if (context == nullptr) {
      check(cuDevicePrimaryCtxRetain(&context, device_), "cuDevicePrimaryCtxRetain");
      context_.store(context, std::memory_order_release);
    }
  }
  check(cuCtxSetCurrent(context), "cuCtxSetCurrent");
  return context;
}

CUdevice Driver::current_device() const {
  require();
  CUcontext current = nullptr;
  check(cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current == nullptr)
    return device_;
  CUdevice device = 0;
  check(cuCtxGetDevice(&device), "cuCtxGetDevice");
  return device;
}

std::string Driver::device_name() const {
  char name[256] = {};
  check(cuDeviceGetName(name, sizeof(name) - 1, current_device()), "cuDeviceGetName");
  return name;
}

int Driver::compute_capability() const {
  CUdevice device = current_device();
  int major = 0, minor = 0;
  check(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  check(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  return major * 10 + minor;
}

std::string Driver::arch() const {
  int cc = compute_capability();
  bool arch_specific = cc == 90 || cc == 100 || cc == 103;
  return fmt::format("sm_{}{}", cc, arch_specific ? "a" : "");
}

int Driver::driver_version() const {
  require();
  return driver_version_;
}

void Driver::check(CUresult r, const char *call) const {
  if (r == CUDA_SUCCESS)
    return;
  const char *name = nullptr;
  const char *text = nullptr;
  if (cuGetErrorName == nullptr || cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr)
    name = fallback_error_name(r);
  if (cuGetErrorString == nullptr || cuGetErrorString(r, &text) != CUDA_SUCCESS || text == nullptr)
    text = "no description";
  throw CudaError(call, static_cast<int>(r), name,
                  fmt::format("{}, code {}", text, static_cast<int>(r)));
}

} // namespace kfuse::rt
