// kfuse bench F.kf --dim N=... [--mode train|eval] [--precision fp32|tf32] [--json FILE]
//                  [--iters 100] [--warmup 10] [--seed S] [--arch sm_90a] [--max-split-k S]
//
// --max-split-k 1 times the fused pipeline with split-K off (GEMMs with few output tiles
// otherwise split K across idle SMs), to compare with the default.
//
// Times three contenders in one process, on one stream, over the same device tensors:
//   fused        the kfuse pipeline as planned;
//   unfused      the same pipeline lowered unfused (LowerOptions::fuse false: one kfuse
//                kernel per op), its GEMMs run by cuBLAS at the requested precision;
//   cublas_gemm  the pipeline's GEMMs alone through cuBLAS: the floor a fused chain chases.
// Every contender is timed the same way (bench_timer.h). A contender that cannot run says so
// ("fused: not supported at tf32 (...)"); no number is ever made up. docs/PERF.md describes
// the printed table and the --json schema.
#include "compiler/dsl/parser.h"
#include "compiler/ir/interpreter.h"
#include "compiler/lower.h"
#include "compiler/plan/plan_printer.h"
#include "compiler/plan/planner.h"
#include "kfuse/kfuse.h"
#include "runtime/device_buffer.h"
#include "runtime/driver.h"
#include "runtime/error.h"
#include "runtime/host_elements.h"
#include "runtime/pipeline.h"
#include "runtime/stream.h"
#include "runtime/tensor_checks.h"
#include "tools/kfuse/bench_timer.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"
#include "tools/kfuse/cublas.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

namespace kfuse::tool {
namespace {

constexpr const char *kUsage =
    "usage: kfuse bench FILE.kf --dim NAME=VALUE... [--mode train|eval] [--precision "
    "fp32|3xtf32|tf32]\n"
    "                   [--json FILE] [--iters 100] [--warmup 10] [--seed 1] [--arch sm_XX]\n";

constexpr int kRecommendedIters = 100;

// ---------------------------------------------------------------- host-side figures

struct GemmShape {
  bool trans_b = false; // linear: C = A @ B^T with B [n, k]; matmul: C = A @ B with B [k, n]
  int64_t m = 0, n = 0, k = 0;
  ir::ValueId a = -1, b = -1;
  double flop() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  }
};

int64_t tensor_bytes(const ir::Graph &g, ir::ValueId id, const ir::DimBindings &dims) {
  int64_t b = g[id].type.dtype == ir::DType::F32 ? 4 : 2;
  for (int64_t e : ir::concrete_shape(g[id].type, dims))
    b *= e;
  return b;
}

std::vector<GemmShape> gemm_shapes(const ir::Graph &g, const ir::DimBindings &dims) {
  std::vector<GemmShape> out;
  for (size_t i = 0; i < g.values.size(); ++i) {
    const ir::Value &v = g.values[i];
    if (!v.is_op() || (v.op != ir::OpKind::Linear && v.op != ir::OpKind::Matmul))
      continue;
    GemmShape s;
    s.trans_b = v.op == ir::OpKind::Linear;
    s.a = v.args.at(0);
    s.b = v.args.at(1);
    std::vector<int64_t> a = ir::concrete_shape(g[s.a].type, dims);
    std::vector<int64_t> b = ir::concrete_shape(g[s.b].type, dims);
    s.m = a.at(0);
    s.k = a.at(1);
    s.n = s.trans_b ? b.at(0) : b.at(1);
    out.push_back(s);
  }
  return out;
}

// Each declared tensor that something reads, read once; each output written once; each
// state the pipeline updates (the plan's bn_update effects) written once.
int64_t minimum_bytes(const ir::Graph &g, const plan::Plan &p, const ir::DimBindings &dims) {
  int64_t total = 0;
  std::vector<std::vector<ir::ValueId>> users = g.users();
  for (size_t i = 0; i < g.values.size(); ++i)
    if (!g.values[i].is_op() && !users[i].empty())
      total += tensor_bytes(g, static_cast<ir::ValueId>(i), dims);
  std::set<ir::ValueId> outputs(g.outputs.begin(), g.outputs.end());
  for (ir::ValueId o : outputs)
    total += tensor_bytes(g, o, dims);
  std::set<ir::ValueId> updated;
  for (const ir::Value &v : p.graph.values)
    if (v.is_effect()) {
      updated.insert(v.args.at(0));
      updated.insert(v.args.at(1));
    }
  for (ir::ValueId s : updated)
    total += tensor_bytes(p.graph, s, dims);
  return total;
}

// Dense datasheet peaks. The H200 is the H100 SXM's chip with more memory; both report
// "H100"/"H200" in their names, the PCIe and NVL boards say so.
struct Peak {
  double tflops = 0; // 0: unknown for this device
  std::string assumed;
};

Peak assumed_peak(const std::string &device, bool tf32) {
  auto has = [&](const char *s) { return device.find(s) != std::string::npos; };
  const char *unit = tf32 ? "tf32 tensor core" : "fp32 FMA";
  if (has("H100") && has("PCIe"))
    return {tf32 ? 378.0 : 51.2, fmt::format("{}, H100 PCIe dense, datasheet", unit)};
  if (has("H100") && has("NVL"))
    return {tf32 ? 417.5 : 60.0, fmt::format("{}, H100 NVL dense, datasheet", unit)};
  if (has("H100") || has("H200"))
    return {tf32 ? 495.0 : 67.0, fmt::format("{}, H100/H200 SXM dense, datasheet", unit)};
  return {0, fmt::format("unknown: no {} datasheet peak is built in for '{}'", unit, device)};
}

// ---------------------------------------------------------------- device data

// Deterministic uniform values in [lo, hi): splitmix64, one stream per tensor.
void fill_uniform(std::vector<float> &v, uint64_t seed, float lo, float hi) {
  uint64_t state = seed;
  for (float &x : v) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f); // 24 random bits
    x = lo + (hi - lo) * u;
  }
}

