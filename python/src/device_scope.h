// The CUDA device a Python call runs on: its tensors' device, made current for the call.
#pragma once

#include <cuda.h>

namespace kfuse::python {

// Makes `device`'s primary context (PyTorch's and the CUDA runtime's context there) current on
// the calling thread unless a context of that device already is, and restores the previous
// context on destruction. Primary contexts are retained once per device and kept for the
// process, as the CUDA runtime does. Throws kfuse::Error when the driver is unavailable.
class DeviceScope {
public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope &) = delete;
  DeviceScope &operator=(const DeviceScope &) = delete;

private:
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

} // namespace kfuse::python
