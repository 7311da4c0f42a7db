// The host cost of kfuse::Pipeline::run: back-to-back runs of a 1-, 2- and 3-kernel pipeline
// at tiny sizes (64 -> 64 features, N = 8), where the GPU work is a few microseconds and the
// launch path is what is measured.
//
//   host_overhead [CALLS=200] [ROUNDS=5]     (from the repository root: it reads examples/)
//
// For each case and entry (the positional run, the by-name run) it prints the host µs per call
// (wall time of the loop that enqueues CALLS runs, median of ROUNDS) and the GPU µs per call
// (CUDA events around the same loop). Nothing synchronises inside a loop.
#include "kfuse/kfuse.h"
#include "runtime/device_buffer.h"
#include "runtime/driver.h"
#include "runtime/stream.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

using namespace kfuse;

namespace {

struct Case {
  const char *file;
  Mode mode;
  const char *label;
};

// The founding chains at 64 features: one GEMM with everything folded into its epilogue (1
// kernel), plus a softmax row pass (2), plus the train-mode column finalize (3).
const Case kCases[] = {
    {"examples/gemm_scale_bn.kf", Mode::Eval, "gemm_scale_bn eval"},
    {"examples/gemm_bn_scale_softmax.kf", Mode::Eval, "gemm_bn_scale_softmax eval"},
    {"examples/gemm_bn_scale_softmax.kf", Mode::Train, "gemm_bn_scale_softmax train"},
};
constexpr int64_t kRows = 8;

std::string tiny_text(const char *file) {
  std::ifstream in(file);
  if (!in)
    throw Error(std::string("cannot read ") + file + " (run from the repository root)");
  std::stringstream s;
  s << in.rdbuf();
  std::string text = s.str();
  for (size_t at = text.find("8192"); at != std::string::npos; at = text.find("8192", at))
    text.replace(at, 4, "64");
  return text;
}

struct Timing {
  double host_us, gpu_us;
};

// Median over `rounds` of: `calls` runs enqueued back to back.
Timing time_runs(const std::function<void()> &run, CUstream stream, int calls, int rounds) {
  rt::Driver &d = rt::Driver::get();
  rt::Event start, stop;
  for (int i = 0; i < 20; ++i) // first-run checks, module load, workspace: not timed
    run();
  d.check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  std::vector<double> host, gpu;
  for (int r = 0; r < rounds; ++r) {
    start.record(stream);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i)
      run();
    auto t1 = std::chrono::steady_clock::now();
    stop.record(stream);
    host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
    gpu.push_back(rt::elapsed_ms(start, stop) * 1e3 / calls);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return {median(host), median(gpu)};
}

int positive_arg(int argc, char **argv, int i, int fallback) {
  if (argc <= i)
    return fallback;
  int v = std::atoi(argv[i]);
  if (v < 1)
    throw Error(std::string("expected a positive count, got '") + argv[i] +
                "'; usage: host_overhead [CALLS] [ROUNDS]");
  return v;
}

} // namespace

int main(int argc, char **argv) {
  try {
    const int calls = positive_arg(argc, argv, 1, 200);
    const int rounds = positive_arg(argc, argv, 2, 5);
    rt::Driver &driver = rt::Driver::get();
    if (!driver.available()) {
      std::fprintf(stderr, "host_overhead needs a GPU: %s\n", driver.why_unavailable().c_str());
      return 1;
    }
    driver.make_current();
    rt::Stream stream;
    std::printf("### Host cost of Pipeline::run (64 -> 64 features, N = %lld)\n\n",
                static_cast<long long>(kRows));
    std::printf("Command: `build/host_overhead %d %d` on %s; median of %d rounds of %d "
                "back-to-back runs\n\n",
                calls, rounds, driver.device_name().c_str(), rounds, calls);
    std::printf(
        "| case | kernels | positional run host µs | GPU µs | by-name run host µs | GPU µs |\n");
    std::printf("| --- | --- | --- | --- | --- | --- |\n");
    for (const Case &c : kCases) {
      Options options;
      options.mode = c.mode;
      Pipeline p = Pipeline::from_string(tiny_text(c.file), c.file, options);
      const std::map<std::string, int64_t> dims = {{"N", kRows}};
      std::vector<rt::DeviceBuffer> memory;
      auto tensor = [&](std::vector<int64_t> shape) {
        size_t n = 1;
        for (int64_t e : shape)
          n *= static_cast<size_t>(e);
        memory.emplace_back(n * sizeof(float));
        memory.back().fill_bytes(0);
        return Tensor{reinterpret_cast<void *>(memory.back().ptr()), std::move(shape)};
      };
      for (const std::string &name : p.params())
        p.bind(name, tensor(p.shape(name, dims)));
      std::vector<Tensor> inputs, outputs;
      std::map<std::string, Tensor> named;
      for (const std::string &name : p.inputs()) {
        inputs.push_back(tensor(p.shape(name, dims)));
        named[name] = inputs.back();
      }
      for (size_t i = 0; i < p.output_count(); ++i)
        outputs.push_back(tensor(p.output_shape(i, dims)));
      CUstream s = stream.handle();
      Timing positional =
          time_runs([&] { p.run(inputs.data(), inputs.size(), outputs.data(), outputs.size(), s); },
                    s, calls, rounds);
      Timing by_name = time_runs([&] { p.run(named, outputs, s); }, s, calls, rounds);
      std::printf("| %s | %zu | %.2f | %.2f | %.2f | %.2f |\n", c.label, p.report().kernels.size(),
                  positional.host_us, positional.gpu_us, by_name.host_us, by_name.gpu_us);
    }
    return 0;
  } catch (const Error &e) {
    std::fprintf(stderr, "host_overhead: %s\n", e.what());
    return 1;
  }
}
