// The fp32 SIMT mainloop alone (templates/gemm_simt.cuh) against cuBLAS's SGEMM: C = A @ B^T
// (B [n, k], a Linear) or A @ B (B [k, n]), row-major, a plain store with statistics partials.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Itemplates bench/simt_sweep.cu \
//        -o simt_sweep -lcublas && ./simt_sweep [check|sweep|all|profile]
//
// check: odd shapes in both layouts against an fp64 reference, output NaN-poisoned first, bound
// 2e-6 (fp32 FMA accumulation), the partials; unaligned leading dimensions and base pointers
// (the 4-byte copies); split-K (S = 3) on 6 tiles. sweep: interleaved with cublasGemmEx
// (CUBLAS_COMPUTE_32F, no TF32), median of 50, L2 flushed, founding shapes, leading dimensions
// compile-time constants as in generated code (and once at run time). profile: each kernel twice
// at 1024 x 8192 x 8192, for ncu --launch-skip 2 --launch-count 2 -k regex:"simt_entry|gemm".
#include "gemm_harness.cuh"
#include "gemm_simt.cuh"

// LDA, LDB: the leading dimensions as constants, as kfuse's generated code has them where the
// weights fix K (0: the run-time arguments).
template <class Config, bool TransB, int LDA = 0, int LDB = 0>
__global__ void __launch_bounds__(Config::THREADS, Config::MIN_BLOCKS)
    simt_entry(kf::GemmShape s, int splits, const float *a, int lda, const float *b, int ldb,
               float *c, float *pmean, float *pm2, float *partials, unsigned *counters) {
  using Tiles = kf::TileScheduler<Config::BM, Config::BN, Config::GROUP_M>;
  kf::gemm_simt<Config, TransB>(
      s, Tiles(s, splits), a, LDA ? LDA : lda, b, LDB ? LDB : ldb,
      kf::GemmEpilogue<Identity>{Identity{}, c, s.n, pmean, pm2, partials, counters});
}

template <class Config, bool TransB, int LDA = 0, int LDB = 0>
void launch(int m, int n, int k, const float *a, const float *b, float *c, float *pmean, float *pm2,
            int splits = 1) {
  if ((LDA && LDA != k) || (LDB && LDB != (TransB ? k : n))) {
    std::fprintf(stderr, "constant leading dimensions %d, %d do not fit %d x %d x %d\n", LDA, LDB,
                 m, n, k);
    std::exit(1);
  }
  const int tiles = kf::ceil_div(m, Config::BM) * kf::ceil_div(n, Config::BN);
  if (splits > 1)
    g_split.reserve(static_cast<size_t>(tiles) * splits * Config::BM * Config::BN, tiles);
  simt_entry<Config, TransB, LDA, LDB><<<tiles * splits, Config::THREADS, Config::SMEM_BYTES>>>(
      kf::GemmShape{m, n, k}, splits, a, k, b, TransB ? k : n, c, pmean, pm2, g_split.partials,
      g_split.counters);
}

// offset: elements A and B start past their allocations' (16-byte aligned) base.
template <class Config, bool TransB>
bool check(int m, int n, int k, std::mt19937 &rng, int offset = 0, int splits = 1) {
  CHECK_CUDA(cudaFuncSetAttribute(simt_entry<Config, TransB>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, Config::SMEM_BYTES));
  const int tm = kf::ceil_div(m, Config::BM);
  float *a, *b, *c, *pmean, *pm2;
  double *ref;
  CHECK_CUDA(cudaMalloc(&a, sizeof(float) * (static_cast<size_t>(m) * k + offset) + 16));
  CHECK_CUDA(cudaMalloc(&b, sizeof(float) * (static_cast<size_t>(n) * k + offset) + 16));
  CHECK_CUDA(cudaMalloc(&c, sizeof(float) * m * n));
  CHECK_CUDA(cudaMalloc(&pmean, sizeof(float) * tm * n));
  CHECK_CUDA(cudaMalloc(&pm2, sizeof(float) * tm * n));
  CHECK_CUDA(cudaMalloc(&ref, sizeof(double) * m * n));
  float *pa = a + offset, *pb = b + offset;
  fill(pa, static_cast<size_t>(m) * k, rng, 1.0f);
  fill(pb, static_cast<size_t>(n) * k, rng, 1.0f / std::sqrt(static_cast<float>(std::max(k, 1))));
  CHECK_CUDA(cudaMemset(c, 0xff, sizeof(float) * m * n)); // NaN
  CHECK_CUDA(cudaMemset(pmean, 0xff, sizeof(float) * tm * n));
  launch<Config, TransB>(m, n, k, pa, pb, c, pmean, pm2, splits);
  CHECK_CUDA(cudaGetLastError());
  reference<<<dim3((n + 127) / 128, m), 128>>>(m, n, k, pa, pb, ref, TransB);
  CHECK_CUDA(cudaDeviceSynchronize());
  const OutputCheck r = check_output(c, ref, pmean, pm2, m, n, Config::BM);
  const bool ok = r.bad == 0 && r.rel <= 2e-6 && r.stats <= 1e-5;
  std::printf("check simt %3dx%-3d %s %5d x %5d x %5d offset %d S=%d: rel %.3e, unwritten %zu, "
              "stats %.3e  %s\n",
              Config::BM, Config::BN, TransB ? "A B^T" : "A B  ", m, n, k, offset, splits, r.rel,
              r.bad, r.stats, ok ? "PASS" : "FAIL");
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cudaFree(pmean);
  cudaFree(pm2);
  cudaFree(ref);
  return ok;
}