struct DeviceTensor {
  std::vector<int64_t> shape;
  rt::DeviceBuffer buffer;
  ir::DType dtype = ir::DType::F32;

  size_t numel() const {
    size_t n = 1;
    for (int64_t e : shape)
      n *= static_cast<size_t>(e);
    return n;
  }
  Tensor tensor() const {
    return Tensor{reinterpret_cast<void *>(buffer.ptr()), shape, rt::api_dtype(dtype)};
  }
  float *data() const { return reinterpret_cast<float *>(buffer.ptr()); }
};

DeviceTensor make_tensor(std::vector<int64_t> shape, ir::DType dtype = ir::DType::F32) {
  DeviceTensor t;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.buffer = rt::DeviceBuffer(t.numel() * static_cast<size_t>(ir::dtype_bytes(dtype)));
  return t;
}

// Values shaped like a trained layer's, so no contender sees zeros or overflow: weights
// scaled by 1/sqrt(fan_in) as PyTorch's Linear init, states (running variances among them)
// positive. The timing of fp32/tf32 arithmetic does not depend on the values.
DeviceTensor random_tensor(const ir::Value &v, const ir::DimBindings &dims, uint64_t seed) {
  DeviceTensor t = make_tensor(ir::concrete_shape(v.type, dims), v.type.dtype);
  std::vector<float> host(t.numel());
  float lo = -1, hi = 1;
  if (v.kind == ir::ValueKind::State) {
    lo = 0.5f;
    hi = 1.5f;
  } else if (v.kind == ir::ValueKind::Param && t.shape.size() == 2) {
    hi = 1.0f / std::sqrt(static_cast<float>(t.shape[1]));
    lo = -hi;
  } else if (v.kind == ir::ValueKind::Param) {
    lo = 0.5f;
    hi = 1.5f;
  }
  fill_uniform(host, seed, lo, hi);
  std::vector<uint8_t> bytes =
      rt::encode_elements(std::vector<double>(host.begin(), host.end()), t.dtype);
  t.buffer.upload(bytes.data(), bytes.size());
  return t;
}

