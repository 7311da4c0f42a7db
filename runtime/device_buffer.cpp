#include "runtime/device_buffer.h"

#include "runtime/driver.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <utility>

namespace kfuse::rt {

DeviceBuffer::DeviceBuffer(std::size_t bytes) {
  Driver &driver = Driver::get();
  driver.make_current();
  if (bytes == 0)
    return;
  driver.check(driver.cuMemAlloc(&ptr_, bytes), fmt::format("cuMemAlloc({} bytes)", bytes));
  size_ = bytes;
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), size_(std::exchange(other.size_, 0)) {}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    release();
    ptr_ = std::exchange(other.ptr_, 0);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (ptr_ == 0)
    return;
  // Errors are ignored: at process exit the context may already be gone.
  Driver &driver = Driver::get();
  try {
    driver.make_current();
    driver.cuMemFree(ptr_);
  } catch (const Error &) {
  }
  ptr_ = 0;
  size_ = 0;
}

namespace {
void check_size(std::size_t bytes, std::size_t size, const char *what) {
  if (bytes > size)
    throw Error(fmt::format("{} of {} bytes into a device buffer of {} bytes", what, bytes, size));
}
} // namespace

void DeviceBuffer::upload(const void *source, std::size_t bytes) {
  check_size(bytes, size_, "upload");
  if (bytes == 0)
    return;
  Driver &driver = Driver::get();
  driver.make_current();
  driver.check(driver.cuMemcpyHtoD(ptr_, source, bytes),
               fmt::format("cuMemcpyHtoD({} bytes)", bytes));
}

void DeviceBuffer::download(void *destination, std::size_t bytes) const {
  check_size(bytes, size_, "download");
  if (bytes == 0)
    return;
  Driver &driver = Driver::get();
  driver.make_current();
  driver.check(driver.cuMemcpyDtoH(destination, ptr_, bytes),
               fmt::format("cuMemcpyDtoH({} bytes)", bytes));
}

void DeviceBuffer::fill_bytes(std::uint8_t value) {
  if (size_ == 0)
    return;
  Driver &driver = Driver::get();
  driver.make_current();
  driver.check(driver.cuMemsetD8(ptr_, value, size_), fmt::format("cuMemsetD8({} bytes)", size_));
}

} // namespace kfuse::rt
