// Transposed copies: out[col * ld_out + row] = in[row * ld_in + col] for an [m, n] row-major
// matrix `in` (float, kf::bf16 or kf::f16); ld_in >= n and ld_out >= m the leading dimensions
// (rows padded for the GEMMs reading either). Each block moves
// a TRANSPOSE_TILE x TRANSPOSE_TILE tile through shared memory, so that the loads run along the
// rows of `in` and the stores along the rows of `out`, both coalesced; the tile's row pitch is
// one element longer than the tile, so the column reads hit distinct banks. Launch: block =
// TRANSPOSE_THREADS, grid = (ceil(n / TRANSPOSE_TILE), ceil(m / TRANSPOSE_TILE)), no dynamic
// shared memory; any m, n (the edge tiles are guarded); 64-bit addresses. ROUND_TF32 (float
// only): each element is stored rounded to tf32 (round_to_tf32), for a copy that only tf32
// GEMMs read as an operand: the tensor cores would truncate it. Also valid host C++, so the code
// generator takes the geometry constants from the same source.
#pragma once

#include "dtype.cuh"
#include "host_device.cuh"

namespace kf {

inline constexpr int TRANSPOSE_TILE = 32;
inline constexpr int TRANSPOSE_THREADS = 256; // TRANSPOSE_TILE columns x 8 rows a step

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

template <bool ROUND_TF32 = false, class T>
__device__ void transpose_tile(const T *__restrict__ in, long long ld_in, T *__restrict__ out,
                               long long ld_out, int m, int n) {
  constexpr int kStep = TRANSPOSE_THREADS / TRANSPOSE_TILE;
  __shared__ T tile[TRANSPOSE_TILE][TRANSPOSE_TILE + 1];
  const int lane = static_cast<int>(threadIdx.x) % TRANSPOSE_TILE;
  const int first = static_cast<int>(threadIdx.x) / TRANSPOSE_TILE;
  const int row0 = static_cast<int>(blockIdx.y) * TRANSPOSE_TILE;
  const int col0 = static_cast<int>(blockIdx.x) * TRANSPOSE_TILE;
  for (int i = first; i < TRANSPOSE_TILE; i += kStep)
    if (row0 + i < m && col0 + lane < n)
      tile[i][lane] = in[static_cast<long long>(row0 + i) * ld_in + col0 + lane];
  __syncthreads();
  static_assert(!ROUND_TF32 || sizeof(T) == 4, "tf32 rounds fp32 elements");
  for (int i = first; i < TRANSPOSE_TILE; i += kStep)
    if (col0 + i < n && row0 + lane < m) {
      if constexpr (ROUND_TF32)
        out[static_cast<long long>(col0 + i) * ld_out + row0 + lane] = round_to_tf32(tile[lane][i]);
      else
        out[static_cast<long long>(col0 + i) * ld_out + row0 + lane] = tile[lane][i];
    }
}

#endif

} // namespace kf