std::vector<double> download(const DeviceTensor &t) {
  std::vector<uint8_t> bytes(t.numel() * static_cast<size_t>(ir::dtype_bytes(t.dtype)));
  t.buffer.download(bytes.data(), bytes.size());
  return rt::decode_elements(bytes.data(), t.numel(), t.dtype);
}

// ---------------------------------------------------------------- contenders

struct Contender {
  Contender(std::string k, std::string l) : key(std::move(k)), label(std::move(l)) {}
  std::string key;   // the JSON key
  std::string label; // the printed row name
  bool supported = true;
  std::string reason; // why not supported
  std::string error;  // what failed, when supported but not timed
  std::string note;
  std::optional<TimingStats> timing;
  std::optional<int64_t> kernels;
  std::optional<int64_t> bytes_moved;
  std::optional<double> compile_ms;
  std::optional<bool> cache_hit;
};

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

// ---------------------------------------------------------------- JSON

std::string json_string(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20)
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
      else
        out += c;
    }
  }
  return out + "\"";
}

std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{:.9g}", v) : "null"; }
template <class T> std::string json_optional(const std::optional<T> &v) {
  if (!v)
    return "null";
  if constexpr (std::is_same_v<T, bool>)
    return *v ? "true" : "false";
  else if constexpr (std::is_same_v<T, std::string>)
    return json_string(*v);
  else if constexpr (std::is_floating_point_v<T>)
    return json_number(*v);
  else
    return fmt::format("{}", *v);
}
std::string json_optional_text(const std::string &s) { return s.empty() ? "null" : json_string(s); }

std::string json_list(const std::vector<std::string> &items) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i)
    s += (i ? ", " : "") + items[i];
  return s + "]";
}

// ---------------------------------------------------------------- the report

struct Agreement {
  double max_abs = 0, rel = 0;
};

