// softmax / log_softmax over each row of an [m, n] row-major matrix, as PyTorch computes them,
// with a per-column transform on load (the plan's pending column affine: BN normalize, scale,
// bias):
//
//   y = pre(col, in[row, col]);   out[row, col] = post(col, exp(y - max) / sum)
//                                                   (Log: post(col, y - max - log(sum)))
//
// One block of Threads threads per row (a multiple of 32, at most 1024; grid = dim3(m), the
// resident-row shared memory of row_kernel.cuh) calls row_softmax<Threads, Log>(blockIdx.x, n,
// in, ld_in, out, ld_out, pre, post, smem, smem_floats); rows per warp: Threads = Lanes, a last
// argument kf::LaneTeam<Lanes>{lane}, smem = nullptr, smem_floats = 0.
// - resident (n <= smem_floats): the row is kept in shared memory; one read, one write.
// - streaming: a pass keeps a per-thread online (max, sum), the pairs merge, a second pass
//   re-reads the row and writes it; two reads, one write.
// Four elements per access where the row's pointer is aligned to four (a scalar tail); 64-bit
// addresses. in == out with ld_in == ld_out is allowed: every element is read before the row is
// written (resident) or by the thread that overwrites it (streaming).
//
// Special values as PyTorch: a NaN or +inf in the row makes it NaN; -inf elements give 0 (-inf
// for Log); a row of only -inf gives NaN.
#pragma once

#include "row_kernel.cuh"

