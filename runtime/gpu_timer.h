// Timing GPU work the same way everywhere (`kfuse bench`'s contenders, `kfuse tune`'s
// candidates): CUDA events around each run, after warm-up, the L2 cache flushed before each
// timed run (outside the events), the contenders' runs interleaved, and the median reported.
#pragma once

#include "runtime/device_buffer.h"

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace kfuse::rt {

// A device buffer of at least twice the current device's L2 cache. Writing all of it evicts
// whatever the previous run left in L2, so a timed run starts with its inputs in device memory, as
// it would inside a model where other layers run in between.
class L2Flush {
public:
  // Throws kfuse::Error when the driver is unavailable.
  L2Flush();
  // Enqueues one cuMemsetD32Async over the whole buffer on `stream`.
  void flush(CUstream stream);
  std::size_t l2_bytes() const { return l2_bytes_; }
  std::size_t bytes() const { return buffer_.size(); }

private:
  std::size_t l2_bytes_ = 0;
  DeviceBuffer buffer_;
  uint32_t value_ = 0; // changes every flush, so no layer can elide a repeated fill
};

struct TimingStats {
  std::vector<double> ms; // every timed run, in run order
  double median = 0, min = 0, max = 0, p10 = 0, p90 = 0;
};

// Summary of `ms` (not empty). The median of an even count is the mean of the middle two.
TimingStats summarize(std::vector<double> ms);

// Times works against each other: `warmup` rounds, then `iters` timed rounds, each round running
// every work once in the order given, each timed run between a pair of events with `flush`
// enqueued before its first event; one TimingStats per work. Interleaved, the works run at the
// same clocks: under sustained load a GPU at its power limit lowers its clocks within a second,
// so works timed one after another would be measured at different clocks. All runs are enqueued
// before the host waits, so host-side launch cost shows only where the GPU would starve. Throws
// kfuse::Error for iters < 1 or no works, and whatever a work throws.
std::vector<TimingStats> time_interleaved(CUstream stream,
                                          const std::vector<std::function<void(CUstream)>> &works,
                                          int warmup, int iters, L2Flush &flush);

} // namespace kfuse::rt