// Everything `kfuse bench` prints; measured fields are empty where nothing was measured.
struct BenchReport {
  std::string date, pipeline, file, mode, precision;
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

std::string report_text(const BenchReport &r) {
  std::string dims_text;
  for (const auto &[name, value] : r.dims)
    dims_text += fmt::format("{}{}={}", dims_text.empty() ? "" : " ", name, value);
  std::string out;
  out += fmt::format("kfuse bench: {} ({}) {}, mode {}, precision {}\n", r.pipeline, r.file,
                     dims_text, r.mode, r.precision);
  out += fmt::format("device: {} (sm_{}), CUDA driver API {}.{}, cuBLAS {}\n", r.device,
                     r.compute_capability, r.driver_version / 1000, r.driver_version % 1000 / 10,
                     r.cublas_version.empty() ? "unavailable" : r.cublas_version);
  out += fmt::format(
      "timing: CUDA events, {} warm-up runs, median of {} runs; before each run a {} buffer "
      "({} the {} L2) is written with cuMemsetD32Async, outside the events\n",
      r.warmup, r.iters, mib(static_cast<int64_t>(r.flush_bytes)),
      r.l2_bytes ? fmt::format("{:.1f}x",
                               static_cast<double>(r.flush_bytes) / static_cast<double>(r.l2_bytes))
                 : "covering",
      mib(static_cast<int64_t>(r.l2_bytes)));
  if (r.iters < kRecommendedIters)
    out += fmt::format("warning: fewer than {} timed runs: a smoke test, not a measurement\n",
                       kRecommendedIters);
  if (r.gemms.empty()) {
    out += "GEMM: none, so no TFLOP/s\n";
  } else {
    std::string shapes;
    for (const GemmShape &s : r.gemms)
      shapes += fmt::format("{}{}x{}x{}", shapes.empty() ? "" : ", ", s.m, s.n, s.k);
    out += fmt::format("GEMM (MxNxK): {}, {:.2f} GFLOP (2*M*N*K)\n", shapes, r.flop / 1e9);
  }
  out += fmt::format("peak assumed: {} ({})",
                     r.peak.tflops > 0 ? fmt::format("{:.1f} TFLOP/s", r.peak.tflops) : "none",
                     r.peak.assumed);
  if (std::optional<double> floor_ms = r.gemm_at_peak_ms())
    out += fmt::format("; the GEMM at that peak takes {:.3f} ms", *floor_ms);
  out += "\n\n";

  out += fmt::format("{:<36} {:>10} {:>9} {:>9} {:>9} {:>7} {:>7}  {}\n", "contender", "median ms",
                     "min ms", "p90 ms", "TFLOP/s", "% peak", "kernels", "bytes moved");
  std::vector<std::string> footnotes;
  for (const Contender *c : r.contenders()) {
    if (!c->supported) {
      footnotes.push_back(
          fmt::format("{}: not supported at {} ({})", c->key, r.precision, c->reason));
      continue;
    }
    if (!c->timing) {
      footnotes.push_back(fmt::format("{}: failed: {}", c->key, c->error));
      continue;
    }
    std::optional<double> t = r.tflops(*c), pc = r.percent_of_peak(*c);
    std::string bytes = "-";
    if (c->bytes_moved)
      bytes = fmt::format("{} ({:.2f}x min)", mib(*c->bytes_moved),
                          static_cast<double>(*c->bytes_moved) / static_cast<double>(r.min_bytes));
    out += fmt::format("{:<36} {:>10.4f} {:>9.4f} {:>9.4f} {:>9} {:>7} {:>7}  {}\n", c->label,
                       c->timing->median, c->timing->min, c->timing->p90,
                       t ? fmt::format("{:.2f}", *t) : "-", pc ? fmt::format("{:.1f}%", *pc) : "-",
                       c->kernels ? fmt::format("{}", *c->kernels) : "-", bytes);
    if (!c->note.empty())
      footnotes.push_back(fmt::format("{}: {}", c->key, c->note));
  }
  out += fmt::format("minimum bytes (inputs/params/state read once, outputs/state written once): "
                     "{}\n",
                     mib(r.min_bytes));
  for (const std::string &f : footnotes)
    out += f + "\n";
  out += "\n";
  std::optional<double> over_cublas = BenchReport::ratio(r.fused, r.cublas);
  std::optional<double> over_unfused = BenchReport::ratio(r.fused, r.unfused);
  out += fmt::format("fused / cuBLAS GEMM alone: {}\n",
                     over_cublas ? fmt::format("{:.3f}x the time", *over_cublas) : "n/a");
  out += fmt::format("fused / unfused:           {}\n",
                     over_unfused ? fmt::format("{:.3f}x the time", *over_unfused) : "n/a");
  if (r.agreement)
    out +=
        fmt::format("fused vs unfused output:   max |diff| {:.3g}, ||diff||/||unfused|| {:.3g}\n",
                    r.agreement->max_abs, r.agreement->rel);
  return out;
}

std::string contender_json(const BenchReport &r, const Contender &c) {
  std::string timing = "null";
  if (c.timing) {
    std::vector<std::string> runs;
    for (double v : c.timing->ms)
      runs.push_back(json_number(v));
    timing = fmt::format("{{\"median\": {}, \"min\": {}, \"max\": {}, \"p10\": {}, \"p90\": {}, "
                         "\"runs\": {}}}",
                         json_number(c.timing->median), json_number(c.timing->min),
                         json_number(c.timing->max), json_number(c.timing->p10),
                         json_number(c.timing->p90), json_list(runs));
  }
  return fmt::format("{{\n    \"supported\": {}, \"reason\": {}, \"error\": {}, \"note\": {},\n"
                     "    \"ms\": {},\n    \"tflops\": {}, \"percent_of_peak\": {}, "
                     "\"kernels\": {}, \"bytes_moved\": {}, \"compile_ms\": {}, \"cache_hit\": {}\n"
                     "  }}",
                     c.supported ? "true" : "false", json_optional_text(c.reason),
                     json_optional_text(c.error), json_optional_text(c.note), timing,
                     json_optional(r.tflops(c)), json_optional(r.percent_of_peak(c)),
                     json_optional(c.kernels), json_optional(c.bytes_moved),
                     json_optional(c.compile_ms), json_optional(c.cache_hit));
}

// The schema is documented in docs/PERF.md ("kfuse-bench/1"); change both together.
std::string report_json(const BenchReport &r) {
  std::vector<std::string> dim_fields, shapes;
  for (const auto &[name, value] : r.dims)
    dim_fields.push_back(fmt::format("{}: {}", json_string(name), value));
  std::string dims_json = "{";
  for (size_t i = 0; i < dim_fields.size(); ++i)
    dims_json += (i ? ", " : "") + dim_fields[i];
  dims_json += "}";
  for (const GemmShape &s : r.gemms)
    shapes.push_back(fmt::format("{{\"m\": {}, \"n\": {}, \"k\": {}, \"trans_b\": {}}}", s.m, s.n,
                                 s.k, s.trans_b ? "true" : "false"));
  std::string agreement = "null";
  if (r.agreement)
    agreement = fmt::format("{{\"max_abs\": {}, \"rel\": {}}}", json_number(r.agreement->max_abs),
                            json_number(r.agreement->rel));
  std::string s = "{\n";
  s += "  \"schema\": \"kfuse-bench/1\",\n";
  s += fmt::format("  \"date\": {},\n", json_string(r.date));
  s += fmt::format("  \"pipeline\": {},\n", json_string(r.pipeline));
  s += fmt::format("  \"file\": {},\n", json_string(r.file));
  s += fmt::format("  \"dims\": {},\n", dims_json);
  s += fmt::format("  \"mode\": {},\n", json_string(r.mode));
  s += fmt::format("  \"precision\": {},\n", json_string(r.precision));
  s += fmt::format("  \"device\": {{\"name\": {}, \"compute_capability\": {}, "
                   "\"driver_version\": {}, \"l2_bytes\": {}, \"cublas_version\": {}}},\n",
                   json_string(r.device), r.compute_capability, r.driver_version, r.l2_bytes,
                   json_optional_text(r.cublas_version));
  s += fmt::format("  \"timing\": {{\"method\": \"cuda-events\", \"statistic\": \"median\", "
                   "\"warmup\": {}, \"iters\": {}, \"l2_flush_bytes\": {}}},\n",
                   r.warmup, r.iters, r.flush_bytes);
  s += fmt::format("  \"gemm\": {{\"shapes\": {}, \"flop\": {}}},\n", json_list(shapes),
                   json_number(r.flop));
  s += fmt::format("  \"peak\": {{\"tflops\": {}, \"assumed\": {}, \"gemm_at_peak_ms\": {}}},\n",
                   r.peak.tflops > 0 ? json_number(r.peak.tflops) : "null",
                   json_string(r.peak.assumed), json_optional(r.gemm_at_peak_ms()));
  s += fmt::format("  \"bytes\": {{\"minimum\": {}}},\n", r.min_bytes);
  for (const Contender *c : r.contenders())
    s += fmt::format("  {}: {},\n", json_string(c->key), contender_json(r, *c));
  s +=
      fmt::format("  \"ratios\": {{\"fused_over_cublas_gemm\": {}, \"fused_over_unfused\": {}}},\n",
                  json_optional(BenchReport::ratio(r.fused, r.cublas)),
                  json_optional(BenchReport::ratio(r.fused, r.unfused)));
  s += fmt::format("  \"fused_vs_unfused_output\": {}\n", agreement);
  return s + "}\n";
}

// ---------------------------------------------------------------- the command

int parse_count(const CommandLine &cl, const char *name, int fallback, int minimum) {
  std::string text = cl.option(name, std::to_string(fallback));
  char *end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < minimum || v > 1000000)
    throw UsageError(
        fmt::format("--{} expects an integer in [{}, 1000000], got '{}'", name, minimum, text));
  return static_cast<int>(v);
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

} // namespace

