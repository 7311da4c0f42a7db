// What `kfuse bench` reports: the contenders' measurements beside the pipeline's figures,
// printed as a table (report_text) and as JSON (report_json, schema "kfuse-bench/1",
// docs/FORMATS.md). Built from plain values, so the unit tests check both without a GPU.
#pragma once

#include "compiler/ir/interpreter.h"
#include "runtime/gpu_timer.h"
#include "runtime/pipeline.h"
#include "tools/kfuse/bench_figures.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kfuse::tool {

// Fewer timed runs than this print a warning: a smoke test, not a measurement.
constexpr int kRecommendedIters = 100;

struct Contender {
  Contender(std::string k, std::string l) : key(std::move(k)), label(std::move(l)) {}
  std::string key;   // the JSON key
  std::string label; // the printed row name
  bool supported = true;
  std::string reason; // why not supported
  std::string error;  // what failed, when supported but not timed
  std::string note;
  std::optional<rt::TimingStats> timing;
  std::optional<int64_t> kernels;
  std::optional<int64_t> bytes_moved;
  std::optional<double> compile_ms;
  std::optional<bool> cache_hit;
  // The fused pipeline's GEMM kernels as its timed runs launched them (tile, split-K S, why).
  std::vector<rt::GemmLaunch> gemm_launches;
};

// The fused and unfused outputs of the last timed run against each other: both lie within the
// precision's error bound of the exact result, so they agree within twice that (`bound`).
struct Agreement {
  double max_abs = 0, rel = 0, bound = 0;
  // --backward: the unfused gradients are its backward's on the fused forward's saved values.
  bool gradients_given_saved = false;
  bool agrees() const { return rel <= bound; }
};

// Everything `kfuse bench` prints; measured fields are empty where nothing was measured.
struct BenchReport {
  std::string date, pipeline, file, mode;
  GemmArithmetic arithmetic;
  ir::DimBindings dims;
  std::string device, cublas_version;
  int compute_capability = 0, driver_version = 0;
  std::size_t l2_bytes = 0, flush_bytes = 0;
  int warmup = 0, iters = 0;
  std::vector<GemmShape> gemms;
  double flop = 0;
  Peak peak;
  int64_t min_bytes = 0;
  Contender fused{"fused", "fused (kfuse)"};
  Contender unfused{"unfused", "unfused (kfuse ops + cuBLAS GEMM)"};
  Contender cublas{"cublas_gemm", "cuBLAS GEMM alone"};
  std::optional<Agreement> agreement;

  std::optional<double> tflops(const Contender &c) const {
    if (!c.timing || gemms.empty() || c.timing->median <= 0)
      return std::nullopt;
    return flop / (c.timing->median * 1e-3) / 1e12;
  }
  std::optional<double> percent_of_peak(const Contender &c) const {
    std::optional<double> t = tflops(c);
    if (!t || peak.tflops <= 0)
      return std::nullopt;
    return 100.0 * *t / peak.tflops;
  }
  static std::optional<double> ratio(const Contender &a, const Contender &b) {
    if (!a.timing || !b.timing || b.timing->median <= 0)
      return std::nullopt;
    return a.timing->median / b.timing->median;
  }
  std::optional<double> gemm_at_peak_ms() const {
    if (gemms.empty() || peak.tflops <= 0)
      return std::nullopt;
    return flop / (peak.tflops * 1e12) * 1e3;
  }
  std::vector<const Contender *> contenders() const { return {&fused, &unfused, &cublas}; }
};

std::string report_text(const BenchReport &r);
// The schema is documented in docs/FORMATS.md ("kfuse-bench/1"); change both together.
std::string report_json(const BenchReport &r);

} // namespace kfuse::tool
