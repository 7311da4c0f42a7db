#include "runtime/gpu_timer.h"

#include "runtime/driver.h"
#include "runtime/error.h"
#include "runtime/stream.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace kfuse::rt {

namespace {

std::size_t device_l2_bytes() {
  Driver &driver = Driver::get();
  driver.make_current();
  CUdevice device = driver.current_device();
  int l2 = 0;
  driver.check(driver.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device),
               "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)");
  return static_cast<std::size_t>(l2);
}

// Nearest-rank percentile of sorted values.
double percentile(const std::vector<double> &sorted, double p) {
  std::size_t i = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

} // namespace

L2Flush::L2Flush() : l2_bytes_(device_l2_bytes()) {
  // A device reporting no L2 still gets a buffer, so the flush costs the same everywhere.
  constexpr std::size_t kAtLeast = std::size_t{64} << 20;
  std::size_t bytes = std::max(2 * l2_bytes_, kAtLeast);
  buffer_ = DeviceBuffer((bytes + 3) / 4 * 4);
}

void L2Flush::flush(CUstream stream) {
  Driver &driver = Driver::get();
  driver.make_current();
  ++value_;
  driver.check(driver.cuMemsetD32Async(buffer_.ptr(), value_, buffer_.size() / 4, stream),
               "cuMemsetD32Async(L2 flush)");
}

TimingStats summarize(std::vector<double> ms) {
  if (ms.empty())
    throw Error("summarize: no timings");
  TimingStats s;
  s.ms = ms;
  std::sort(ms.begin(), ms.end());
  std::size_t n = ms.size();
  s.median = n % 2 == 1 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  s.min = ms.front();
  s.max = ms.back();
  s.p10 = percentile(ms, 0.10);
  s.p90 = percentile(ms, 0.90);
  return s;
}

std::vector<TimingStats> time_interleaved(CUstream stream,
                                          const std::vector<std::function<void(CUstream)>> &works,
                                          int warmup, int iters, L2Flush &flush) {
  if (iters < 1)
    throw Error(fmt::format("time_interleaved: iters must be at least 1, got {}", iters));
  if (works.empty())
    throw Error("time_interleaved: no work to time");
  for (int i = 0; i < warmup; ++i)
    for (const auto &work : works) {
      flush.flush(stream);
      work(stream);
    }
  // Events are created before the first timed run so their creation is not timed either.
  const std::size_t runs = static_cast<std::size_t>(iters) * works.size();
  std::vector<Event> starts(runs), ends(runs);
  for (std::size_t r = 0; r < runs; ++r) {
    flush.flush(stream);
    starts[r].record(stream);
    works[r % works.size()](stream);
    ends[r].record(stream);
  }
  std::vector<TimingStats> stats;
  for (std::size_t w = 0; w < works.size(); ++w) {
    std::vector<double> ms;
    ms.reserve(static_cast<std::size_t>(iters));
    for (std::size_t r = w; r < runs; r += works.size())
      ms.push_back(static_cast<double>(elapsed_ms(starts[r], ends[r])));
    stats.push_back(summarize(std::move(ms)));
  }
  return stats;
}

} // namespace kfuse::rt
