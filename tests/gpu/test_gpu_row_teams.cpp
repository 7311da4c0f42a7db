// The row templates run by lane teams over rows staged in shared memory (kf::LaneTeam of 1, 2, 8
// and 32 lanes, several teams per warp; In = kf::Staged: tests/support/row_team_kernels.h),
// against fp64 CPU references, at row lengths around the warp size and the float4 groups (1, 3,
// 31, 32, 100, 128, 257), within DESIGN.md's fp32 bound (||gpu - ref|| / ||ref|| <= 1e-5, NaN
// where the reference is NaN). The reductions give every member of a team the same bits.
#include "runtime/device_buffer.h"
#include "runtime/driver.h"
#include "runtime/module.h"
#include "runtime/nvrtc_compiler.h"
#include "tests/support/row_team_kernels.h"
#include "tools/check/reference_check.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace kfuse;

namespace {

// Blocks of four warps; 137 rows leave the last block of every width partly idle, with teams of a
// warp returning before the template runs while the warp's others run it.
constexpr int kThreads = 128;
constexpr int kRows = 137;
constexpr int kSizes[] = {1, 3, 31, 32, 100, 128, 257};
constexpr float kEps = 1e-5f;

using Row = std::vector<double>;

// Compiled once; each launch loads it (a static Module would outlive the driver at exit).
const std::string &cubin() {
  static const std::string c =
      rt::compile(testing::row_team_request(rt::Driver::get().arch()), nullptr).cubin;
  return c;
}

std::vector<float> random_rows(int n) {
  std::mt19937 gen(static_cast<unsigned>(n));
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(kRows) * n);
  for (float &v : x)
    v = dist(gen);
  return x;
}

Row row_of(const std::vector<float> &x, int n, int r) {
  return Row(x.begin() + static_cast<long>(r) * n, x.begin() + static_cast<long>(r + 1) * n);
}

// Runs `kernel` (arguments x, y, rows, n, lanes, extra...) with teams of `lanes` and returns
// y's y_floats floats (poisoned with NaN before the launch).
template <class... Extra>
std::vector<float> launch_rows(const std::string &kernel, int lanes, const std::vector<float> &x,
                               int n, size_t y_floats, Extra... extra) {
  rt::DeviceBuffer dx(x.size() * sizeof(float)), dy(std::max<size_t>(y_floats, 1) * 4);
  dx.upload(x.data(), x.size() * sizeof(float));
  dy.fill_bytes(0xff);
  CUdeviceptr px = dx.ptr(), py = dy.ptr();
  int rows = kRows;
  void *args[] = {&px, &py, &rows, &n, &lanes, static_cast<void *>(&extra)...};
  const int rows_per_block = kThreads / lanes;
  const unsigned blocks = (kRows + rows_per_block - 1) / rows_per_block;
  const rt::Module module(cubin());
  rt::launch(module.function(kernel), rt::Dim3{blocks}, rt::Dim3{kThreads},
             testing::row_team_smem_bytes(kThreads, lanes), nullptr, args);
  std::vector<float> y(y_floats);
  dy.download(y.data(), y_floats * sizeof(float));
  return y;
}

// ||got - ref|| / ||ref|| over the finite references; a NaN reference needs a NaN result, an
// infinite one the same infinity.
void expect_close(const std::vector<float> &got, const Row &ref) {
  REQUIRE(got.size() == ref.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(ref[i])) {
      CHECK_MESSAGE(std::isnan(got[i]), "element ", i, ": ", got[i], ", expected NaN");
      continue;
    }
    if (std::isinf(ref[i])) {
      CHECK_MESSAGE(got[i] == ref[i], "element ", i, ": ", got[i], ", expected ", ref[i]);
      continue;
    }
    diff += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  CHECK(std::sqrt(diff) <= rt::error_bound(Precision::FP32) * std::max(std::sqrt(norm), 1e-30));
}

// The reference of a row-to-row operation, applied to every row.
Row per_row(const std::vector<float> &x, int n, const std::function<Row(const Row &)> &f) {
  Row out;
  for (int r = 0; r < kRows; ++r) {
    const Row y = f(row_of(x, n, r));
    out.insert(out.end(), y.begin(), y.end());
  }
  return out;
}

