// Precision tf32 rounds both GEMM operands to nearest, as cuBLAS does, on every tile of the
// Hopper mainloop: the weight once per bind (passes::round_tf32), A in the consumers' registers
// (templates/gemm_sm90.cuh). A linear's output is checked against an fp64 product of the operands
// rounded to tf32 (ties away from zero) within fp32 accumulation's error, and must lie far
// nearer to it than to the product of the truncated operands the tensor cores alone would read.
// The caller's weight keeps its bits.
#include "kfuse/kfuse.h"
#include "runtime/device_buffer.h"
#include "runtime/stream.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

using namespace kfuse;

namespace {

float with_bits(uint32_t bits) {
  float f = 0;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
uint32_t bits_of(float f) {
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}
float rounded(float x) { return with_bits((bits_of(x) + 0x1000u) & 0xffffe000u); }
float truncated(float x) { return with_bits(bits_of(x) & 0xffffe000u); }

// ||out - a bᵀ|| / ||a bᵀ|| over the whole output, the product in fp64 of the operands as
// `operand` makes them.
double relative_error(const std::vector<float> &out, const std::vector<float> &a,
                      const std::vector<float> &b, int64_t m, int64_t n, int64_t k,
                      float (*operand)(float)) {
  double err = 0, norm = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0;
      for (int64_t l = 0; l < k; ++l)
        ref += static_cast<double>(operand(a[static_cast<size_t>(i * k + l)])) *
               operand(b[static_cast<size_t>(j * k + l)]);
      const double d = out[static_cast<size_t>(i * n + j)] - ref;
      err += d * d;
      norm += ref * ref;
    }
  return std::sqrt(err / norm);
}

std::vector<float> uniform(size_t count, uint32_t seed) {
  std::vector<float> v(count);
  uint32_t s = seed * 2654435761u + 1;
  for (float &x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 23) - 1.0f; // [-1, 1)
  }
  return v;
}

} // namespace

TEST_CASE("gpu: tf32 rounds both GEMM operands to nearest on every Hopper tile") {
  rt::Stream stream;
  uint32_t seed = 900;
  // 128 x 256 and 128 x 128 tiles, the 64-row ones, tails in M, N and K (K = 36: a k-block of
  // 32 and one of 4), split-K (a few tiles over a long K).
  struct Shape {
    int64_t m, n, k;
  };
  for (Shape s : {Shape{512, 1024, 256}, Shape{1000, 384, 200}, Shape{48, 136, 64},
                  Shape{130, 200, 36}, Shape{64, 128, 4096}}) {
    INFO("m=", s.m, " n=", s.n, " k=", s.k);
    const std::string text = "pipeline linear {\n  dim N\n  input x: f32[N, " +
                             std::to_string(s.k) + "]\n  param w: f32[" + std::to_string(s.n) +
                             ", " + std::to_string(s.k) + "]\n  return linear(x, w)\n}\n";
    Options o;
    o.mode = Mode::Eval;
    o.precision = Precision::TF32;
    Pipeline p = Pipeline::from_string(text, "linear.kf", o);
    const std::vector<float> a = uniform(static_cast<size_t>(s.m * s.k), ++seed);
    const std::vector<float> b = uniform(static_cast<size_t>(s.n * s.k), ++seed);
    rt::DeviceBuffer x(a.size() * 4), w(b.size() * 4), out(static_cast<size_t>(s.m * s.n) * 4);
    x.upload(a.data(), a.size() * 4);
    w.upload(b.data(), b.size() * 4);
    out.fill_bytes(0xff);
    p.bind("w", {reinterpret_cast<void *>(w.ptr()), {s.n, s.k}});
    const Tensor in{reinterpret_cast<void *>(x.ptr()), {s.m, s.k}};
    const Tensor result{reinterpret_cast<void *>(out.ptr()), {s.m, s.n}};
    p.run(&in, 1, &result, 1, stream.handle());
    stream.synchronize();
    std::vector<float> host(static_cast<size_t>(s.m * s.n));
    out.download(host.data(), host.size() * 4);
    const double to_rounded = relative_error(host, a, b, s.m, s.n, s.k, rounded);
    const double to_truncated = relative_error(host, a, b, s.m, s.n, s.k, truncated);
    // fp32 accumulation keeps to about 1e-5 of the rounded operands' product; a truncated
    // operand is about 3e-4 away from it.
    CHECK(to_rounded <= 2e-5);
    CHECK(to_truncated >= 5 * to_rounded);
    // The weight is rounded into a copy: the caller's tensor keeps its bits.
    std::vector<float> after(b.size());
    w.download(after.data(), after.size() * 4);
    CHECK(std::memcmp(after.data(), b.data(), b.size() * 4) == 0);
  }
}
