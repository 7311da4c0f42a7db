// Dropout's random stream, one definition for the generated kernels and the fp64 interpreter
// (compiler/ir/interpreter.cpp), so both drop exactly the same elements. Philox4x32-10 (Salmon et
// al., SC'11) is counter-based: an element's draw depends only on its counter and the key, not
// on which kernel, tile or thread computes it.
//
//   key     = (seed bits 0-31, seed bits 32-63)
//   counter = (index bits 0-31, index bits 32-47 | stream << 16, offset bits 0-31, offset 32-63)
//
// index = row * F + col (col for a rank-1 value); stream: the op's `stream` attribute (two
// dropouts draw independently); offset: the run's RNG offset (+1 per train-mode run). An element
// is kept when the first output word's top 24 bits are >= floor(float(p) * 2^24 + 0.5): integer
// arithmetic, exact on both sides, so the masks agree bit for bit. Also valid host C++.
#pragma once

#include "host_device.cuh"

namespace kf {

struct Philox4x32 {
  unsigned int v[4];
};

// One round's 32 x 32 -> 64-bit product, split into its high and low words.
KF_HOST_DEVICE inline void mulhilo32(unsigned int a, unsigned int b, unsigned int &hi,
                                     unsigned int &lo) {
  const unsigned long long p = static_cast<unsigned long long>(a) * b;
  hi = static_cast<unsigned int>(p >> 32);
  lo = static_cast<unsigned int>(p);
}

// Philox4x32 with 10 rounds and the published multipliers and Weyl key increments.
KF_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 ctr, unsigned int k0, unsigned int k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    unsigned int hi0, lo0, hi1, lo1;
    mulhilo32(0xD2511F53u, ctr.v[0], hi0, lo0);
    mulhilo32(0xCD9E8D57u, ctr.v[2], hi1, lo1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
  }
  return ctr;
}

// The drop threshold of probability p (given as the float both sides see).
KF_HOST_DEVICE inline unsigned int dropout_threshold(float p) {
  return static_cast<unsigned int>(static_cast<double>(p) * 16777216.0 + 0.5);
}

// Whether element `index` of dropout stream `stream` is kept at (seed, offset).
KF_HOST_DEVICE inline bool dropout_keep(unsigned long long seed, unsigned long long offset,
                                        unsigned int stream, unsigned long long index,
                                        unsigned int threshold) {
  const Philox4x32 ctr = {
      {static_cast<unsigned int>(index), static_cast<unsigned int>(index >> 32) | (stream << 16),
       static_cast<unsigned int>(offset), static_cast<unsigned int>(offset >> 32)}};
  const Philox4x32 r =
      philox4x32_10(ctr, static_cast<unsigned int>(seed), static_cast<unsigned int>(seed >> 32));
  return (r.v[0] >> 8) >= threshold;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// F.dropout in train mode: a kept x scaled by 1 / (1 - p), a dropped one times 0 (as PyTorch's
// x * mask * scale: NaN and infinities stay NaN).
__device__ __forceinline__ float dropout(float x, float p, float stream, unsigned long long seed,
                                         unsigned long long offset, unsigned long long index) {
  const bool keep =
      dropout_keep(seed, offset, static_cast<unsigned int>(stream), index, dropout_threshold(p));
  return keep ? x * (1.0f / (1.0f - p)) : x * 0.0f;
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
