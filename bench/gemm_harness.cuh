// What the GEMM-alone harnesses (gemm_sweep.cu, simt_sweep.cu) share: error checks, random
// operands, the fp64 reference product, split-K's workspace, the identity epilogue and the timer
// (median of CUDA-event times, L2 flushed before each run, two contenders' runs interleaved).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <random>
#include <utility>
#include <vector>

#define CHECK_CUDA(x)                                                                              \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));     \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)
#define CHECK_CU(x)                                                                                \
  do {                                                                                             \
    CUresult r_ = (x);                                                                             \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      const char *s_ = nullptr;                                                                    \
      cuGetErrorString(r_, &s_);                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_);                         \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

struct Identity {
  static constexpr int COLUMN_FLOATS = 0;
  static constexpr int MATRICES = 0;
  struct Column {};
  __device__ Column column(int) const { return {}; }
  __device__ float apply(const Column &, int, int, float acc, const float *) const { return acc; }
};

// C = A B^T in fp64 (A [m, k], B [n, k] row-major; trans_b false: B [k, n]).
template <class T>
__global__ void reference(int m, int n, int k, const T *a, const T *b, double *c,
                          bool trans_b = true) {
  const int row = blockIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= n)
    return;
  double s = 0;
  for (int i = 0; i < k; ++i)
    s += static_cast<double>(static_cast<float>(a[static_cast<size_t>(row) * k + i])) *
         static_cast<double>(static_cast<float>(
             b[trans_b ? static_cast<size_t>(col) * k + i : static_cast<size_t>(i) * n + col]));
  c[static_cast<size_t>(row) * n + col] = s;
}

int g_sms = 0;

// Split-K's workspace, grown as needed: partial tiles, and per-tile counters zeroed once (every
// launch leaves them zero).
struct SplitWorkspace {
  float *partials = nullptr;
  unsigned *counters = nullptr;
  size_t floats = 0, tiles = 0;
  void reserve(size_t need_floats, size_t need_tiles) {
    if (need_floats > floats) {
      cudaFree(partials);
      CHECK_CUDA(cudaMalloc(&partials, need_floats * sizeof(float)));
      floats = need_floats;
    }
    if (need_tiles > tiles) {
      cudaFree(counters);
      CHECK_CUDA(cudaMalloc(&counters, need_tiles * sizeof(unsigned)));
      CHECK_CUDA(cudaMemset(counters, 0, need_tiles * sizeof(unsigned)));
      tiles = need_tiles;
    }
  }
} g_split;

template <class T> void fill(T *d, size_t n, std::mt19937 &rng, float scale) {
  std::vector<T> h(n);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto &x : h)
    x = static_cast<T>(u(rng) * scale);
  CHECK_CUDA(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
}

// A timed problem's operands: A [m, k] and B [n, k] of T, random in (-1, 1) and (-0.01, 0.01)
// from rng, and C [m, n] fp32; freed with the object.
template <class T> struct TimedOperands {
  T *a = nullptr, *b = nullptr;
  float *c = nullptr;
  TimedOperands(int m, int n, int k, std::mt19937 &rng) {
    CHECK_CUDA(cudaMalloc(&a, sizeof(T) * m * k));
    CHECK_CUDA(cudaMalloc(&b, sizeof(T) * n * k));
    CHECK_CUDA(cudaMalloc(&c, sizeof(float) * m * n));
    fill(a, static_cast<size_t>(m) * k, rng, 1.0f);
    fill(b, static_cast<size_t>(n) * k, rng, 0.01f);
  }
  TimedOperands(const TimedOperands &) = delete;
  TimedOperands &operator=(const TimedOperands &) = delete;
  ~TimedOperands() {
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
  }
};

// Norm-wise relative error of c against the fp64 reference; `bad` counts non-finite outputs.
inline double relative_error(const std::vector<float> &c, const std::vector<double> &ref,
                             size_t &bad) {
  double num = 0, den = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (!std::isfinite(c[i]))
      ++bad;
    num += (c[i] - ref[i]) * (c[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// The column-statistics partials of each row tile of height bm (mean, M2) against the stored
// output c [m, n], relative to the column's scale; infinite where a partial is not finite.
inline double column_stats_error(const std::vector<float> &c, const std::vector<float> &pmean,
                                 const std::vector<float> &pm2, int m, int n, int bm) {
  double err = 0;
  for (int t = 0; t * bm < m; ++t)
    for (int col = 0; col < n; ++col) {
      const int r0 = t * bm, r1 = std::min(m, r0 + bm);
      double mean = 0, m2 = 0, scale = 1e-30;
      for (int r = r0; r < r1; ++r)
        mean += c[static_cast<size_t>(r) * n + col];
      mean /= (r1 - r0);
      for (int r = r0; r < r1; ++r) {
        const double d = c[static_cast<size_t>(r) * n + col] - mean;
        m2 += d * d;
        scale =
            std::max(scale, static_cast<double>(std::fabs(c[static_cast<size_t>(r) * n + col])));
      }
      const size_t idx = static_cast<size_t>(t) * n + col;
      err = std::max(err, std::fabs(pmean[idx] - mean) / scale);
      err = std::max(err, std::fabs(pm2[idx] - m2) / (scale * scale * (r1 - r0)));
      if (!std::isfinite(pmean[idx]) || !std::isfinite(pm2[idx]))
        err = INFINITY;
    }
  return err;
}

// Copies back the output c [m, n], its column partials (row tiles of bm) and the fp64
// reference, and compares them (relative_error, column_stats_error).
struct OutputCheck {
  double rel = 0, stats = 0;
  size_t bad = 0; // non-finite outputs
};
inline OutputCheck check_output(const float *c, const double *ref, const float *pmean,
                                const float *pm2, int m, int n, int bm) {
  const size_t tiles = static_cast<size_t>((m + bm - 1) / bm) * n;
  std::vector<float> hc(static_cast<size_t>(m) * n), hmean(tiles), hm2(tiles);
  std::vector<double> hr(hc.size());
  CHECK_CUDA(cudaMemcpy(hc.data(), c, hc.size() * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hr.data(), ref, hr.size() * 8, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hmean.data(), pmean, tiles * 4, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hm2.data(), pm2, tiles * 4, cudaMemcpyDeviceToHost));
  OutputCheck r;
  r.rel = relative_error(hc, hr, r.bad);
  r.stats = column_stats_error(hc, hmean, hm2, m, n, bm);
  return r;
}

struct Timer {
  cudaEvent_t e0, e1;
  void *flush;
  Timer() {
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    CHECK_CUDA(cudaMalloc(&flush, 256 << 20));
  }
  // The medians of f's and g's times, their runs interleaved (f, g, f, g, ...): at the board's
  // power limit the clocks drop within a second of sustained load, so two kernels timed one
  // block after the other would run at different clocks (docs/PERF.md,
  // "Methodology").
  template <class F, class G> std::pair<double, double> median_ms(F &&f, G &&g, int reps = 50) {
    for (int i = 0; i < 5; ++i) {
      f();
      g();
    }
    std::vector<float> tf, tg;
    for (int i = 0; i < reps; ++i) {
      tf.push_back(time_one(f, 2 * i));
      tg.push_back(time_one(g, 2 * i + 1));
    }
    return {median(tf), median(tg)};
  }

private:
  template <class F> float time_one(F &f, int i) {
    CHECK_CUDA(cudaMemsetAsync(flush, i, 256 << 20));
    cudaEventRecord(e0);
    f();
    cudaEventRecord(e1);
    CHECK_CUDA(cudaEventSynchronize(e1));
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    return ms;
  }
  static double median(std::vector<float> t) {
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};
