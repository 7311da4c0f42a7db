// Split-K on the GPU: GEMMs with 1 to 8 output tiles (few rows), whose K the launch splits
// across idle SMs, against the fp64 reference interpreter in fp32, tf32 and bf16, train (the
// column statistics of a split GEMM) and eval; runs repeat bit for bit (the tile counters are
// left zero by every run, also in a caller's workspace that was garbage), and a run with
// split-K turned off (Options::max_split_k = 1) agrees within the precision's bound.
#include "runtime/device_buffer.h"
#include "runtime/driver.h"
#include "runtime/stream.h"
#include "tests/support/gpu_cases.h"
#include "tools/check/reference_check.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

using namespace kfuse;
using testing::expect_match;
using testing::scale_bn;

namespace {

// K of `k` for operands of `dtype`: the sm90 mainloop takes bf16 K in multiples of 8.
int depth(int k, const char *dtype) {
  return std::strcmp(dtype, "bf16") == 0 ? (k + 7) / 8 * 8 : k;
}

// A Linear of `k` -> `n` features and its output, one device tensor each, filled from `seed`.
struct LinearRun {
  int64_t m, n, k;
  rt::DeviceBuffer x, w, out;
  LinearRun(int64_t rows, int64_t features, int64_t inner, unsigned seed)
      : m(rows), n(features), k(inner), x(bytes(m * k)), w(bytes(n * k)), out(bytes(m * n)) {
    std::vector<float> host(static_cast<size_t>(std::max(m, n) * k));
    unsigned s = seed * 2654435761u + 1;
    for (float &v : host) {
      s = s * 1664525u + 1013904223u;
      v = static_cast<float>(s >> 8) / static_cast<float>(1u << 23) - 1.0f;
    }
    x.upload(host.data(), bytes(m * k));
    w.upload(host.data(), bytes(n * k));
  }
  static size_t bytes(int64_t elements) { return static_cast<size_t>(elements) * sizeof(float); }
  // One run of `p` on `stream`, the output poisoned first; the output's bits.
  std::vector<float> run(Pipeline &p, rt::Stream &stream) {
    p.bind("w", {reinterpret_cast<void *>(w.ptr()), {n, k}});
    out.fill_bytes(0xff);
    const Tensor in{reinterpret_cast<void *>(x.ptr()), {m, k}};
    const Tensor result{reinterpret_cast<void *>(out.ptr()), {m, n}};
    p.run(&in, 1, &result, 1, stream.handle());
    stream.synchronize();
    std::vector<float> host(static_cast<size_t>(m * n));
    out.download(host.data(), bytes(m * n));
    return host;
  }
};

std::string linear(int64_t k, int64_t n) {
  return "pipeline linear {\n  dim N\n  input x: f32[N, " + std::to_string(k) +
         "]\n  param w: f32[" + std::to_string(n) + ", " + std::to_string(k) +
         "]\n  return linear(x, w)\n}\n";
}

Options with(Precision precision, int max_split_k) {
  Options o;
  o.mode = Mode::Eval;
  o.precision = precision;
  o.max_split_k = max_split_k;
  return o;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double relative_difference(const std::vector<float> &a, const std::vector<float> &b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

} // namespace

TEST_CASE("gpu split-K: 1 to 8 output tiles against the fp64 reference, fp32, tf32 and bf16, "
          "train and eval") {
  struct Math {
    Precision precision;
    const char *dtype;
  };
  uint64_t seed = 1300;
  for (Math math :
       {Math{Precision::FP32, "f32"}, Math{Precision::TF32, "f32"}, Math{Precision::FP32, "bf16"}})
    for (int k : {19, 512, 4100})
      for (int n : {5, 300, 1024}) {
        const std::string text = scale_bn(depth(k, math.dtype), n, math.dtype);
        for (int64_t m : {1, 17, 128, 130})
          expect_match(text, "split.kf", Mode::Eval, m, ++seed, 1, math.precision);
        for (int64_t m : {17, 128, 130}) // train-mode batchnorm needs two rows
          expect_match(text, "split.kf", Mode::Train, m, ++seed, 2, math.precision);
      }
}

TEST_CASE("gpu split-K: runs repeat bit for bit, and agree with split-K turned off") {
  rt::Driver::get().make_current();
  rt::Stream stream;
  for (Precision precision : {Precision::FP32, Precision::TF32})
    for (auto [m, n, k] :
         {std::tuple{128, 1024, 2048}, std::tuple{17, 300, 4100}, std::tuple{1, 5, 2048}}) {
      INFO("precision ", precision == Precision::FP32 ? "fp32" : "tf32", " ", m, " x ", n, " x ",
           k);
      Pipeline split = Pipeline::from_string(linear(k, n), "linear.kf", with(precision, 0));
      Pipeline whole = Pipeline::from_string(linear(k, n), "linear.kf", with(precision, 1));
      const std::map<std::string, int64_t> dims = {{"N", m}};
      CHECK(split.workspace_size(dims) > 0); // the partial tiles: K is split
      CHECK(whole.workspace_size(dims) == 0);
      LinearRun data(m, n, k, 7);
      const std::vector<float> first = data.run(split, stream);
      for (int again = 0; again < 3; ++again)
        CHECK(same_bits(data.run(split, stream), first));
      const std::vector<float> reference = data.run(whole, stream);
      CHECK(relative_difference(first, reference) <= rt::error_bound(precision));

      // A caller's workspace holding garbage: the run zeroes the counters it uses first.
      rt::DeviceBuffer workspace(split.workspace_size(dims));
      workspace.fill_bytes(0xab);
      split.set_workspace(reinterpret_cast<void *>(workspace.ptr()), workspace.size());
      CHECK(same_bits(data.run(split, stream), first));
      workspace.fill_bytes(0xab); // written by someone else between runs
      CHECK(same_bits(data.run(split, stream), first));
    }
}
