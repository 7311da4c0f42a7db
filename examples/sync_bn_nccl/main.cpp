// Batchnorm statistics across GPUs (SyncBatchNorm) with NCCL: every GPU of this process runs the
// same pipeline, compiled with Options::batch_stats_ranks = the GPU count, on its own part of
// the batch, in a thread of its own. The pipeline's all-gather is ncclAllGather on the run's
// stream, so every GPU normalizes with the statistics of the whole batch and updates the same
// running statistics. The program then checks that against one pipeline run on the whole batch
// on GPU 0 and exits 1 where they disagree.
//
//   kfuse_sync_bn_nccl [FILE.kf] [ROWS_PER_GPU] [STEPS]
#include <kfuse/kfuse.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void check(ncclResult_t r, const char *what) {
  if (r != ncclSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, ncclGetErrorString(r));
    std::exit(1);
  }
}

size_t elements(const std::vector<int64_t> &shape) {
  size_t n = 1;
  for (int64_t e : shape)
    n *= static_cast<size_t>(e);
  return n;
}

std::vector<float> random_values(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

// A device copy of `host` on the current device.
kfuse::Tensor upload(const std::vector<float> &host, std::vector<int64_t> shape) {
  void *d = nullptr;
  check(cudaMalloc(&d, host.size() * sizeof(float)), "cudaMalloc");
  check(cudaMemcpy(d, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
        "cudaMemcpy");
  return {d, std::move(shape)};
}

std::vector<float> download(const kfuse::Tensor &t) {
  std::vector<float> host(elements(t.shape));
  check(cudaMemcpy(host.data(), t.data, host.size() * sizeof(float), cudaMemcpyDeviceToHost),
        "cudaMemcpy");
  return host;
}

// One GPU's share: its pipeline, tensors and inputs (the rows it holds of every step's batch).
struct Rank {
  kfuse::Pipeline pipeline;
  std::map<std::string, kfuse::Tensor> params; // params and state, the same values on every GPU
  std::vector<kfuse::Tensor> inputs, outputs;
};

// The pipeline on the current device with every param and state bound to the same values
// (seeded by name) and its first input `rows` rows.
Rank make_rank(const std::string &file, const kfuse::Options &options, int64_t rows) {
  Rank r{kfuse::Pipeline::from_file(file, options), {}, {}, {}};
  const std::map<std::string, int64_t> dims = {{"N", rows}};
  uint32_t seed = 1;
  for (const std::string &name : r.pipeline.params()) {
    const std::vector<int64_t> shape = r.pipeline.shape(name, dims);
    // Matrices small (a GEMM's weights), vectors around one (scales, running variances).
    const bool matrix = shape.size() > 1;
    r.params[name] = upload(
        random_values(elements(shape), seed++, matrix ? -0.02f : 0.5f, matrix ? 0.02f : 1.5f),
        shape);
    r.pipeline.bind(name, r.params[name]);
  }
  for (size_t i = 0; i < r.pipeline.output_count(); ++i) {
    const std::vector<int64_t> shape = r.pipeline.output_shape(i, dims);
    void *d = nullptr;
    check(cudaMalloc(&d, elements(shape) * sizeof(float)), "cudaMalloc");
    r.outputs.push_back({d, shape});
  }
  return r;
}

double max_relative(const std::vector<float> &got, const std::vector<float> &want) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) /
                                std::max(1.0, std::abs(static_cast<double>(want[i]))));
  return worst;
}

} // namespace

