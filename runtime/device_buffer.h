// Device memory, owned.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace kfuse::rt {

// A cuMemAlloc'ed range in the current context (rt::Driver::make_current), freed on destruction.
// Move-only. Copies are synchronous with respect to the host (legacy default stream semantics).
class DeviceBuffer {
public:
  DeviceBuffer() = default; // empty: ptr() == 0, size() == 0
  // Throws kfuse::Error when the driver is unavailable, CudaError when allocation fails.
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  std::size_t size() const { return size_; }

  // Copy `bytes` (at most size(), else kfuse::Error) to / from the start of the buffer.
  void upload(const void *source, std::size_t bytes);
  void download(void *destination, std::size_t bytes) const;
  // Every byte of the buffer set to `value`.
  void fill_bytes(std::uint8_t value);

private:
  void release() noexcept;

  CUdeviceptr ptr_ = 0;
  std::size_t size_ = 0;
};

} // namespace kfuse::rt
