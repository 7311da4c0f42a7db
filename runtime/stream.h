// Streams and events: the ordering and timing primitives a pipeline runs with.
#pragma once

#include <cuda.h>

namespace kfuse::rt {

// An owned CUstream, created with CU_STREAM_DEFAULT: like cudaStreamCreate, its work orders
// with the legacy default stream. Move-only.
class Stream {
public:
  // Throws kfuse::Error when the driver is unavailable, CudaError on failure.
  Stream();
  ~Stream();
  Stream(Stream &&other) noexcept;
  Stream &operator=(Stream &&other) noexcept;
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;

  CUstream handle() const { return stream_; }
  void synchronize() const;

private:
  CUstream stream_ = nullptr;
};

// An owned CUevent with timing enabled. Move-only.
class Event {
public:
  Event();
  ~Event();
  Event(Event &&other) noexcept;
  Event &operator=(Event &&other) noexcept;
  Event(const Event &) = delete;
  Event &operator=(const Event &) = delete;

  CUevent handle() const { return event_; }
  void record(CUstream stream = nullptr);
  void synchronize() const;

private:
  CUevent event_ = nullptr;
};

// Milliseconds between two recorded events; waits for `end` first.
float elapsed_ms(const Event &start, const Event &end);

} // namespace kfuse::rt
