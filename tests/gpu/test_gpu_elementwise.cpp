// Elementwise kernels' two paths (templates/elementwise.cuh): VEC columns per thread as 16-byte
// accesses where rows hold whole vectors and every tensor is aligned to one, an element at a
// time otherwise. Both against the fp64 reference, and the element path taken through
// tensors one element off the alignment, bit for bit against the vector path.
#include "kfuse/kfuse.h"
#include "runtime/device_buffer.h"
#include "runtime/driver.h"
#include "runtime/stream.h"
#include "tests/support/gpu_cases.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

using namespace kfuse;
using testing::expect_match;
using testing::scale_bn;

namespace {

// One elementwise kernel: two bf16 matrices, a per-feature f32 vector, an f32 result (VEC 8:
// one 16-byte access per bf16 matrix, two per f32 row of 8).
const char *kMixed = R"(pipeline mixed {
  dim N
  dim F
  input  x: bf16[N, F]
  input  y: bf16[N, F]
  param  s: f32[F]
  return add(mul(gelu(x), s), y)
}
)";

constexpr int64_t kRows = 33, kFeatures = 48;

// Deterministic bf16 bits of values in [-2, 2).
std::vector<uint16_t> bf16_values(size_t n, unsigned seed) {
  std::vector<uint16_t> v(n);
  unsigned s = seed * 2654435761u + 1;
  for (uint16_t &x : v) {
    s = s * 1664525u + 1013904223u;
    const float f = static_cast<float>(s >> 8) / static_cast<float>(1u << 22) - 2.0f;
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    x = static_cast<uint16_t>(bits >> 16);
  }
  return v;
}

// `elements` elements of `bytes` each, `offset` elements past a cuMemAlloc'd (256-byte
// aligned) base.
struct OffsetBuffer {
  rt::DeviceBuffer memory;
  size_t bytes, offset;
  OffsetBuffer(size_t elements, size_t bytes_, size_t offset_)
      : memory((elements + offset_) * bytes_), bytes(bytes_), offset(offset_) {
    memory.fill_bytes(0xff); // NaN in every type: an element not written shows
  }
  void *data() const { return reinterpret_cast<void *>(memory.ptr() + offset * bytes); }
  template <class T> void upload(const std::vector<T> &host) {
    std::vector<T> all(offset + host.size());
    std::copy(host.begin(), host.end(), all.begin() + static_cast<ptrdiff_t>(offset));
    memory.upload(all.data(), all.size() * sizeof(T));
  }
  std::vector<float> download(size_t elements) const {
    std::vector<float> all(offset + elements);
    memory.download(all.data(), all.size() * sizeof(float));
    return {all.begin() + static_cast<ptrdiff_t>(offset), all.end()};
  }
};

// The mixed pipeline's output with x, y and the output `offset` elements off their buffers'
// alignment (0: the vector path).
std::vector<float> run_mixed(Pipeline &p, size_t x_offset, size_t y_offset, size_t out_offset) {
  const size_t n = static_cast<size_t>(kRows * kFeatures);
  const std::vector<int64_t> shape = {kRows, kFeatures};
  OffsetBuffer x(n, 2, x_offset), y(n, 2, y_offset), out(n, 4, out_offset);
  x.upload(bf16_values(n, 1));
  y.upload(bf16_values(n, 2));
  rt::Stream stream;
  p.run({{"x", {x.data(), shape, DType::BF16}}, {"y", {y.data(), shape, DType::BF16}}},
        {{out.data(), shape, DType::F32}}, stream.handle());
  stream.synchronize();
  return out.download(n);
}

} // namespace

TEST_CASE("gpu elementwise: the vector and element paths against the reference, f32 and bf16 "
          "rows that hold whole vectors and rows that do not") {
  uint64_t seed = 1300;
  for (int64_t features : {48, 37, 8, 1})
    for (int64_t n : {1, 33})
      expect_match(kMixed, "mixed.kf", Mode::Eval, {{"N", n}, {"F", features}}, ++seed);
  // Train-mode batchnorm's normalizing pass over 264 features (whole vectors of 8 bf16 or 4
  // f32) and over 300 (the element path).
  for (const char *dtype : {"bf16", "f32"})
    for (int out : {264, 300})
      expect_match(scale_bn(40, out, dtype), "scale_bn.kf", Mode::Train, 37, ++seed, 2);
}

TEST_CASE("gpu elementwise: tensors off the vector alignment take the element path and compute "
          "the vector path's bits") {
  rt::Driver::get().make_current();
  Pipeline p = Pipeline::from_string(kMixed, "mixed.kf", Options{});
  const size_t n = static_cast<size_t>(kFeatures);
  std::vector<float> scale(n);
  for (size_t i = 0; i < n; ++i)
    scale[i] = 0.25f + 0.01f * static_cast<float>(i);
  rt::DeviceBuffer s(n * sizeof(float));
  s.upload(scale.data(), n * sizeof(float));
  p.bind("s", {reinterpret_cast<void *>(s.ptr()), {kFeatures}});
  const std::vector<float> vector_path = run_mixed(p, 0, 0, 0);
  for (float v : vector_path)
    REQUIRE(v == v); // every element written
  for (auto [x, y, out] : {std::tuple{1, 0, 0}, std::tuple{0, 3, 0}, std::tuple{0, 0, 1}}) {
    INFO("offsets x ", x, " y ", y, " out ", out);
    const std::vector<float> element_path = run_mixed(p, x, y, out);
    CHECK(std::memcmp(element_path.data(), vector_path.data(), n * kRows * sizeof(float)) == 0);
  }
}
