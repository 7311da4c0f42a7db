// Hopper (sm_90a) building blocks: mbarriers, TMA tile loads, wgmma descriptors and the wgmma
// instructions the sm90 mainloop issues. Device code only; the header is valid host C++ (the
// tensor-map type is all the host sees).
//
// Shared-memory tiles are K-major with the 128-byte swizzle that TMA writes and wgmma reads: a
// tile row holds 128 bytes of K (32 tf32 or 64 bf16/f16 values), eight rows form a 1024-byte
// swizzle atom, and a tile starts on a 1024-byte boundary. A wgmma k-step (8 tf32 or 16
// bf16/f16 values = 32 bytes) is addressed by advancing the descriptor's start address 32 bytes
// inside the row, which the hardware swizzles the same way TMA did.
#pragma once

#include "host_device.cuh"

namespace kf::sm90 {

// A CUtensorMap (cuda.h), which NVRTC cannot include: 128 opaque bytes, 64-byte aligned. The
// runtime encodes it with cuTensorMapEncodeTiled and passes it by value as a __grid_constant__
// kernel parameter.
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};

// What the tensor cores read: tf32 (fp32 data), bf16, f16, or fp32 data split into tf32 big
// and small parts multiplied three times (3xTF32, fp32-level accuracy).
enum class Operand { Tf32, Bf16, F16, Tf32x3 };

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

__device__ __forceinline__ unsigned smem_u32(const void *p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(unsigned long long *bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
// Makes the initialised barriers visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned long long *bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Returns once the phase of the given parity has completed (a fresh barrier is in phase 0, so
// waiting for parity 1 returns at once).
__device__ __forceinline__ void mbar_wait(unsigned long long *bar, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(smem_u32(bar)), "r"(parity)
                 : "memory");
  } while (!done);
}

__device__ __forceinline__ void prefetch_tensor_map(const TensorMap &map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(&map))
               : "memory");
}
// Loads the box at (inner, outer) element coordinates of a 2-D tensor map into shared memory;
// completion is counted in bytes on `bar`. Elements outside the tensor are written as zero.
__device__ __forceinline__ void tma_load_2d(void *dst, const TensorMap &map,
                                            unsigned long long *bar, int inner, int outer) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(smem_u32(dst)),
               "l"(reinterpret_cast<unsigned long long>(&map)), "r"(smem_u32(bar)), "r"(inner),
               "r"(outer)
               : "memory");
}

// Register budget per warpgroup role (sm_90a; the kernel must have a register cap at entry).
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// Named barrier over `threads` threads (a multiple of 32), id 1..15 (0 is __syncthreads).
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Descriptor of a K-major, 128-byte-swizzled shared-memory tile starting at p (1024-byte aligned
// for the tile; a k-step adds 32-byte offsets): start address >> 4 in bits 0-13, leading byte
// offset (unused by swizzled K-major layouts; 1) in 16-29, stride byte offset (1024 bytes between
// 8-row groups) >> 4 in 32-45, swizzle mode 1 (128 bytes) in 62-63.
__device__ __forceinline__ unsigned long long smem_descriptor(const void *p) {
  const unsigned long long addr = smem_u32(p);
  return ((addr & 0x3ffffull) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

// x = big + small: big is x rounded to tf32 (nearest, ties away from zero; its low 13 bits are
// zero, so the tensor cores read it exactly), small = x - big is exact in fp32 and has at most
// 12 significant bits, of which the tensor cores' truncation drops at most one. NaN and inf stay
// NaN/inf in the product (small becomes NaN).
__device__ __forceinline__ void split_tf32(float x, float &big, float &small) {
  big = __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
  small = x - big;
}

// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads
// (wgmma operands written by ordinary stores).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of accumulator registers across a wgmma
// fence or wait (the asynchronous instructions own them in between).
template <int R> __device__ __forceinline__ void fence_registers(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
    asm volatile("" : "+f"(d[i])::"memory");
}
// The same for A fragments in registers: kept unchanged (and their registers unused by anything
// else) until the wgmma reading them have completed.
template <int K> __device__ __forceinline__ void fence_registers(unsigned (&a)[K][4]) {
#pragma unroll
  for (int i = 0; i < K; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      asm volatile("" : "+r"(a[i][e])::"memory");
}

// The accumulator operands of a wgmma asm statement, d[0..63] or d[0..127] (read and written),
// and their text in the instruction: operands %0 .. %63 or %0 .. %127, braced.
// clang-format off
#define KF_WGMMA_D64 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), \
  "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), \
  "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), \
  "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
  "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), \
  "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
  "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), \
  "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), \
  "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define KF_WGMMA_D128 KF_WGMMA_D64, \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), \
  "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), \
  "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), \
  "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), \
  "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), \
  "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), \
  "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), \
  "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), \
  "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define KF_WGMMA_REGISTERS64 \
  "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
  "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
  "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
  "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define KF_WGMMA_D64_TEXT "{" KF_WGMMA_REGISTERS64 "}"
