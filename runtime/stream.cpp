#include "runtime/stream.h"

#include "runtime/driver.h"
#include "runtime/error.h"

#include <utility>

namespace kfuse::rt {

Stream::Stream() {
  Driver &driver = Driver::get();
  driver.make_current();
  driver.check(driver.cuStreamCreate(&stream_, CU_STREAM_DEFAULT), "cuStreamCreate");
}

Stream::~Stream() {
  if (stream_ == nullptr)
    return;
  // Errors are ignored: at process exit the context may already be gone.
  Driver &driver = Driver::get();
  try {
    driver.make_current();
    driver.cuStreamDestroy(stream_);
  } catch (const Error &) {
  }
}

Stream::Stream(Stream &&other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream &Stream::operator=(Stream &&other) noexcept {
  if (this != &other) {
    Stream doomed(std::move(*this));
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const {
  Driver &driver = Driver::get();
  driver.make_current();
  driver.check(driver.cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

Event::Event() {
  Driver &driver = Driver::get();
  driver.make_current();
  driver.check(driver.cuEventCreate(&event_, CU_EVENT_DEFAULT), "cuEventCreate");
}

Event::~Event() {
  if (event_ == nullptr)
    return;
  Driver &driver = Driver::get();
  try {
    driver.make_current();
    driver.cuEventDestroy(event_);
  } catch (const Error &) {
  }
}

Event::Event(Event &&other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event &Event::operator=(Event &&other) noexcept {
  if (this != &other) {
    Event doomed(std::move(*this));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record(CUstream stream) {
  Driver &driver = Driver::get();
  driver.make_current();
  driver.check(driver.cuEventRecord(event_, stream), "cuEventRecord");
}

void Event::synchronize() const {
  Driver &driver = Driver::get();
  driver.make_current();
  driver.check(driver.cuEventSynchronize(event_), "cuEventSynchronize");
}

float elapsed_ms(const Event &start, const Event &end) {
  end.synchronize();
  Driver &driver = Driver::get();
  float ms = 0;
  driver.check(driver.cuEventElapsedTime(&ms, start.handle(), end.handle()), "cuEventElapsedTime");
  return ms;
}

} // namespace kfuse::rt
