// Tensor element types in memory and their conversions to and from the fp32 every kernel
// computes in. float, kf::bf16 and kf::f16 are loaded with kf::load / kf::ldg (to float) and
// stored with kf::store (round to nearest even, as PyTorch's casts). bf16 and f16 are two-byte
// structs of their bits, not cuda_bf16.h's types, whose headers would dominate NVRTC's compile
// time. bf16 rounding is PTX cvt from sm_80 and bit operations before (same values; a NaN stays
// a NaN); f16 is PTX cvt everywhere.
//
// Four-element vectors (row kernels) move as one 16-byte (float) or 8-byte (bf16, f16) access
// where aligned (kf::vec4_aligned); longer vectors (elementwise) as 16-byte accesses
// (kf::load_vec, kf::store_vec). kf::Staged is a source type: a float staged in shared memory (a
// GEMM epilogue's tile), read through the same kf::ldg / kf::load4 with plain loads (__ldg is
// for global memory only).
#pragma once

namespace kf {

struct bf16 {
  unsigned short bits;
};
struct f16 {
  unsigned short bits;
};
struct Staged {
  float v;
};
static_assert(sizeof(Staged) == 4, "a Staged row is a float array: four of them make a float4");

// A matrix a generated functor reads at (row, col): p[row * ld + col].
template <class T> struct Matrix {
  using Element = T;
  const T *p;
  int ld;
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) {
  return __uint_as_float(static_cast<unsigned>(x.bits) << 16);
}
__device__ __forceinline__ float to_float(f16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}

template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float x) {
#if __CUDA_ARCH__ >= 800
  unsigned short h; // one instruction; NaN becomes the canonical NaN, as PyTorch's cast gives
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return bf16{h};
#else
  const unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep it a (quiet) NaN, truncation could make inf
    return bf16{static_cast<unsigned short>((u >> 16) | 0x40u)};
  // Round to nearest even: add half an ulp of bf16, plus one when the kept part is odd.
  return bf16{static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
#endif
}
template <> __device__ __forceinline__ f16 from_float<f16>(float x) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return f16{h};
}

// Loads as generated code reads: plain loads, which the compiler moves to the read-only path
// where it can prove that safe (const __restrict__ parameters).
template <class T> __device__ __forceinline__ float load(const T *p) { return to_float(*p); }
// Loads through the read-only (texture) path, as templates read tensors no thread writes.
__device__ __forceinline__ float ldg(const float *p) { return __ldg(p); }
template <class T> __device__ __forceinline__ float ldg(const T *p) {
  return to_float(T{__ldg(reinterpret_cast<const unsigned short *>(p))});
}
__device__ __forceinline__ float ldg(const Staged *p) { return p->v; }

template <class T> __device__ __forceinline__ void store(T *p, float v) { *p = from_float<T>(v); }

// in[I] = element (row, col) of f's I-th matrix (f.template matrix<I>(), a Matrix), for
// I0 <= I < F::MATRICES: the elements a generated functor's apply() takes.
template <int I0 = 0, class F>
__device__ __forceinline__ void load_matrix_elements(const F &f, int row, int col, float *in) {
  if constexpr (I0 < F::MATRICES) {
    const auto m = f.template matrix<I0>();
    in[I0] = load(m.p + (static_cast<long long>(row) * m.ld + col));
    load_matrix_elements<I0 + 1>(f, row, col, in);
  }
}

// The cast op (compiler/ir/ops.cpp): a value rounded to a type and held in fp32 again, as a
// store and a reload would give it; a bf16/f16 buffer stores it exactly.
__device__ __forceinline__ float round_to_f32(float x) { return x; }
__device__ __forceinline__ float round_to_bf16(float x) { return to_float(from_float<bf16>(x)); }
__device__ __forceinline__ float round_to_f16(float x) { return to_float(from_float<f16>(x)); }

// x rounded to tf32 (nearest, ties away from zero, as cuBLAS rounds its tf32 operands), as the
// bits a tensor core reads: ptxas may lower cvt.rna to an integer add of the half ulp and leave
// the low 13 bits unspecified, which the tensor cores ignore. sm_80 and later.
__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
// The same as an fp32 number whose low 13 mantissa bits are zero, which the tensor cores then
// read exactly; NaN stays NaN.
__device__ __forceinline__ float round_to_tf32(float x) {
  return __uint_as_float(to_tf32(x) & 0xffffe000u);
}

// Whether four elements from p can move as one access (16 bytes of float, 8 of bf16/f16).
template <class T> __device__ __forceinline__ bool vec4_aligned(const T *p) {
  return (reinterpret_cast<unsigned long long>(p) & (4 * sizeof(T) - 1)) == 0;
}