int cmd_bench(int argc, char **argv) {
  CommandLine cl = parse_command_line(
      argc, argv,
      {"mode", "precision", "arch", "json", "iters", "warmup", "seed", "dim", "max-split-k"}, {});
  Options options = pipeline_options(cl);
  if (options.precision == Precision::BF16)
    throw UsageError(fmt::format("--precision: bench times fp32, 3xtf32 and tf32\n{}", kUsage));
  // 3xtf32 is fp32-accurate: its baselines are cuBLAS's fp32 SGEMM and the fp32 FMA peak.
  const bool tf32 = options.precision == Precision::TF32;
  const std::string precision_name = tf32                                     ? "tf32"
                                     : options.precision == Precision::FP32x3 ? "3xtf32"
                                                                              : "fp32";
  const int iters = parse_count(cl, "iters", kRecommendedIters, 1);
  const int warmup = parse_count(cl, "warmup", 10, 0);
  const uint64_t seed = static_cast<uint64_t>(parse_count(cl, "seed", 1, 0));
  const std::string json_path = cl.option("json", "");
  const std::string &file = cl.file();

  // Everything that needs no GPU first, so a usage mistake is reported before device setup.
  // Each contender is lowered once: its plan is reported, its program compiled below.
  // The unfused kernels compute in fp32 (their GEMMs are cuBLAS's, at the precision asked).
  Options unfused_options = options;
  unfused_options.precision = Precision::FP32;
  const dsl::SourceFile src = dsl::SourceFile::read(file);
  Lowered fused_lowered = lower(src, rt::PipelineAccess::lower_options(options, true));
  Lowered unfused_lowered = lower(src, rt::PipelineAccess::lower_options(unfused_options, false));
  const ir::Graph g = fused_lowered.graph;
  const ir::DimBindings dims = cl.dims_of(g, /*all=*/true);
  const ir::Mode mode = ir_mode(options.mode);
  const std::string mode_text(ir::mode_name(mode));
  const plan::Plan fused_plan = fused_lowered.plan;
  const plan::Plan unfused_plan = unfused_lowered.plan;
  const int64_t min_bytes = minimum_bytes(g, fused_plan, dims);
  const std::vector<GemmShape> gemms = gemm_shapes(g, dims);
  double flop = 0;
  int64_t cublas_bytes = 0;
  for (const GemmShape &s : gemms) {
    flop += s.flop();
    cublas_bytes += 4 * (s.m * s.k + s.n * s.k + s.m * s.n);
  }

  rt::Driver &driver = rt::Driver::get();
  if (!driver.available())
    throw Error("kfuse bench needs a GPU: CUDA driver unavailable: " + driver.why_unavailable());
  driver.make_current();
  const std::string device = driver.device_name();
  const Peak peak = assumed_peak(device, tf32);

  // Device tensors, shared by every contender: inputs, params, state, and each contender's
  // own outputs (compared afterwards).
  std::map<std::string, DeviceTensor> declared;
  std::map<std::string, Tensor> inputs;
  for (size_t i = 0; i < g.values.size(); ++i) {
    const ir::Value &v = g.values[i];
    if (v.is_op())
      continue;
    DeviceTensor t = random_tensor(v, dims, seed * 1000003u + i);
    if (v.kind == ir::ValueKind::Input)
      inputs[v.name] = t.tensor();
    declared.emplace(v.name, std::move(t));
  }
  auto make_outputs = [&]() {
    std::vector<DeviceTensor> outs;
    for (ir::ValueId o : g.outputs)
      outs.push_back(make_tensor(ir::concrete_shape(g[o].type, dims), g[o].type.dtype));
    return outs;
  };
  auto tensors_of = [](const std::vector<DeviceTensor> &ts) {
    std::vector<Tensor> out;
    for (const DeviceTensor &t : ts)
      out.push_back(t.tensor());
    return out;
  };
  auto bind_all = [&](Pipeline &p) {
    for (const std::string &name : p.params())
      p.bind(name, declared.at(name).tensor());
  };

  rt::Stream stream;
  GemmMath math = tf32 ? GemmMath::TF32 : GemmMath::FP32;
  std::optional<Cublas> cublas;
  std::string cublas_error, cublas_version;
  try {
    cublas.emplace();
    cublas_version = cublas->version();
  } catch (const Error &e) {
    cublas_error = e.what();
  }

  BenchReport r;
  r.date = utc_now();
  r.pipeline = g.name;
  r.file = file;
  r.mode = mode_text;
  r.precision = precision_name;
  r.dims = dims;
  r.device = device;
  r.cublas_version = cublas_version;
  r.compute_capability = driver.compute_capability();
  r.driver_version = driver.driver_version();
  r.warmup = warmup;
  r.iters = iters;
  r.gemms = gemms;
  r.flop = flop;
  r.peak = peak;
  r.min_bytes = min_bytes;
  Contender &c_fused = r.fused, &c_unfused = r.unfused, &c_cublas = r.cublas;
  c_cublas.label = fmt::format("cuBLAS GEMM alone ({})", tf32 ? "tf32" : "fp32");
  c_unfused.kernels = static_cast<int64_t>(unfused_plan.kernels.size());
  c_unfused.bytes_moved = plan::bytes_moved(unfused_plan, dims);
  c_fused.kernels = static_cast<int64_t>(fused_plan.kernels.size());
  c_fused.bytes_moved = plan::bytes_moved(fused_plan, dims);
  c_cublas.bytes_moved = cublas_bytes;
  if (tf32)
    c_unfused.note = "kfuse's own kernels compute in fp32; only the GEMM (cuBLAS) runs at tf32";

  // --- cuBLAS GEMM alone: operands that are not declared tensors (a GEMM fed by another op)
  // get random scratch data of their shape.
  std::map<ir::ValueId, DeviceTensor> scratch;
  std::vector<DeviceTensor> gemm_outputs;
  auto operand = [&](ir::ValueId id) -> const float * {
    if (!g[id].is_op())
      return declared.at(g[id].name).data();
    auto it = scratch.find(id);
    if (it == scratch.end())
      it = scratch.emplace(id, random_tensor(g[id], dims, seed * 7919u + static_cast<uint64_t>(id)))
               .first;
    return it->second.data();
  };
  // The baselines call cuBLAS's fp32/tf32 GEMM; bf16/f16 operands are timed fused only.
  bool half_gemm = false;
  for (const GemmShape &s : gemms)
    half_gemm |= g[s.a].type.dtype != ir::DType::F32;
  const char *half_reason = "its GEMMs take bf16/f16 operands; the cuBLAS baselines are wired for "
                            "f32 operands only";
  std::function<void(CUstream)> run_cublas;
  if (gemms.empty()) {
    c_cublas.supported = false;
    c_cublas.reason = "the pipeline has no GEMM (linear or matmul)";
  } else if (half_gemm) {
    c_cublas.supported = false;
    c_cublas.reason = half_reason;
  } else if (!cublas) {
    c_cublas.error = cublas_error;
  } else {
    for (const GemmShape &s : gemms)
      gemm_outputs.push_back(make_tensor({s.m, s.n}));
    std::vector<const float *> as, bs;
    for (const GemmShape &s : gemms) {
      as.push_back(operand(s.a));
      bs.push_back(operand(s.b));
    }
    run_cublas = [&, as, bs](CUstream st) {
      for (size_t i = 0; i < gemms.size(); ++i) {
        const GemmShape &s = gemms[i];
        cublas->gemm(math, s.trans_b, s.m, s.n, s.k, as[i], s.k, bs[i], s.trans_b ? s.k : s.n,
                     gemm_outputs[i].data(), s.n, st);
      }
    };
  }

  // --- unfused: kfuse's per-op kernels at fp32, GEMMs through cuBLAS at the precision asked.
  std::optional<Pipeline> unfused;
  std::vector<DeviceTensor> unfused_out = make_outputs();
  if (half_gemm) {
    c_unfused.supported = false;
    c_unfused.reason = half_reason;
  } else if (!gemms.empty() && !cublas) {
    c_unfused.error = "its GEMMs need cuBLAS: " + cublas_error;
  } else {
    try {
      unfused.emplace(
          rt::PipelineAccess::compile(std::move(unfused_lowered), unfused_options, false));
      if (cublas)
        rt::PipelineAccess::set_gemm_override(*unfused, [&](const rt::GemmCall &c, CUstream st) {
          cublas->gemm(math, c.trans_b, c.m, c.n, c.k, c.a, c.lda, c.b, c.ldb, c.c, c.ldc, st);
        });
      bind_all(*unfused);
      c_unfused.compile_ms = unfused->report().milliseconds;
      c_unfused.cache_hit = unfused->report().cache_hit;
    } catch (const Error &e) {
      c_unfused.error = e.what();
      unfused.reset();
    }
  }

  // --- fused: only where kfuse implements the precision; otherwise say why, time nothing.
  std::optional<Pipeline> fused;
  std::vector<DeviceTensor> fused_out = make_outputs();
  try {
    rt::require_supported(options.precision);
  } catch (const Error &e) {
    c_fused.supported = false;
    c_fused.reason = e.what();
  }
  if (c_fused.supported) {
    try {
      fused.emplace(rt::PipelineAccess::compile(std::move(fused_lowered), options, true));
      bind_all(*fused);
      c_fused.compile_ms = fused->report().milliseconds;
      c_fused.cache_hit = fused->report().cache_hit;
    } catch (const Error &e) {
      c_fused.error = e.what();
      fused.reset();
    }
  }

  // --- timing, one contender after another on the same stream and data.
  L2Flush flush;
  r.l2_bytes = flush.l2_bytes();
  r.flush_bytes = flush.bytes();
  auto time_contender = [&](Contender &c, const std::function<void(CUstream)> &work) {
    if (!c.supported || !c.error.empty() || !work)
      return;
    try {
      c.timing = time_on_stream(stream.handle(), work, warmup, iters, flush);
    } catch (const Error &e) {
      c.error = e.what();
    }
  };
  time_contender(c_cublas, run_cublas);
  if (unfused)
    time_contender(c_unfused,
                   [&](CUstream st) { unfused->run(inputs, tensors_of(unfused_out), st); });
  if (fused)
    time_contender(c_fused, [&](CUstream st) { fused->run(inputs, tensors_of(fused_out), st); });

  // Fused and unfused compute the same function of the same inputs (train-mode outputs do not
  // read the running stats both update), so their last outputs must agree: a fast wrong
  // kernel shows here.
  if (c_fused.timing && c_unfused.timing) {
    Agreement a;
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < fused_out.size(); ++i) {
      std::vector<double> f = download(fused_out[i]), u = download(unfused_out[i]);
      for (size_t j = 0; j < f.size(); ++j) {
        double d = static_cast<double>(f[j]) - static_cast<double>(u[j]);
        a.max_abs = std::max(a.max_abs, std::fabs(d));
        diff2 += d * d;
        ref2 += static_cast<double>(u[j]) * static_cast<double>(u[j]);
      }
    }
    a.rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    r.agreement = a;
  }

  std::fputs(report_text(r).c_str(), stdout);
  std::fflush(stdout);
  if (!json_path.empty()) {
    std::ofstream f(json_path, std::ios::binary);
    f << report_json(r);
    f.close();
    if (!f)
      throw Error("cannot write '" + json_path + "'");
  }

  // Unsupported is an answer; a failure is not.
  for (const Contender *c : r.contenders())
    if (c->supported && !c->timing)
      return 1;
  return 0;
}

} // namespace kfuse::tool