template <class Config, bool TransB, int LDA = 0, int LDB = 0>
void sweep(int m, int n, int k, cublasHandle_t h, Timer &timer, int splits = 1) {
  CHECK_CUDA(cudaFuncSetAttribute(simt_entry<Config, TransB, LDA, LDB>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, Config::SMEM_BYTES));
  std::mt19937 rng(7);
  const TimedOperands<float> ops(m, n, k, rng);
  float *a = ops.a, *b = ops.b, *c = ops.c;
  const float one = 1.0f, zero = 0.0f;
  // Row-major C [m, n] is column-major C^T [n, m] = op(B) A^T.
  const auto [ours, blas] = timer.median_ms(
      [&] { launch<Config, TransB, LDA, LDB>(m, n, k, a, b, c, nullptr, nullptr, splits); },
      [&] {
        cublasGemmEx(h, TransB ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b,
                     CUDA_R_32F, TransB ? k : n, a, CUDA_R_32F, k, &zero, c, CUDA_R_32F, n,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      });
  CHECK_CUDA(cudaGetLastError());
  const double flop = 2.0 * m * n * k;
  std::printf("sweep simt %3dx%-3d %s %5d x %5d x %5d S=%d%s: kfuse %.4f ms (%.1f TFLOP/s)  cuBLAS "
              "%.4f ms (%.1f TFLOP/s)  kfuse/cuBLAS %.2f\n",
              Config::BM, Config::BN, TransB ? "A B^T" : "A B  ", m, n, k, splits,
              LDA ? "" : " (ld at run time)", ours, flop / ours * 1e-9, blas, flop / blas * 1e-9,
              ours / blas);
}

template <class Config> bool check_config() {
  std::mt19937 rng(1);
  bool ok = true;
  const int shapes[][3] = {{1, 1, 1},        {5, 7, 0},         {128, 128, 32},    {300, 520, 200},
                           {129, 257, 1001}, {1000, 300, 1028}, {2048, 2048, 2048}};
  for (auto &s : shapes) {
    ok &= check<Config, true>(s[0], s[1], s[2], rng);
    ok &= check<Config, false>(s[0], s[1], s[2], rng);
  }
  ok &= check<Config, true>(300, 260, 516, rng, 1); // 4-byte copies: base off 16-byte alignment
  ok &= check<Config, false>(300, 260, 516, rng, 2);
  ok &= check<Config, true>(200, 300, 4096, rng, 0, 3); // split-K over several tiles
  ok &= check<Config, false>(200, 300, 4096, rng, 0, 3);
  return ok;
}

int main(int argc, char **argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  bool ok = true;
  if (mode == "check" || mode == "all") {
    ok &= check_config<kf::SimtWide>();
    ok &= check_config<kf::SimtNarrow>();
  }
  if (mode == "sweep" || mode == "all") {
    cublasHandle_t h;
    cublasCreate(&h);
    Timer timer;
    using kf::SimtNarrow, kf::SimtWide;
    sweep<SimtWide, true, 8192, 8192>(1024, 8192, 8192, h, timer);
    sweep<SimtWide, true>(1024, 8192, 8192, h, timer);
    sweep<SimtWide, true, 4096, 4096>(16384, 4096, 4096, h, timer);
    sweep<SimtWide, true, 4096, 4096>(4096, 4096, 4096, h, timer);
    sweep<SimtWide, false, 8192, 8192>(1024, 8192, 8192, h, timer);
    sweep<SimtNarrow, true, 8192, 8192>(1024, 8192, 8192, h, timer);
    // BERT-base's 768 features over 4096 rows, K split as kfuse's rule picks (S = 2) and not.
    for (int splits : {1, 2})
      sweep<SimtWide, true, 768, 768>(4096, 768, 768, h, timer, splits);
    // A batch of 128: the split counts kfuse's rule picks for each tile, and their neighbours.
    for (int splits : {1, 4, 8})
      sweep<SimtWide, true, 512, 512>(128, 1024, 512, h, timer, splits);
    for (int splits : {1, 2, 4, 8})
      sweep<SimtNarrow, true, 512, 512>(128, 1024, 512, h, timer, splits);
    for (int splits : {2, 4})
      sweep<SimtNarrow, false, 512, 1024>(128, 1024, 512, h, timer, splits);
  }
  if (mode == "profile") {
    cublasHandle_t h;
    cublasCreate(&h);
    using kf::SimtWide;
    const int m = 1024, n = 8192, k = 8192;
    CHECK_CUDA(cudaFuncSetAttribute(simt_entry<SimtWide, true, 8192, 8192>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    SimtWide::SMEM_BYTES));
    std::mt19937 rng(7);
    const TimedOperands<float> ops(m, n, k, rng);
    const float one = 1.0f, zero = 0.0f;
    for (int r = 0; r < 2; ++r) {
      launch<SimtWide, true, 8192, 8192>(m, n, k, ops.a, ops.b, ops.c, nullptr, nullptr);
      cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, ops.b, CUDA_R_32F, k, ops.a,
                   CUDA_R_32F, k, &zero, ops.c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
    }
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  std::printf("%s\n", ok ? "ALL PASS" : "SOME FAILED");
  return ok ? 0 : 1;
}
