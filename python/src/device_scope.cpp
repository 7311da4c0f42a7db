#include "python/src/device_scope.h"

#include "runtime/driver.h"

#include <fmt/format.h>

#include <map>
#include <mutex>

namespace kfuse::python {
namespace {

CUcontext primary_context(int device) {
  static std::mutex mutex;
  static std::map<int, CUcontext> retained;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = retained.find(device);
  if (it != retained.end())
    return it->second;
  rt::Driver &d = rt::Driver::get();
  CUdevice dev = 0;
  d.check(d.cuDeviceGet(&dev, device), fmt::format("cuDeviceGet({})", device));
  CUcontext context = nullptr;
  d.check(d.cuDevicePrimaryCtxRetain(&context, dev), "cuDevicePrimaryCtxRetain");
  return retained[device] = context;
}

} // namespace

DeviceScope::DeviceScope(int device) {
  rt::Driver &d = rt::Driver::get();
  d.require();
  d.check(d.cuCtxGetCurrent(&previous_), "cuCtxGetCurrent");
  if (previous_ != nullptr && d.current_device() == device)
    return;
  d.check(d.cuCtxSetCurrent(primary_context(device)), "cuCtxSetCurrent");
  switched_ = true;
}

DeviceScope::~DeviceScope() {
  if (switched_)
    rt::Driver::get().cuCtxSetCurrent(previous_);
}

} // namespace kfuse::python
