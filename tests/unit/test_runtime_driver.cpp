// The driver layer on machines with and without libcuda: an unusable driver is reported with a
// reason and every entry point throws kfuse::Error instead of crashing. Where a GPU is present,
// a small kernel round-trips through Module, launch and DeviceBuffer.
#include "runtime/device_buffer.h"
#include "runtime/driver.h"
#include "runtime/error.h"
#include "runtime/module.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/stream.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

using namespace kfuse::rt;

namespace {

bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

void check_unusable(Driver &driver) {
  CHECK_FALSE(driver.available());
  CHECK_FALSE(driver.why_unavailable().empty());
  CHECK_THROWS_AS(driver.require(), kfuse::Error);
  CHECK_THROWS_AS(driver.make_current(), kfuse::Error);
  CHECK_THROWS_AS(driver.arch(), kfuse::Error);
  CHECK_THROWS_AS(driver.device_name(), kfuse::Error);
  try {
    driver.require();
  } catch (const kfuse::Error &e) {
    CHECK(contains(e.what(), driver.why_unavailable()));
  }
}

} // namespace

TEST_CASE("runtime: a missing driver library is reported, not fatal") {
  Driver driver("libkfuse-no-such-driver.so.1");
  check_unusable(driver);
  CHECK(contains(driver.why_unavailable(), "libkfuse-no-such-driver.so.1 not found"));

  // check() still produces a CudaError naming the call without a library to describe the code.
  CHECK_NOTHROW(driver.check(CUDA_SUCCESS, "cuCtxSynchronize"));
  try {
    driver.check(CUDA_ERROR_NO_DEVICE, "cuDeviceGet");
    FAIL("expected CudaError");
  } catch (const CudaError &e) {
    CHECK(e.call() == "cuDeviceGet");
    CHECK(e.code() == CUDA_ERROR_NO_DEVICE);
    CHECK(e.error_name() == "CUDA_ERROR_NO_DEVICE");
    CHECK(contains(e.what(), "CUDA driver call cuDeviceGet failed: CUDA_ERROR_NO_DEVICE"));
  }
}

TEST_CASE("runtime: the CUDA stub library is loaded but reported unusable") {
  // The toolkit's link stub exports the API but fails cuInit; it must never count as a driver.
  // CMake finds it in the toolkit the build uses (KFUSE_CUDA_STUB).
  const std::string stub = KFUSE_CUDA_STUB;
  REQUIRE_MESSAGE(std::filesystem::exists(stub),
                  "the CUDA toolkit's stubs/libcuda.so was not found at configure time ('", stub,
                  "')");
  Driver driver(stub);
  check_unusable(driver);
  CHECK(contains(driver.why_unavailable(), "cuInit failed: CUDA_ERROR_STUB_LIBRARY"));
  MESSAGE(driver.why_unavailable());
}

TEST_CASE("runtime: the process driver is usable or says why") {
  Driver &driver = Driver::get();
  CHECK(&driver == &Driver::get());
  if (!driver.available()) {
    MESSAGE("no usable CUDA driver here: " << driver.why_unavailable());
    check_unusable(driver);
    CHECK_THROWS_AS(DeviceBuffer(16), kfuse::Error);
    CHECK_THROWS_AS(Module(std::string("not a cubin")), kfuse::Error);
    CHECK_THROWS_AS(Stream(), kfuse::Error);
    CHECK_THROWS_AS(Event(), kfuse::Error);
    DeviceBuffer empty; // an empty buffer needs no driver
    CHECK(empty.ptr() == 0);
    return;
  }

  MESSAGE(driver.device_name() << ", " << driver.arch() << ", driver " << driver.driver_version());
  CHECK(driver.arch().rfind("sm_", 0) == 0);
  driver.make_current();

  // A round trip: y = x * 2 + (bytes of dynamic shared memory used, as a check that a launch
  // above 48 KiB raised the kernel's limit).
  CompileRequest req;
  req.file_name = "driver_smoke.cu";
  req.arch = driver.arch();
  req.source = R"(extern "C" __global__ void twice(const float *x, float *y, int n) {
  extern __shared__ float scratch[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  scratch[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (i < n)
    y[i] = 2.0f * scratch[threadIdx.x];
}
)";
  CompiledModule compiled = compile(req, nullptr);
  Module module(compiled.cubin);
  Function fn = module.function("twice");
  CHECK(fn.registers() > 0);
  CHECK_THROWS_AS(module.function("no_such_kernel"), kfuse::Error);

  const int n = 1000;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i)
    x[i] = static_cast<float>(i);
  DeviceBuffer dx(n * sizeof(float));
  DeviceBuffer dy(n * sizeof(float));
  dx.upload(x.data(), n * sizeof(float));
  dy.fill_bytes(0);
  CUdeviceptr px = dx.ptr();
  CUdeviceptr py = dy.ptr();
  int count = n;
  void *args[] = {&px, &py, &count};
  Stream stream;
  Event start;
  Event stop;
  start.record(stream.handle());
  launch(fn, Dim3{(n + 255) / 256, 1, 1}, Dim3{256, 1, 1}, 64 * 1024, stream.handle(), args);
  stop.record(stream.handle());
  stream.synchronize();
  MESSAGE("kernel took " << elapsed_ms(start, stop) << " ms");
  std::vector<float> y(n);
  dy.download(y.data(), n * sizeof(float));
  for (int i = 0; i < n; ++i)
    REQUIRE(y[i] == 2.0f * x[i]);
  CHECK_THROWS_AS(dy.download(y.data(), (n + 1) * sizeof(float)), kfuse::Error);
}