int main(int argc, char **argv) {
  const std::string file = argc > 1 ? argv[1] : "examples/gemm_bn_scale_softmax.kf";
  const int64_t rows = argc > 2 ? std::atoll(argv[2]) : 256;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 3;
  int gpus = 0;
  check(cudaGetDeviceCount(&gpus), "cudaGetDeviceCount");
  try {
    std::vector<ncclComm_t> comms(static_cast<size_t>(gpus));
    check(ncclCommInitAll(comms.data(), gpus, nullptr), "ncclCommInitAll");
    kfuse::Options sync;
    sync.batch_stats_ranks = gpus;
    std::vector<Rank> ranks;
    for (int g = 0; g < gpus; ++g) {
      check(cudaSetDevice(g), "cudaSetDevice");
      ranks.push_back(make_rank(file, sync, rows));
      // The all-gather of the batch statistics: NCCL on the run's own stream.
      ncclComm_t comm = comms[static_cast<size_t>(g)];
      ranks.back().pipeline.set_all_gather(
          [comm](const double *send, double *recv, size_t count, CUstream stream) {
            check(ncclAllGather(send, recv, count, ncclFloat64, comm,
                                reinterpret_cast<cudaStream_t>(stream)),
                  "ncclAllGather");
          });
    }
    check(cudaSetDevice(0), "cudaSetDevice");
    Rank whole = make_rank(file, {}, rows * gpus);
    const std::string input = whole.pipeline.inputs().at(0);
    const size_t row_floats = elements(whole.pipeline.shape(input, {{"N", 1}}));
    for (int step = 0; step < steps; ++step) {
      // Each step's batch: GPU g holds rows [g * rows, (g + 1) * rows).
      const std::vector<float> batch =
          random_values(row_floats * static_cast<size_t>(rows * gpus), 1000u + step, -1, 1);
      std::vector<std::thread> threads;
      for (int g = 0; g < gpus; ++g)
        threads.emplace_back([&, g] {
          check(cudaSetDevice(g), "cudaSetDevice");
          Rank &r = ranks[static_cast<size_t>(g)];
          const auto first = batch.begin() + static_cast<ptrdiff_t>(row_floats * rows * g);
          std::vector<int64_t> shape = whole.pipeline.shape(input, {{"N", rows}});
          kfuse::Tensor x = upload(std::vector<float>(first, first + row_floats * rows), shape);
          r.pipeline.run({{input, x}}, r.outputs, nullptr);
          check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
          check(cudaFree(x.data), "cudaFree");
        });
      for (std::thread &t : threads)
        t.join();
      check(cudaSetDevice(0), "cudaSetDevice");
      kfuse::Tensor x = upload(batch, whole.pipeline.shape(input, {{"N", rows * gpus}}));
      whole.pipeline.run({{input, x}}, whole.outputs, nullptr);
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      check(cudaFree(x.data), "cudaFree");
    }
    // Every GPU's output rows against the whole batch's, and every state against GPU 0's.
    double output_error = 0.0, state_error = 0.0, state_spread = 0.0;
    for (int g = 0; g < gpus; ++g) {
      check(cudaSetDevice(g), "cudaSetDevice");
      const Rank &r = ranks[static_cast<size_t>(g)];
      const std::vector<float> got = download(r.outputs[0]), all = download(whole.outputs[0]);
      const std::vector<float> want(all.begin() + static_cast<ptrdiff_t>(got.size()) * g,
                                    all.begin() + static_cast<ptrdiff_t>(got.size()) * (g + 1));
      output_error = std::max(output_error, max_relative(got, want));
      for (const auto &[name, t] : r.params) {
        const std::vector<float> mine = download(t), base = download(ranks[0].params.at(name));
        state_spread = std::max(state_spread, max_relative(mine, base));
        state_error = std::max(state_error, max_relative(mine, download(whole.params.at(name))));
      }
    }
    std::printf("%s on %d GPU%s, %lld rows each, %d steps: outputs vs the whole batch's %.2e, "
                "params and state vs the whole batch's %.2e, across GPUs %.2e\n",
                ranks[0].pipeline.name().c_str(), gpus, gpus == 1 ? "" : "s",
                static_cast<long long>(rows), steps, output_error, state_error, state_spread);
    for (ncclComm_t c : comms)
      ncclCommDestroy(c);
    return output_error <= 1e-4 && state_error <= 1e-5 && state_spread == 0.0 ? 0 : 1;
  } catch (const kfuse::Error &e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
