// A row kernel's softmax and log_softmax (the block-per-row template with its row resident in
// shared memory) on special values, against an fp64 reference: an element of -inf gives 0 (-inf
// for log_softmax), a NaN or +inf makes its row NaN, and so does a row of only -inf, as in
// PyTorch.
#include "kfuse/kfuse.h"
#include "runtime/device_buffer.h"
#include "runtime/driver.h"
#include "runtime/stream.h"
#include "tools/check/reference_check.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace kfuse;

namespace {

constexpr int64_t kRows = 6, kFeatures = 40;

// Row 0 random, row 1 with -inf in the middle, row 2 with a NaN last, row 3 all -inf, row 4 with
// -inf everywhere but one element, row 5 with +inf first.
std::vector<float> special_rows() {
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> x(static_cast<size_t>(kRows * kFeatures));
  for (float &v : x)
    v = dist(gen);
  x[kFeatures + kFeatures / 2] = -inf;
  x[3 * kFeatures - 1] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t c = 0; c < kFeatures; ++c) {
    x[3 * kFeatures + c] = -inf;
    x[4 * kFeatures + c] = c == 7 ? 1.5f : -inf;
  }
  x[5 * kFeatures] = inf;
  return x;
}

// softmax / log_softmax of one row in fp64; any NaN makes the row NaN (a +inf does by itself:
// exp(inf - inf)).
std::vector<double> reference(const float *row, bool log) {
  double mx = -std::numeric_limits<double>::infinity(), s = 0;
  bool nan = false;
  for (int64_t c = 0; c < kFeatures; ++c) {
    nan = nan || std::isnan(row[c]);
    mx = std::fmax(mx, row[c]);
  }
  for (int64_t c = 0; c < kFeatures; ++c)
    s += std::exp(row[c] - mx);
  std::vector<double> out;
  for (int64_t c = 0; c < kFeatures; ++c)
    out.push_back(nan ? std::nan("") : log ? row[c] - mx - std::log(s) : std::exp(row[c] - mx) / s);
  return out;
}

} // namespace

TEST_CASE("gpu softmax: a row kernel's special values are PyTorch's, softmax and log_softmax") {
  rt::Driver::get().make_current();
  const std::vector<float> x = special_rows();
  const size_t bytes = x.size() * sizeof(float);
  for (const char *op : {"softmax", "log_softmax"}) {
    INFO(op);
    const std::string text =
        std::string("pipeline s {\n  dim N\n  input x: f32[N, 40]\n  return ") + op +
        "(x, dim=1)\n}\n";
    Pipeline p = Pipeline::from_string(text, "s.kf", Options{});
    REQUIRE(p.plan_text().find("(row)") != std::string::npos);
    rt::DeviceBuffer dx(bytes), dy(bytes);
    dx.upload(x.data(), bytes);
    dy.fill_bytes(0); // zeros: a row kernel that wrote nothing would look like exp(-inf) rows
    rt::Stream stream;
    p.run({{"x", {reinterpret_cast<void *>(dx.ptr()), {kRows, kFeatures}}}},
          {{reinterpret_cast<void *>(dy.ptr()), {kRows, kFeatures}}}, stream.handle());
    stream.synchronize();
    std::vector<float> y(x.size());
    dy.download(y.data(), bytes);
    for (int64_t r = 0; r < kRows; ++r) {
      const std::vector<double> ref = reference(&x[r * kFeatures], op[0] == 'l');
      double diff = 0, norm = 0;
      for (int64_t c = 0; c < kFeatures; ++c) {
        const float got = y[r * kFeatures + c];
        INFO("row ", r, " column ", c, ": ", got, ", expected ", ref[c]);
        if (std::isnan(ref[c]) || std::isinf(ref[c])) {
          CHECK((std::isnan(ref[c]) ? std::isnan(got) : got == ref[c]));
          continue;
        }
        diff += (got - ref[c]) * (got - ref[c]);
        norm += ref[c] * ref[c];
      }
      INFO("row ", r);
      CHECK(std::sqrt(diff) <=
            rt::error_bound(Precision::FP32) * std::fmax(std::sqrt(norm), 1e-30));
    }
  }
}
