// The interleaved timer (runtime/gpu_timer.h) that `kfuse bench` and `kfuse tune` time their
// contenders with: every work runs once per round in the order given, warm-up rounds first, and
// each work's timed runs come back in its own TimingStats.
#include "runtime/error.h"
#include "runtime/gpu_timer.h"
#include "runtime/stream.h"

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

using namespace kfuse;

TEST_CASE("timer: the works' runs interleave, round by round, and each gets its own timings") {
  rt::Stream stream;
  rt::L2Flush flush;
  std::string order;
  const std::vector<std::function<void(CUstream)>> works{[&](CUstream) { order += 'a'; },
                                                         [&](CUstream) { order += 'b'; },
                                                         [&](CUstream) { order += 'c'; }};
  const std::vector<rt::TimingStats> stats =
      rt::time_interleaved(stream.handle(), works, 2, 5, flush);
  CHECK(order == "abcabc" + std::string("abcabcabcabcabc"));
  REQUIRE(stats.size() == 3);
  for (const rt::TimingStats &s : stats) {
    CHECK(s.ms.size() == 5);
    CHECK(s.min >= 0);
    CHECK(s.min <= s.median);
    CHECK(s.median <= s.max);
  }
}

TEST_CASE("timer: no timed round, or no work, is an error; a work's error reaches the caller") {
  rt::Stream stream;
  rt::L2Flush flush;
  const std::vector<std::function<void(CUstream)>> one{[](CUstream) {}};
  CHECK_THROWS_WITH_AS(rt::time_interleaved(stream.handle(), one, 1, 0, flush),
                       "time_interleaved: iters must be at least 1, got 0", Error);
  CHECK_THROWS_WITH_AS(rt::time_interleaved(stream.handle(), {}, 1, 3, flush),
                       "time_interleaved: no work to time", Error);
  const std::vector<std::function<void(CUstream)>> failing{
      [](CUstream) {}, [](CUstream) { throw Error("the second work failed"); }};
  CHECK_THROWS_WITH_AS(rt::time_interleaved(stream.handle(), failing, 0, 3, flush),
                       "the second work failed", Error);
}
