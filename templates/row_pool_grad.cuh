// The gradient of max_pool1d / avg_pool1d over each row, gathered: feature j of the row sums
// the windows w that hold it (w * stride <= j < w * stride + kernel), in window order, so every
// element has one writer and no atomics are needed; a feature no window holds gets 0:
//
//   gw = pre(w, g[row, w]);   out[row, j] = Σ_w gw / kernel             (Reduce::Mean)
//                                           Σ_w gw [argmax(w) == j]     (Reduce::Max)
//
// argmax(w) is the feature PyTorch's max_pool1d_with_indices gives window w of the row of x:
// the first maximum, or the last NaN. One block of Threads threads per row (grid = dim3(m))
// calls row_pool_grad<Threads, R>(blockIdx.x, g, ld_g, x_row, out, width, features, kernel,
// stride, pre); rows per warp: Threads = Lanes, a last argument kf::LaneTeam<Lanes>{lane}.
// x_row is this row of x (R = Max; ignored for Mean), out has `features` per row. Member t
// computes features t, t + Threads, ...: neighbouring features on neighbouring threads, so the
// loads of a window's neighbours coalesce and hit L1.
// Pre: __device__ float operator()(int col, float g) const. In, X, Out: float, kf::bf16 or
// kf::f16; In may be kf::Staged (a row staged in shared memory).
#pragma once

#include "math.cuh"
#include "row_reduce.cuh"

namespace kf {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// The index in [0, kernel) of the window x[0 .. kernel - 1] that max_pool1d_with_indices gives:
// a value replaces the running maximum when greater or NaN.
template <class X> __device__ __forceinline__ int window_argmax(const X *x, int kernel) {
  int at = 0;
  float best = row_detail::neg_inf();
  for (int i = 0; i < kernel; ++i) {
    const float v = ldg(x + i);
    if (v > best || v != v) {
      best = v;
      at = i;
    }
  }
  return at;
}

template <int Threads, Reduce R, class Pre, class In, class X, class Out,
          class Team = BlockTeam<Threads>>
__device__ void row_pool_grad(int row, const In *g, int ld_g, const X *x_row, Out *out, int width,
                              int features, int kernel, int stride, const Pre &pre,
                              Team team = Team{}) {
  static_assert(Team::SIZE == Threads, "the team is Threads threads");
  static_assert(R == Reduce::Max || R == Reduce::Mean, "max_pool1d or avg_pool1d");
  const In *src = g + static_cast<long long>(row) * ld_g;
  Out *dst = out + static_cast<long long>(row) * features;
  for (int j = team.rank(); j < features; j += Threads) {
    const int first = j < kernel ? 0 : (j - kernel) / stride + 1; // ceil((j - kernel + 1) / s)
    const int last = j / stride < width ? j / stride : width - 1;
    float acc = 0.0f;
    for (int w = first; w <= last; ++w) {
      if (R == Reduce::Mean)
        acc += pre(w, ldg(src + w)) / static_cast<float>(kernel);
      else if (window_argmax(x_row + w * stride, kernel) == j - w * stride)
        acc += pre(w, ldg(src + w));
    }
    store(dst + j, acc);
  }
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
