// Embedding kfuse in a C++ program: compile the pipeline once at start, bind its
// parameters and state to device memory, then run it in a loop on a stream.
//
//   kfuse_embed [FILE.kf] [N] [train|eval]
#include <kfuse/kfuse.h>

#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

size_t elements(const std::vector<int64_t> &shape) {
  size_t n = 1;
  for (int64_t e : shape)
    n *= static_cast<size_t>(e);
  return n;
}

// A device tensor of `shape` filled with values from `dist` (positive ones for variances).
kfuse::Tensor device_tensor(const std::vector<int64_t> &shape, std::mt19937 &rng, float lo,
                            float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> host(elements(shape));
  for (float &v : host)
    v = dist(rng);
  void *d = nullptr;
  check(cudaMalloc(&d, host.size() * sizeof(float)), "cudaMalloc");
  check(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  return {d, shape};
}

} // namespace

int main(int argc, char **argv) {
  std::string file = argc > 1 ? argv[1] : "examples/gemm_bn_scale_softmax.kf";
  int64_t n = argc > 2 ? std::atoll(argv[2]) : 1024;
  kfuse::Options options;
  options.mode =
      argc > 3 && std::string(argv[3]) == "eval" ? kfuse::Mode::Eval : kfuse::Mode::Train;
  try {
    // 1. Compile at start: parse, plan, generate, NVRTC (or the disk cache).
    kfuse::Pipeline pipeline = kfuse::Pipeline::from_file(file, options);
    std::printf("%s: %zu kernels, compiled in %.1f ms (%s)\n", pipeline.name().c_str(),
                pipeline.report().kernels.size(), pipeline.report().milliseconds,
                pipeline.report().cache_hit ? "cache hit" : "NVRTC");
    std::map<std::string, int64_t> dims = {{"N", n}};

    // 2. Bind params and state (running variances positive), once.
    std::mt19937 rng(42);
    for (const std::string &name : pipeline.params()) {
      bool variance = name.find("var") != std::string::npos;
      pipeline.bind(name, device_tensor(pipeline.shape(name, dims), rng, variance ? 0.5f : -0.05f,
                                        variance ? 1.5f : 0.05f));
    }
    std::map<std::string, kfuse::Tensor> inputs;
    for (const std::string &name : pipeline.inputs())
      inputs[name] = device_tensor(pipeline.shape(name, dims), rng, -1.0f, 1.0f);
    std::vector<kfuse::Tensor> outputs;
    for (size_t i = 0; i < pipeline.output_count(); ++i)
      outputs.push_back(device_tensor(pipeline.output_shape(i, dims), rng, 0.0f, 0.0f));

    // 3. Run in a loop on a stream.
    cudaStream_t stream;
    check(cudaStreamCreate(&stream), "cudaStreamCreate");
    cudaEvent_t start, stop;
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    pipeline.run(inputs, outputs, stream); // warm-up: loads the module
    const int iterations = 20;
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int i = 0; i < iterations; ++i)
      pipeline.run(inputs, outputs, stream);
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    std::vector<float> row(static_cast<size_t>(outputs[0].shape.back()));
    check(
        cudaMemcpy(row.data(), outputs[0].data, row.size() * sizeof(float), cudaMemcpyDeviceToHost),
        "cudaMemcpy");
    double sum = 0;
    for (float v : row)
      sum += v;
    std::printf("N=%lld: %.3f ms per run over %d runs; first output row sums to %.6f\n",
                static_cast<long long>(n), ms / iterations, iterations, sum);
  } catch (const kfuse::Error &e) {
    std::fprintf(stderr, "kfuse: %s\n", e.what());
    return 1;
  }
  return 0;
}
