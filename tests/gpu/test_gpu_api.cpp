// The C++ API's checks that need a GPU: host memory is refused wherever a tensor goes
// (input, output, a bound param), device memory of the current context runs; the compile
// report lists every kernel on a machine with a driver (and NVRTC's own cache) too.
#include "kfuse/kfuse.h"
#include "runtime/device_buffer.h"
#include "runtime/driver.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

using namespace kfuse;

namespace {

const char *kTiny = R"(pipeline tiny {
  dim N
  input  x: f32[N, 4]
  param  weight: f32[3, 4]
  return linear(x, weight)
}
)";

Tensor on(const rt::DeviceBuffer &b, std::vector<int64_t> shape) {
  return {reinterpret_cast<void *>(b.ptr()), std::move(shape)};
}

} // namespace

TEST_CASE("gpu api: host memory is refused as input, output and param, device memory runs") {
  rt::Driver::get().make_current();
  Pipeline p = Pipeline::from_string(kTiny, "tiny.kf", {});
  rt::DeviceBuffer weight(12 * sizeof(float)), x(8 * sizeof(float)), out(6 * sizeof(float));
  weight.fill_bytes(0);
  x.fill_bytes(0);
  std::vector<float> host(64);

  p.bind("weight", {host.data(), {3, 4}}); // where it lives is checked at the next run
  CHECK_THROWS_WITH_AS(p.run({{"x", on(x, {2, 4})}}, {on(out, {2, 3})}),
                       doctest::Contains("tensor 'weight' f32[3, 4] at"), Error);
  CHECK_THROWS_WITH_AS(p.run({{"x", on(x, {2, 4})}}, {on(out, {2, 3})}),
                       doctest::Contains("host memory"), Error);
  p.bind("weight", on(weight, {3, 4}));
  CHECK_THROWS_WITH_AS(p.run({{"x", {host.data(), {2, 4}}}}, {on(out, {2, 3})}),
                       doctest::Contains("tensor 'x' f32[2, 4] at"), Error);
  CHECK_THROWS_WITH_AS(p.run({{"x", on(x, {2, 4})}}, {{host.data() + 16, {2, 3}}}),
                       doctest::Contains("tensor 'output 0' f32[2, 3] at"), Error);
  p.run({{"x", on(x, {2, 4})}}, {on(out, {2, 3})});
  std::vector<float> result(6, 1.0f);
  out.download(result.data(), result.size() * sizeof(float));
  CHECK(result == std::vector<float>(6, 0.0f));
}

TEST_CASE("gpu api: a pipeline compiled again with its disk cache empty reports every kernel") {
  // Where a driver is installed NVRTC may cache compiled programs itself; the resource report
  // must not depend on which compile came first.
  const char *saved = std::getenv("KFUSE_CACHE_DIR");
  const std::string kept = saved ? saved : "";
  for (int round = 0; round < 2; ++round) {
    char dir[] = "/tmp/kfuse-gpu-report-XXXXXX";
    REQUIRE(mkdtemp(dir) != nullptr);
    setenv("KFUSE_CACHE_DIR", dir, 1);
    Pipeline p = Pipeline::from_string(kTiny, "tiny.kf", {});
    CHECK_FALSE(p.report().cache_hit);
    REQUIRE(p.report().kernels.size() == 2); // the SIMT GEMM and its 128 x 128 variant
    CHECK(p.report().kernels[0].registers > 0);
    CHECK(p.report().kernels[1].registers > 0);
    CHECK(p.report().kernels[1].variant);
    std::filesystem::remove_all(dir);
  }
  if (saved)
    setenv("KFUSE_CACHE_DIR", kept.c_str(), 1);
  else
    unsetenv("KFUSE_CACHE_DIR");
}
