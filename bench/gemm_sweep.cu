// The sm90 mainloop alone (templates/gemm_sm90.cuh) against cuBLAS: C = A @ B^T, A [m, k] and
// B [n, k] row-major, a plain store; tf32 / bf16 / f16 operands, and 3xtf32 against SGEMM.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Itemplates bench/gemm_sweep.cu \
//        -o gemm_sweep -lcuda -lcublas && ./gemm_sweep
//        [check|sweep|configs|splitk|3xtf32|tf32n128|all]
//
// check: odd shapes, and split-K twice for the same bits, against an fp64 reference of the
// operands as the tensor cores read them, output NaN-poisoned first, bound 2e-5 (fp32
// accumulation), and the statistics partials. sweep: interleaved with cuBLAS, median of 50, L2
// flushed, M in {1024, 4096, 16384} x N = K in {1024, 4096, 8192}. configs: every tile, and
// 128 x 1024 x 512 at S = 1, 2, 4, 8. splitk: S on 8-64 tiles, short and long K
// (runtime/launch_geometry.cpp's rule). 3xtf32, tf32n128: 1024 x 8192 x 8192 alone on 3xtf32's
// tile or tf32's 128 x 128 one, for ncu.
#include "gemm_harness.cuh"
#include "gemm_sm90.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <random>
#include <vector>

// The shape of kfuse's folded-affine epilogue: per-column scale and shift read from memory.
struct Affine {
  const float *alpha, *beta;
  static constexpr int COLUMN_FLOATS = 2;
  static constexpr int MATRICES = 0;
  struct Column {
    float a, b;
  };
  __device__ Column column(int col) const { return {alpha[col], beta[col]}; }
  __device__ float apply(const Column &c, int, int, float acc, const float *) const {
    return acc * c.a + c.b;
  }
};

// The persistent scheduler of the kernel's tiles.
template <class Cfg> using Tiles = kf::TileScheduler<Cfg::BM, Cfg::BN, Cfg::GROUP_M>;

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    sm90_affine(const __grid_constant__ kf::sm90::TensorMap a,
                const __grid_constant__ kf::sm90::TensorMap b, kf::GemmShape s, float *c,
                const float *alpha, const float *beta) {
  kf::gemm_sm90<Cfg>(a, b, s, Tiles<Cfg>(s),
                     kf::GemmEpilogue<Affine>{Affine{alpha, beta}, c, s.n, nullptr, nullptr});
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, Cfg::MIN_BLOCKS)
    sm90_entry(const __grid_constant__ kf::sm90::TensorMap a,
               const __grid_constant__ kf::sm90::TensorMap b, kf::GemmShape s, int splits, float *c,
               float *pmean, float *pm2, float *partials, unsigned *counters) {
  kf::gemm_sm90<Cfg>(
      a, b, s, Tiles<Cfg>(s, splits),
      kf::GemmEpilogue<Identity>{Identity{}, c, s.n, pmean, pm2, partials, counters});
}

// x rounded to tf32, nearest, ties away from zero (inputs here are finite): what kfuse's
// per-bind rounding makes of a weight (B), and what the mainloop makes of A in registers.
__global__ void round_tf32(float *p, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n)
    p[i] = __uint_as_float((__float_as_uint(p[i]) + 0x1000u) & 0xffffe000u);
}

template <kf::sm90::Operand Op> struct Types;
template <> struct Types<kf::sm90::Operand::Tf32> {
  using T = float;
  static constexpr CUtensorMapDataType map = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  static constexpr cudaDataType blas = CUDA_R_32F;
  static constexpr const char *name = "tf32";
};
template <> struct Types<kf::sm90::Operand::Tf32x3> {
  using T = float;
  static constexpr CUtensorMapDataType map = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  static constexpr cudaDataType blas = CUDA_R_32F;
  static constexpr const char *name = "3xtf32";
};
template <> struct Types<kf::sm90::Operand::Bf16> {
  using T = __nv_bfloat16;
  static constexpr CUtensorMapDataType map = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  static constexpr cudaDataType blas = CUDA_R_16BF;
  static constexpr const char *name = "bf16";
};
template <> struct Types<kf::sm90::Operand::F16> {
  using T = __half;
  static constexpr CUtensorMapDataType map = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  static constexpr cudaDataType blas = CUDA_R_16F;
  static constexpr const char *name = "f16";
};