// Elements 4i .. 4i+3 of p; one access when vec (vec4_aligned(p)).
__device__ __forceinline__ float4 load4(const float *p, int i, bool vec) {
  if (vec)
    return __ldg(reinterpret_cast<const float4 *>(p) + i);
  return make_float4(__ldg(p + 4 * i), __ldg(p + 4 * i + 1), __ldg(p + 4 * i + 2),
                     __ldg(p + 4 * i + 3));
}
__device__ __forceinline__ float4 load4(const Staged *p, int i, bool vec) {
  if (vec)
    return reinterpret_cast<const float4 *>(p)[i];
  return make_float4(p[4 * i].v, p[4 * i + 1].v, p[4 * i + 2].v, p[4 * i + 3].v);
}
template <class T> __device__ __forceinline__ float4 load4(const T *p, int i, bool vec) {
  if (!vec)
    return make_float4(ldg(p + 4 * i), ldg(p + 4 * i + 1), ldg(p + 4 * i + 2), ldg(p + 4 * i + 3));
  const uint2 u = __ldg(reinterpret_cast<const uint2 *>(p) + i);
  return make_float4(to_float(T{static_cast<unsigned short>(u.x & 0xffffu)}),
                     to_float(T{static_cast<unsigned short>(u.x >> 16)}),
                     to_float(T{static_cast<unsigned short>(u.y & 0xffffu)}),
                     to_float(T{static_cast<unsigned short>(u.y >> 16)}));
}

__device__ __forceinline__ void store4(float *p, int i, float4 v, bool vec) {
  if (vec) {
    reinterpret_cast<float4 *>(p)[i] = v;
  } else {
    p[4 * i] = v.x;
    p[4 * i + 1] = v.y;
    p[4 * i + 2] = v.z;
    p[4 * i + 3] = v.w;
  }
}
template <class T> __device__ __forceinline__ void store4(T *p, int i, float4 v, bool vec) {
  const T a = from_float<T>(v.x), b = from_float<T>(v.y), c = from_float<T>(v.z),
          d = from_float<T>(v.w);
  if (vec) {
    reinterpret_cast<uint2 *>(p)[i] = make_uint2(a.bits | static_cast<unsigned>(b.bits) << 16,
                                                 c.bits | static_cast<unsigned>(d.bits) << 16);
  } else {
    p[4 * i] = a;
    p[4 * i + 1] = b;
    p[4 * i + 2] = c;
    p[4 * i + 3] = d;
  }
}

// Two consecutive elements (GEMM epilogues store column pairs); one access when vec (the
// address is aligned to 2 elements).
__device__ __forceinline__ void store2(float *p, float a, float b, bool vec) {
  if (vec) {
    *reinterpret_cast<float2 *>(p) = make_float2(a, b);
  } else {
    p[0] = a;
    p[1] = b;
  }
}
template <class T> __device__ __forceinline__ void store2(T *p, float a, float b, bool vec) {
  const T x = from_float<T>(a), y = from_float<T>(b);
  if (vec) {
    *reinterpret_cast<unsigned *>(p) = x.bits | static_cast<unsigned>(y.bits) << 16;
  } else {
    p[0] = x;
    p[1] = y;
  }
}
template <class T> __device__ __forceinline__ bool vec2_aligned(const T *p) {
  return (reinterpret_cast<unsigned long long>(p) & (2 * sizeof(T) - 1)) == 0;
}

// N consecutive elements as 16-byte accesses: p aligned to N elements, N * sizeof(T) a multiple
// of 16 (elementwise.cuh's vector path).
template <class T> __device__ __forceinline__ void unpack(unsigned w, float *x) {
  if constexpr (sizeof(T) == 4) {
    x[0] = __uint_as_float(w);
  } else {
    x[0] = to_float(T{static_cast<unsigned short>(w & 0xffffu)});
    x[1] = to_float(T{static_cast<unsigned short>(w >> 16)});
  }
}
template <class T> __device__ __forceinline__ unsigned pack(const float *x) {
  if constexpr (sizeof(T) == 4)
    return __float_as_uint(x[0]);
  else
    return from_float<T>(x[0]).bits | static_cast<unsigned>(from_float<T>(x[1]).bits) << 16;
}
template <int N, class T> __device__ __forceinline__ void load_vec(const T *p, float (&x)[N]) {
  constexpr int PER_WORD = 4 / sizeof(T), PER_CHUNK = 4 * PER_WORD;
  static_assert(N % PER_CHUNK == 0, "whole 16-byte accesses");
#pragma unroll
  for (int c = 0; c < N / PER_CHUNK; ++c) {
    const uint4 u = __ldg(reinterpret_cast<const uint4 *>(p) + c);
    unpack<T>(u.x, x + c * PER_CHUNK);
    unpack<T>(u.y, x + c * PER_CHUNK + PER_WORD);
    unpack<T>(u.z, x + c * PER_CHUNK + 2 * PER_WORD);
    unpack<T>(u.w, x + c * PER_CHUNK + 3 * PER_WORD);
  }
}
template <int N, class T> __device__ __forceinline__ void store_vec(T *p, const float (&x)[N]) {
  constexpr int PER_WORD = 4 / sizeof(T), PER_CHUNK = 4 * PER_WORD;
  static_assert(N % PER_CHUNK == 0, "whole 16-byte accesses");
#pragma unroll
  for (int c = 0; c < N / PER_CHUNK; ++c)
    reinterpret_cast<uint4 *>(p)[c] = make_uint4(
        pack<T>(x + c * PER_CHUNK), pack<T>(x + c * PER_CHUNK + PER_WORD),
        pack<T>(x + c * PER_CHUNK + 2 * PER_WORD), pack<T>(x + c * PER_CHUNK + 3 * PER_WORD));
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