double sum(const Row &v) {
  double s = 0;
  for (double e : v)
    s += e;
  return s;
}
double mean(const Row &v) { return sum(v) / static_cast<double>(v.size()); }
double max_of(const Row &v) { return *std::max_element(v.begin(), v.end()); }
// The sum of squared deviations from the mean.
double m2(const Row &v) {
  double s = 0;
  for (double e : v)
    s += (e - mean(v)) * (e - mean(v));
  return s;
}

Row softmax(const Row &v, bool log) {
  const double mx = max_of(v);
  double s = 0;
  for (double e : v)
    s += std::exp(e - mx);
  Row out;
  for (double e : v)
    out.push_back(log ? e - mx - std::log(s) : std::exp(e - mx) / s);
  return out;
}

Row normalized(const Row &v, double shift, double var) {
  Row out;
  for (double e : v)
    out.push_back((e - shift) / std::sqrt(var + kEps));
  return out;
}

Row group_norm(const Row &v, int groups) {
  const size_t size = v.size() / static_cast<size_t>(groups);
  Row out;
  for (int g = 0; g < groups; ++g) {
    const Row group(v.begin() + static_cast<long>(g * size),
                    v.begin() + static_cast<long>((g + 1) * size));
    const Row y = normalized(group, mean(group), m2(group) / static_cast<double>(size));
    out.insert(out.end(), y.begin(), y.end());
  }
  return out;
}

// The result of reduction `kind` (kf::Reduce's index) of every row by teams of `lanes`, after
// checking that every member got the same bits.
std::vector<float> member_results(int kind, int lanes, const std::vector<float> &x, int n,
                                  float correction) {
  const std::vector<float> y =
      launch_rows("team_reduce", lanes, x, n, kRows * 32, correction, kind);
  std::vector<float> first;
  for (int r = 0; r < kRows; ++r) {
    for (int member = 1; member < lanes; ++member)
      CHECK_MESSAGE(std::memcmp(&y[r * 32], &y[r * 32 + member], sizeof(float)) == 0, "row ", r,
                    " member ", member);
    first.push_back(y[r * 32]);
  }
  return first;
}

// Calls f(lanes, n, x) for every team width and row length, x the random rows of length n.
void for_each_width_and_length(const std::function<void(int, int, const std::vector<float> &)> &f) {
  for (int lanes : testing::kRowTeamLanes)
    for (int n : kSizes) {
      CAPTURE(lanes);
      CAPTURE(n);
      f(lanes, n, random_rows(n));
    }
}

} // namespace

TEST_CASE("gpu row teams: softmax, log_softmax and a map, a lane team per staged row") {
  rt::Driver::get().make_current();
  for_each_width_and_length([](int lanes, int n, const std::vector<float> &x) {
    const size_t all = static_cast<size_t>(kRows) * n;
    for (int log : {0, 1}) {
      CAPTURE(log);
      expect_close(launch_rows("team_softmax", lanes, x, n, all, log),
                   per_row(x, n, [&](const Row &v) { return softmax(v, log != 0); }));
    }
    expect_close(launch_rows("team_map", lanes, x, n, all), per_row(x, n, [](const Row &v) {
                   Row out;
                   for (double e : v)
                     out.push_back(2 * e + 1);
                   return out;
                 }));
  });
}

TEST_CASE("gpu row teams: softmax's special values are PyTorch's: an element of -inf gives 0 "
          "(-inf for log_softmax), a NaN or +inf makes its row NaN, and so does a row of -inf") {
  rt::Driver::get().make_current();
  const float inf = std::numeric_limits<float>::infinity();
  for_each_width_and_length([&](int lanes, int n, std::vector<float> x) {
    // Rows 0..3: -inf in the middle, NaN last, all -inf, +inf first (a team of one lane meets
    // it before every other element of its row).
    x[n / 2] = -inf;
    x[2 * static_cast<size_t>(n) - 1] = std::numeric_limits<float>::quiet_NaN();
    std::fill(x.begin() + 2 * n, x.begin() + 3 * n, -inf);
    x[3 * static_cast<size_t>(n)] = inf;
    const size_t all = static_cast<size_t>(kRows) * n;
    for (int log : {0, 1}) {
      CAPTURE(log);
      Row ref = per_row(x, n, [&](const Row &v) { return softmax(v, log != 0); });
      std::fill(ref.begin() + n, ref.begin() + 2 * n, std::nan("")); // max_element skips NaN
      expect_close(launch_rows("team_softmax", lanes, x, n, all, log), ref);
    }
  });
}