template <class Cfg> kf::sm90::TensorMap encode(const void *p, int rows, int k, int box_rows) {
  kf::sm90::TensorMap map;
  cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * Cfg::ELEMENT_BYTES};
  cuuint32_t box[2] = {static_cast<cuuint32_t>(Cfg::BK), static_cast<cuuint32_t>(box_rows)};
  cuuint32_t estr[2] = {1, 1};
  CHECK_CU(cuTensorMapEncodeTiled(
      reinterpret_cast<CUtensorMap *>(&map), Types<Cfg::OPERAND>::map, 2, const_cast<void *>(p),
      dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return map;
}

// splits <= ceil(k / BK): every split has a k-block.
template <class Cfg>
void launch(const kf::sm90::TensorMap &a, const kf::sm90::TensorMap &b, int m, int n, int k,
            float *c, float *pmean, float *pm2, int splits = 1) {
  const int tiles = kf::ceil_div(m, Cfg::BM) * kf::ceil_div(n, Cfg::BN);
  if (splits > 1)
    g_split.reserve(static_cast<size_t>(tiles) * splits * Cfg::BM * Cfg::BN, tiles);
  sm90_entry<Cfg>
      <<<std::min(tiles * splits, Cfg::MIN_BLOCKS * g_sms), Cfg::THREADS, Cfg::SMEM_BYTES>>>(
          a, b, kf::GemmShape{m, n, k}, splits, c, pmean, pm2, g_split.partials, g_split.counters);
}

template <class Cfg> bool check(int m, int n, int k, std::mt19937 &rng, int splits = 1) {
  using T = typename Types<Cfg::OPERAND>::T;
  CHECK_CUDA(cudaFuncSetAttribute(sm90_entry<Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  Cfg::SMEM_BYTES));
  T *a, *b;
  float *c, *pmean, *pm2;
  double *ref;
  const int tm = kf::ceil_div(m, Cfg::BM);
  CHECK_CUDA(cudaMalloc(&a, sizeof(T) * m * k + 16));
  CHECK_CUDA(cudaMalloc(&b, sizeof(T) * n * k + 16));
  CHECK_CUDA(cudaMalloc(&c, sizeof(float) * m * n));
  CHECK_CUDA(cudaMalloc(&pmean, sizeof(float) * tm * n));
  CHECK_CUDA(cudaMalloc(&pm2, sizeof(float) * tm * n));
  CHECK_CUDA(cudaMalloc(&ref, sizeof(double) * m * n));
  fill(a, static_cast<size_t>(m) * k, rng, 1.0f);
  fill(b, static_cast<size_t>(n) * k, rng, 1.0f / std::sqrt(static_cast<float>(k)));
  CHECK_CUDA(cudaMemset(c, 0xff, sizeof(float) * m * n)); // NaN
  CHECK_CUDA(cudaMemset(pmean, 0xff, sizeof(float) * tm * n));
  if (Cfg::OPERAND == kf::sm90::Operand::Tf32) // B comes rounded, as kfuse's weights do
    round_tf32<<<(n * static_cast<size_t>(k) + 255) / 256, 256>>>(reinterpret_cast<float *>(b),
                                                                  static_cast<size_t>(n) * k);
  auto ma = encode<Cfg>(a, m, k, Cfg::BM), mb = encode<Cfg>(b, n, k, Cfg::BN);
  launch<Cfg>(ma, mb, m, n, k, c, pmean, pm2, splits);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  // Split-K sums its partial tiles in a fixed order: a second run gives the same bits.
  bool repeats = true;
  if (splits > 1) {
    std::vector<float> first(static_cast<size_t>(m) * n), second(first.size());
    CHECK_CUDA(cudaMemcpy(first.data(), c, first.size() * 4, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemset(c, 0xff, sizeof(float) * m * n));
    launch<Cfg>(ma, mb, m, n, k, c, pmean, pm2, splits);
    CHECK_CUDA(cudaMemcpy(second.data(), c, second.size() * 4, cudaMemcpyDeviceToHost));
    repeats = std::memcmp(first.data(), second.data(), first.size() * 4) == 0;
  }
  if (Cfg::OPERAND == kf::sm90::Operand::Tf32) // A as the mainloop rounds it
    round_tf32<<<(m * static_cast<size_t>(k) + 255) / 256, 256>>>(reinterpret_cast<float *>(a),
                                                                  static_cast<size_t>(m) * k);
  reference<<<dim3((n + 127) / 128, m), 128>>>(m, n, k, a, b, ref);
  CHECK_CUDA(cudaDeviceSynchronize());
  const OutputCheck r = check_output(c, ref, pmean, pm2, m, n, Cfg::BM);
  // 3xTF32 against exact fp32 operands: fp32-level accuracy.
  const double bound = Cfg::OPERAND == kf::sm90::Operand::Tf32x3 ? 2e-6 : 2e-5;
  bool ok = r.bad == 0 && r.rel <= bound && r.stats <= 1e-5 && repeats;
  std::printf("check %-4s %3dx%3dx%d %5d x %5d x %5d S=%d: rel %.3e (bound %.0e), unwritten %zu, "
              "stats %.3e%s  %s\n",
              Types<Cfg::OPERAND>::name, Cfg::BM, Cfg::BN, Cfg::MIN_BLOCKS, m, n, k, splits, r.rel,
              bound, r.bad, r.stats, repeats ? "" : ", NOT REPEATABLE", ok ? "PASS" : "FAIL");
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cudaFree(pmean);
  cudaFree(pm2);
  cudaFree(ref);
  return ok;
}

template <class Cfg>
void sweep(int m, int n, int k, cublasHandle_t h, Timer &timer, int splits = 1) {
  using T = typename Types<Cfg::OPERAND>::T;
  CHECK_CUDA(cudaFuncSetAttribute(sm90_entry<Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  Cfg::SMEM_BYTES));
  std::mt19937 rng(7);
  const TimedOperands<T> ops(m, n, k, rng);
  T *a = ops.a, *b = ops.b;
  float *c = ops.c;
  auto ma = encode<Cfg>(a, m, k, Cfg::BM), mb = encode<Cfg>(b, n, k, Cfg::BN);
  const float one = 1.0f, zero = 0.0f;
  // tf32 against cuBLAS's tf32 GEMM, 3xtf32 against its fp32 SGEMM, bf16/f16 against its own.
  cublasComputeType_t ct =
      Cfg::OPERAND == kf::sm90::Operand::Tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  // Row-major C[m,n] = A[m,k] B[n,k]^T is column-major C^T[n,m] = B^T... : op(B)=T on B (k x n
  // col-major).
  const auto [ours, blas] =
      timer.median_ms([&] { launch<Cfg>(ma, mb, m, n, k, c, nullptr, nullptr, splits); },
                      [&] {
                        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, b,
                                     Types<Cfg::OPERAND>::blas, k, a, Types<Cfg::OPERAND>::blas, k,
                                     &zero, c, CUDA_R_32F, n, ct, CUBLAS_GEMM_DEFAULT);
                      });
  CHECK_CUDA(cudaGetLastError());
  double flop = 2.0 * m * n * k;
  if (Cfg::OPERAND == kf::sm90::Operand::Tf32 && m == 1024 && n == 8192) {
    CHECK_CUDA(cudaFuncSetAttribute(sm90_affine<Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    Cfg::smem_bytes(2)));
    float *ab;
    CHECK_CUDA(cudaMalloc(&ab, sizeof(float) * 2 * n));
    fill(ab, 2 * static_cast<size_t>(n), rng, 1.0f);
    const int tiles = kf::ceil_div(m, Cfg::BM) * kf::ceil_div(n, Cfg::BN);
    const auto [identity, affine] = timer.median_ms(
        [&] { launch<Cfg>(ma, mb, m, n, k, c, nullptr, nullptr, splits); },
        [&] {
          sm90_affine<Cfg>
              <<<std::min(tiles, Cfg::MIN_BLOCKS * g_sms), Cfg::THREADS, Cfg::smem_bytes(2)>>>(
                  ma, mb, kf::GemmShape{m, n, k}, c, ab, ab + n);
        });
    std::printf("epilogue %5d x %5d x %5d: identity %.3f ms, affine %.3f ms\n", m, n, k, identity,
                affine);
    cudaFree(ab);
  }
  std::printf("sweep %-4s %3dx%3dx%d %5d x %5d x %5d S=%d: kfuse %.3f ms (%.0f TFLOP/s)  cuBLAS "
              "%.3f ms (%.0f TFLOP/s)  ratio %.2f\n",
              Types<Cfg::OPERAND>::name, Cfg::BM, Cfg::BN, Cfg::MIN_BLOCKS, m, n, k, splits, ours,
              flop / ours * 1e-9, blas, flop / blas * 1e-9, blas / ours);
}

int main(int argc, char **argv) {
  std::string mode = argc > 1 ? argv[1] : "check";
  CHECK_CUDA(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
  using Tf32 = kf::Sm90Gemm<kf::sm90::Operand::Tf32, 256>;
  using Tf32n128 = kf::Sm90Gemm<kf::sm90::Operand::Tf32, 128>;
  using Bf16 = kf::Sm90Gemm<kf::sm90::Operand::Bf16, 256>;
  using F16 = kf::Sm90Gemm<kf::sm90::Operand::F16, 256>;
  using Tf32x3 = kf::Sm90Gemm<kf::sm90::Operand::Tf32x3, 128>;
  using Tf32m64 = kf::Sm90Gemm<kf::sm90::Operand::Tf32, 256, 64>;
  using Tf32m64n128x2 = kf::Sm90Gemm<kf::sm90::Operand::Tf32, 128, 64, 2>;
  using Bf16m64n128x2 = kf::Sm90Gemm<kf::sm90::Operand::Bf16, 128, 64, 2>;
  using Bf16n128 = kf::Sm90Gemm<kf::sm90::Operand::Bf16, 128>;
  bool ok = true;
  if (mode == "check" || mode == "all") {
    std::mt19937 rng(1);
    const int shapes[][3] = {{1, 8, 4},         {128, 256, 32},   {300, 520, 200},
                             {1000, 300, 1028}, {129, 257, 4096}, {2048, 2048, 2048}};
    for (auto &s : shapes) {
      ok &= check<Tf32>(s[0], s[1], s[2], rng);
      ok &= check<Tf32n128>(s[0], s[1], s[2], rng);
      ok &= check<Bf16>(s[0], s[1], (s[2] + 7) / 8 * 8, rng);
      ok &= check<F16>(s[0], s[1], (s[2] + 7) / 8 * 8, rng);
      ok &= check<Tf32x3>(s[0], s[1], s[2], rng);
      ok &= check<Tf32m64>(s[0], s[1], s[2], rng);
      ok &= check<Tf32m64n128x2>(s[0], s[1], s[2], rng);
      ok &= check<Bf16m64n128x2>(s[0], s[1], (s[2] + 7) / 8 * 8, rng);
    }
    // Split-K on 1 to 8 tiles: {m, n, k, S}, S at most the k-blocks of the deepest BK (64).
    const int split_shapes[][4] = {
        {1, 5, 512, 8}, {17, 300, 4104}, {128, 1024, 512, 4}, {130, 1024, 512, 3}};
    for (auto &s : split_shapes) {
      const int splits = s[3] > 0 ? s[3] : 8;
      ok &= check<Tf32>(s[0], s[1], s[2], rng, splits);
      ok &= check<Tf32x3>(s[0], s[1], s[2], rng, splits);
      ok &= check<Tf32m64n128x2>(s[0], s[1], s[2], rng, splits);
      ok &= check<Bf16m64n128x2>(s[0], s[1], s[2], rng, splits);
      ok &= check<F16>(s[0], s[1], s[2], rng, splits);
    }
  }
  if (mode == "configs") {
    cublasHandle_t h;
    cublasCreate(&h);
    Timer timer;
    // A batch of 128 through 512 -> 1024 features: 16 tiles of 64 x 128 without split-K.
    for (int splits : {1, 2, 4, 8}) {
      sweep<Tf32m64n128x2>(128, 1024, 512, h, timer, splits);
      sweep<Bf16m64n128x2>(128, 1024, 512, h, timer, splits);
      sweep<Tf32x3>(128, 1024, 512, h, timer, splits);
    }
    const int shapes[][3] = {
        {128, 1024, 512}, {1024, 1024, 1024}, {1024, 8192, 8192}, {16384, 4096, 4096}};
    for (auto &s : shapes) {
      sweep<Tf32>(s[0], s[1], s[2], h, timer);
      sweep<Tf32n128>(s[0], s[1], s[2], h, timer);
      sweep<Tf32m64>(s[0], s[1], s[2], h, timer);
      sweep<Tf32m64n128x2>(s[0], s[1], s[2], h, timer);
      sweep<Bf16>(s[0], s[1], s[2], h, timer);
      sweep<Bf16n128>(s[0], s[1], s[2], h, timer);
      sweep<Bf16m64n128x2>(s[0], s[1], s[2], h, timer);
    }
  }
  if (mode == "splitk") {
    cublasHandle_t h;
    cublasCreate(&h);
    Timer timer;
    // Shapes with 8-64 output tiles and K from 16 to 256 k-blocks: where split-K's S pays.
    const int shapes[][3] = {
        {128, 1024, 512}, {128, 1024, 4096}, {32, 4096, 4096}, {256, 1024, 8192}};
    for (auto &s : shapes)
      for (int splits : {1, 2, 4, 8}) {
        sweep<Tf32>(s[0], s[1], s[2], h, timer, splits);
        sweep<Tf32m64n128x2>(s[0], s[1], s[2], h, timer, splits);
        sweep<Bf16>(s[0], s[1], s[2], h, timer, splits);
        sweep<Bf16m64n128x2>(s[0], s[1], s[2], h, timer, splits);
        sweep<Tf32x3>(s[0], s[1], s[2], h, timer, splits);
      }
  }
  if (mode == "3xtf32" || mode == "tf32n128") { // one case, for profilers
    cublasHandle_t h;
    cublasCreate(&h);
    Timer timer;
    if (mode == "3xtf32")
      sweep<Tf32x3>(1024, 8192, 8192, h, timer);
    else
      sweep<Tf32n128>(1024, 8192, 8192, h, timer);
  }
  if (mode == "sweep" || mode == "all") {
    cublasHandle_t h;
    cublasCreate(&h);
    Timer timer;
    for (int m : {1024, 4096, 16384})
      for (int nk : {1024, 4096, 8192}) {
        sweep<Tf32>(m, nk, nk, h, timer);
        sweep<Bf16>(m, nk, nk, h, timer);
      }
    sweep<Tf32n128>(1024, 8192, 8192, h, timer);
    sweep<Tf32x3>(1024, 8192, 8192, h, timer);
    sweep<Tf32x3>(16384, 4096, 4096, h, timer);
  }
  std::printf("%s\n", ok ? "ALL PASS" : "SOME FAILED");
  return ok ? 0 : 1;
}