#define KF_WGMMA_D128_TEXT "{" KF_WGMMA_REGISTERS64 "," \
  "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
  "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
  "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
  "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127" "}"
// clang-format on

template <Operand Op, int N> struct Wgmma;

// D[64 x 128] (+)= A * B, tf32 operands from shared memory, fp32 accumulators.
template <> struct Wgmma<Operand::Tf32, 128> {
  static __device__ __forceinline__ void mma(float (&d)[64], unsigned long long desc_a,
                                             unsigned long long desc_b, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " KF_WGMMA_D64_TEXT ", "
                 "%64, %65, p, 1, 1;\n"
                 "}\n"
                 : KF_WGMMA_D64
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
};

// D[64 x 256] (+)= A * B, tf32 operands from shared memory, fp32 accumulators.
template <> struct Wgmma<Operand::Tf32, 256> {
  static __device__ __forceinline__ void mma(float (&d)[128], unsigned long long desc_a,
                                             unsigned long long desc_b, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 " KF_WGMMA_D128_TEXT ", "
                 "%128, %129, p, 1, 1;\n"
                 "}\n"
                 : KF_WGMMA_D128
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
};

// D[64 x 128] (+)= A * B, bf16 operands from shared memory, fp32 accumulators.
template <> struct Wgmma<Operand::Bf16, 128> {
  static __device__ __forceinline__ void mma(float (&d)[64], unsigned long long desc_a,
                                             unsigned long long desc_b, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " KF_WGMMA_D64_TEXT ", "
                 "%64, %65, p, 1, 1, 0, 0;\n"
                 "}\n"
                 : KF_WGMMA_D64
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
};

// D[64 x 256] (+)= A * B, bf16 operands from shared memory, fp32 accumulators.
template <> struct Wgmma<Operand::Bf16, 256> {
  static __device__ __forceinline__ void mma(float (&d)[128], unsigned long long desc_a,
                                             unsigned long long desc_b, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " KF_WGMMA_D128_TEXT ", "
                 "%128, %129, p, 1, 1, 0, 0;\n"
                 "}\n"
                 : KF_WGMMA_D128
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
};

// D[64 x 128] (+)= A * B, f16 operands from shared memory, fp32 accumulators.
template <> struct Wgmma<Operand::F16, 128> {
  static __device__ __forceinline__ void mma(float (&d)[64], unsigned long long desc_a,
                                             unsigned long long desc_b, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " KF_WGMMA_D64_TEXT ", "
                 "%64, %65, p, 1, 1, 0, 0;\n"
                 "}\n"
                 : KF_WGMMA_D64
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
};

// D[64 x 256] (+)= A * B, f16 operands from shared memory, fp32 accumulators.
template <> struct Wgmma<Operand::F16, 256> {
  static __device__ __forceinline__ void mma(float (&d)[128], unsigned long long desc_a,
                                             unsigned long long desc_b, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " KF_WGMMA_D128_TEXT ", "
                 "%128, %129, p, 1, 1, 0, 0;\n"
                 "}\n"
                 : KF_WGMMA_D128
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
};

// D[64 x N] (+)= A * B, tf32 operands, A from registers (the wgmma m64k8 A fragment: a[0] at
// row 16 * warp + g, column q; a[1] 8 rows below; a[2], a[3] 4 columns right of a[0], a[1];
// g = lane / 4, q = lane % 4, warp in its warpgroup), B from shared memory, fp32 accumulators.
template <int N> struct WgmmaTf32RegA;
template <> struct WgmmaTf32RegA<128> {
  static __device__ __forceinline__ void mma(float (&d)[64], const unsigned (&a)[4],
                                             unsigned long long desc_b, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " KF_WGMMA_D64_TEXT ", "
                 "{%64, %65, %66, %67}, %68, p, 1, 1;\n"
                 "}\n"
                 : KF_WGMMA_D64
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
};
template <> struct WgmmaTf32RegA<256> {
  static __device__ __forceinline__ void mma(float (&d)[128], const unsigned (&a)[4],
                                             unsigned long long desc_b, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 " KF_WGMMA_D128_TEXT ", "
                 "{%128, %129, %130, %131}, %132, p, 1, 1;\n"
                 "}\n"
                 : KF_WGMMA_D128
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
};

// Four 8 x 16-byte matrices of shared memory, one row address per lane (lanes 8i .. 8i + 7 give
// matrix i's rows): r[i] is the 32-bit word lane % 4 of row lane / 4 of matrix i. On a tf32
// tile, whose 16-byte chunks hold 4 values, that is the wgmma A fragment's element layout.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned smem_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address)
               : "memory");
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf::sm90
