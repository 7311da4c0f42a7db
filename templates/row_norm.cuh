// layernorm / rmsnorm over each row of an [m, n] row-major matrix, as F.layer_norm and F.rms_norm
// (biased variance), with a per-column transform on load (the plan's pending elementwise
// prologue) and post applying the optional weight and bias on store:
//
//   y = pre(col, in[row, col])
//   layernorm: out[row, col] = post(col, (y - mean) * rstd),  rstd = 1 / sqrt(var + eps)
//   rmsnorm:   out[row, col] = post(col, y * (1 / sqrt(mean(y^2) + eps)))
//
// One block of Threads threads per row (grid = dim3(m), the resident-row shared memory of
// row_kernel.cuh) calls row_norm<Threads, Rms>(blockIdx.x, n, in, ld_in, out, ld_out, eps, pre,
// post, smem, smem_floats); rows per warp: Threads = Lanes, a last argument
// kf::LaneTeam<Lanes>{lane}, smem = nullptr, smem_floats = 0. Resident (n <= smem_floats): the
// mean, then the squared deviations from it, summed over the row in shared memory (two exact
// passes); one read, one write. Streaming: a Welford pass (layernorm) or a sum of squares
// (rmsnorm), then a second read that writes. Deterministic; in == out is allowed.
#pragma once

#include "row_kernel.cuh"

namespace kf {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace row_detail {

// Writes dst[col] = post(col, (y - shift) * scale) for this member's elements of a row of n, y
// from get4(i) (the float4 group i) and get1(c) (a tail element): the same elements per member
// as for_each_loaded, four elements per store where dst is aligned to four elements.
template <class Team, class Out, class Post, class Get4, class Get1>
__device__ __forceinline__ void write_normalized(const Team &team, Out *dst, int n, float shift,
                                                 float scale, const Post &post, Get4 get4,
                                                 Get1 get1) {
  const bool vec = vec4_aligned(dst);
  const int n4 = n / 4;
  for (int i = team.rank(); i < n4; i += Team::SIZE) {
    float4 v = get4(i);
    v.x = post(4 * i, (v.x - shift) * scale);
    v.y = post(4 * i + 1, (v.y - shift) * scale);
    v.z = post(4 * i + 2, (v.z - shift) * scale);
    v.w = post(4 * i + 3, (v.w - shift) * scale);
    store4(dst, i, v, vec);
  }
  for (int c = 4 * n4 + team.rank(); c < n; c += Team::SIZE)
    store(dst + c, post(c, (get1(c) - shift) * scale));
}

} // namespace row_detail

// Pre concept: __device__ float operator()(int col, float x) const; Post likewise, given the
// normalized value. In, Out: float, kf::bf16 or kf::f16 (dtype.cuh); the row is computed in float.
// In may also be kf::Staged: a row the caller staged in shared memory.
template <int Threads, bool Rms, class Pre, class Post, class In, class Out,
          class Team = BlockTeam<Threads>>
__device__ void row_norm(int row, int n, const In *in, int ld_in, Out *out, int ld_out, float eps,
                         const Pre &pre, const Post &post, float *smem, int smem_floats,
                         Team team = Team{}) {
  static_assert(Team::SIZE == Threads, "the team is Threads threads");
  using namespace row_detail;
  const In *src = in + static_cast<long long>(row) * ld_in;
  Out *dst = out + static_cast<long long>(row) * ld_out;
  const bool vin = vec4_aligned(src);
  const int n4 = n / 4;
  const int tid = team.rank();
  const float count = static_cast<float>(n);

  if (smem != nullptr && n <= smem_floats) {
    // Resident: each thread revisits exactly the elements it stored, so no barrier is needed.
    float lsum = 0.0f;
    for_each_loaded(team, src, n, pre, [&](int c, float y) {
      smem[c] = y;
      lsum += Rms ? y * y : y;
    });
    const float mean = Rms ? 0.0f : team.sum(lsum) / count;
    float lsq = lsum;
    if constexpr (!Rms) {
      lsq = 0.0f;
      for (int i = tid; i < n4; i += Threads)
        for (int c = 4 * i; c < 4 * i + 4; ++c)
          lsq += (smem[c] - mean) * (smem[c] - mean);
      for (int c = 4 * n4 + tid; c < n; c += Threads)
        lsq += (smem[c] - mean) * (smem[c] - mean);
    }
    const float var = team.sum(lsq) / count;
    write_normalized(
        team, dst, n, mean, 1.0f / sqrtf(var + eps), post,
        [&](int i) { return reinterpret_cast<const float4 *>(smem)[i]; },
        [&](int c) { return smem[c]; });
    return;
  }

  // Streaming: the statistics in one pass, then re-read, transform and write.
  float mean = 0.0f, var;
  if constexpr (Rms) {
    float lsq = 0.0f;
    for_each_loaded(team, src, n, pre, [&](int, float y) { lsq += y * y; });
    var = team.sum(lsq) / count;
  } else {
    Welford acc{0.0f, 0.0f, 0.0f};
    for_each_loaded(team, src, n, pre, [&](int, float y) { welford_add(acc, y); });
    const Welford tot = team.welford(acc);
    mean = tot.mean;
    var = tot.m2 / count;
  }
  write_normalized(
      team, dst, n, mean, 1.0f / sqrtf(var + eps), post,
      [&](int i) {
        float4 v = load4(src, i, vin);
        return make_float4(pre(4 * i, v.x), pre(4 * i + 1, v.y), pre(4 * i + 2, v.z),
                           pre(4 * i + 3, v.w));
      },
      [&](int c) { return pre(c, ldg(src + c)); });
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