namespace kf {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace row_detail {

// x / b for the elements of a row and one b >= 1 (the sum of exponentials, its largest term 1):
// PyTorch divides each exponential by the sum. The same correctly rounded quotient from one
// reciprocal and two FMAs per element (Markstein's correction), where the division takes a
// reciprocal, three FMAs, a range check and a call per element. Equal to x / b wherever the
// quotient is a normal float; a quotient below 2^-126 may differ in its last place. The resident
// path's write pass uses it; the streaming path (rows past the shared-memory cap) divides, as
// one more register live through both paths made ptxas spill in a row kernel of seven passes.
struct DivideBy {
  float b, r;
  __device__ explicit DivideBy(float b_) : b(b_), r(1.0f / b_) {}
  __device__ __forceinline__ float operator()(float x) const {
    const float q = x * r;
    return fmaf(fmaf(-q, b, x), r, q);
  }
};

} // namespace row_detail

// Pre concept: __device__ float operator()(int col, float x) const; Post likewise, given the
// softmax of the element (the elementwise ops after it: row_tail). In, Out: float, kf::bf16 or
// kf::f16 (dtype.cuh); the row is computed in float. In may also be kf::Staged: a row the caller
// staged in shared memory.
template <int Threads, bool Log, class Pre, class Post, class In, class Out,
          class Team = BlockTeam<Threads>>
__device__ void row_softmax(int row, int n, const In *in, int ld_in, Out *out, int ld_out,
                            const Pre &pre, const Post &post, float *smem, int smem_floats,
                            Team team = Team{}) {
  static_assert(Team::SIZE == Threads, "the team is Threads threads");
  using namespace row_detail;

  const In *src = in + static_cast<long long>(row) * ld_in;
  Out *dst = out + static_cast<long long>(row) * ld_out;
  const bool vin = vec4_aligned(src), vout = vec4_aligned(dst);
  const int n4 = n / 4; // float4 body; elements [4 * n4, n) are the scalar tail
  const int tid = team.rank();

  if (smem != nullptr && n <= smem_floats) {
    // Resident: load + transform once, into shared memory.
    float lmax = neg_inf();
    for (int i = tid; i < n4; i += Threads) {
      float4 v = load4(src, i, vin);
      v.x = pre(4 * i, v.x);
      v.y = pre(4 * i + 1, v.y);
      v.z = pre(4 * i + 2, v.z);
      v.w = pre(4 * i + 3, v.w);
      reinterpret_cast<float4 *>(smem)[i] = v;
      lmax = fmaxf(lmax, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    }
    for (int c = 4 * n4 + tid; c < n; c += Threads) {
      const float y = pre(c, ldg(src + c));
      smem[c] = y;
      lmax = fmaxf(lmax, y);
    }
    const float mx = team.max(lmax);

    // Sum of exp(y - max). Each thread revisits exactly the elements it wrote, so no barrier is
    // needed before; softmax keeps the exponentials for the write pass.
    float lsum = 0.0f;
    for (int i = tid; i < n4; i += Threads) {
      float4 v = reinterpret_cast<const float4 *>(smem)[i];
      v.x = expf(v.x - mx);
      v.y = expf(v.y - mx);
      v.z = expf(v.z - mx);
      v.w = expf(v.w - mx);
      lsum += (v.x + v.y) + (v.z + v.w);
      if constexpr (!Log)
        reinterpret_cast<float4 *>(smem)[i] = v;
    }
    for (int c = 4 * n4 + tid; c < n; c += Threads) {
      const float e = expf(smem[c] - mx);
      lsum += e;
      if constexpr (!Log)
        smem[c] = e;
    }
    const float sum = team.sum(lsum);
    const DivideBy by_sum(sum);

    const float lse = logf(sum);
    for (int i = tid; i < n4; i += Threads) {
      float4 v = reinterpret_cast<const float4 *>(smem)[i];
      if constexpr (Log) {
        v.x = post(4 * i, (v.x - mx) - lse);
        v.y = post(4 * i + 1, (v.y - mx) - lse);
        v.z = post(4 * i + 2, (v.z - mx) - lse);
        v.w = post(4 * i + 3, (v.w - mx) - lse);
      } else {
        v.x = post(4 * i, by_sum(v.x));
        v.y = post(4 * i + 1, by_sum(v.y));
        v.z = post(4 * i + 2, by_sum(v.z));
        v.w = post(4 * i + 3, by_sum(v.w));
      }
      store4(dst, i, v, vout);
    }
    for (int c = 4 * n4 + tid; c < n; c += Threads)
      store(dst + c, post(c, Log ? (smem[c] - mx) - lse : by_sum(smem[c])));
    return;
  }

  // Streaming: online (max, sum) in one pass, then recompute and write.
  MaxSum acc{neg_inf(), 0.0f};
  for (int i = tid; i < n4; i += Threads) {
    const float4 v = load4(src, i, vin);
    online_add(acc, pre(4 * i, v.x));
    online_add(acc, pre(4 * i + 1, v.y));
    online_add(acc, pre(4 * i + 2, v.z));
    online_add(acc, pre(4 * i + 3, v.w));
  }
  for (int c = 4 * n4 + tid; c < n; c += Threads)
    online_add(acc, pre(c, ldg(src + c)));
  const MaxSum tot = team.max_sum(acc);
  const float mx = tot.m, sum = tot.s, lse = logf(tot.s);

  for (int i = tid; i < n4; i += Threads) {
    float4 v = load4(src, i, vin);
    v.x = pre(4 * i, v.x);
    v.y = pre(4 * i + 1, v.y);
    v.z = pre(4 * i + 2, v.z);
    v.w = pre(4 * i + 3, v.w);
    if constexpr (Log) {
      v.x = post(4 * i, (v.x - mx) - lse);
      v.y = post(4 * i + 1, (v.y - mx) - lse);
      v.z = post(4 * i + 2, (v.z - mx) - lse);
      v.w = post(4 * i + 3, (v.w - mx) - lse);
    } else {
      v.x = post(4 * i, expf(v.x - mx) / sum);
      v.y = post(4 * i + 1, expf(v.y - mx) / sum);
      v.z = post(4 * i + 2, expf(v.z - mx) / sum);
      v.w = post(4 * i + 3, expf(v.w - mx) / sum);
    }
    store4(dst, i, v, vout);
  }
  for (int c = 4 * n4 + tid; c < n; c += Threads) {
    const float y = pre(c, ldg(src + c));
    store(dst + c, post(c, Log ? (y - mx) - lse : expf(y - mx) / sum));
  }
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