TEST_CASE("gpu row teams: layernorm, rmsnorm and group norm, a lane team per staged row") {
  rt::Driver::get().make_current();
  const int layernorm = 0, rmsnorm = 1;
  for_each_width_and_length([&](int lanes, int n, const std::vector<float> &x) {
    const size_t all = static_cast<size_t>(kRows) * n;
    expect_close(launch_rows("team_norm", lanes, x, n, all, kEps, layernorm),
                 per_row(x, n, [](const Row &v) {
                   return normalized(v, mean(v), m2(v) / static_cast<double>(v.size()));
                 }));
    expect_close(launch_rows("team_norm", lanes, x, n, all, kEps, rmsnorm),
                 per_row(x, n, [](const Row &v) {
                   double sq = 0;
                   for (double e : v)
                     sq += e * e;
                   return normalized(v, 0.0, sq / static_cast<double>(v.size()));
                 }));
    // Four groups where n allows (the team owns each in turn), else one.
    const int groups = n % 4 == 0 ? 4 : 1;
    expect_close(launch_rows("team_group_norm", lanes, x, n, all, groups, kEps),
                 per_row(x, n, [&](const Row &v) { return group_norm(v, groups); }));
  });
}

TEST_CASE("gpu row teams: every reduction, a lane team per staged row, the same in every "
          "member") {
  rt::Driver::get().make_current();
  const float correction = 1.0f; // n = 1: var and std divide by 0 and are NaN, as torch's
  const auto var = [](const Row &v) { return m2(v) / std::max(0.0, v.size() - 1.0); };
  // In kf::Reduce's order: Sum, Mean, Max, Min, LogSumExp, Var, Std.
  const std::function<double(const Row &)> refs[] = {
      sum,
      mean,
      max_of,
      [](const Row &v) { return *std::min_element(v.begin(), v.end()); },
      [](const Row &v) {
        double s = 0;
        for (double e : v)
          s += std::exp(e - max_of(v));
        return max_of(v) + std::log(s);
      },
      var,
      [&](const Row &v) { return std::sqrt(var(v)); },
  };
  for (int lanes : testing::kRowTeamLanes)
    for (int kind = 0; kind < static_cast<int>(std::size(refs)); ++kind)
      for (int n : kSizes) {
        CAPTURE(lanes);
        CAPTURE(kind);
        CAPTURE(n);
        const std::vector<float> x = random_rows(n);
        Row ref;
        for (int r = 0; r < kRows; ++r)
          ref.push_back(refs[kind](row_of(x, n, r)));
        expect_close(member_results(kind, lanes, x, n, correction), ref);
      }
}

TEST_CASE("gpu row teams: max and average pooling, a lane team per staged row") {
  rt::Driver::get().make_current();
  const int kernel = 3, stride = 2;
  for (int lanes : testing::kRowTeamLanes)
    for (int n : kSizes) {
      if (n < kernel)
        continue;
      CAPTURE(lanes);
      CAPTURE(n);
      const int width = (n - kernel) / stride + 1;
      const std::vector<float> x = random_rows(n);
      const size_t all = static_cast<size_t>(kRows) * width;
      for (int max : {0, 1}) {
        CAPTURE(max);
        const Row ref = per_row(x, n, [&](const Row &v) {
          Row out;
          for (int j = 0; j < width; ++j) {
            const Row window(v.begin() + j * stride, v.begin() + j * stride + kernel);
            out.push_back(max != 0 ? max_of(window) : mean(window));
          }
          return out;
        });
        expect_close(launch_rows("team_pool", lanes, x, n, all, width, kernel, stride, max), ref);
      }
    }
}
