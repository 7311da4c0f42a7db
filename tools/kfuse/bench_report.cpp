#include "tools/kfuse/bench_report.h"

#include <fmt/format.h>

#include <cmath>
#include <type_traits>

namespace kfuse::tool {
namespace {

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

// "tile 128x256x1, split-K S = 4: <the config's why>", as resolved by the timed runs.
std::string gemm_launch_text(const rt::GemmLaunch &g) {
  const std::string tile = g.tile.empty() ? "its mainloop's one tile" : "tile " + g.tile;
  const std::string split = g.splits == 0  ? "not run"
                            : g.splits > 1 ? fmt::format("split-K S = {}", g.splits)
                                           : std::string("K not split (S = 1)");
  return fmt::format("{}, {}: {}", tile, split, g.config);
}

// The pipeline, device, timing method, GEMMs and assumed peak, then an empty line.
std::string report_header(const BenchReport &r) {
  std::string dims_text;
  for (const auto &[name, value] : r.dims)
    dims_text += fmt::format("{}{}={}", dims_text.empty() ? "" : " ", name, value);
  std::string out;
  out += fmt::format("kfuse bench: {} ({}) {}, mode {}, {}\n", r.pipeline, r.file, dims_text,
                     r.mode, r.arithmetic.text());
  out += fmt::format("device: {} (sm_{}), CUDA driver API {}.{}, cuBLAS {}\n", r.device,
                     r.compute_capability, r.driver_version / 1000, r.driver_version % 1000 / 10,
                     r.cublas_version.empty() ? "unavailable" : r.cublas_version);
  out +=
      fmt::format("timing: CUDA events, {} warm-up runs, median of {} runs, the contenders' runs "
                  "interleaved; before each run a {} buffer ({} the {} L2) is written with "
                  "cuMemsetD32Async, outside the events\n",
                  r.warmup, r.iters, mib(static_cast<int64_t>(r.flush_bytes)),
                  r.l2_bytes ? fmt::format("{:.1f}x", static_cast<double>(r.flush_bytes) /
                                                          static_cast<double>(r.l2_bytes))
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
      shapes += fmt::format("{}{}x{}x{} ({} -> {})", shapes.empty() ? "" : ", ", s.m, s.n, s.k,
                            ir::dtype_name(s.operands), ir::dtype_name(s.result));
    out += fmt::format("GEMM (MxNxK, operand type -> product type): {}, {:.2f} GFLOP (2*M*N*K)\n",
                       shapes, r.flop / 1e9);
  }
  out += fmt::format("peak assumed: {} ({})",
                     r.peak.tflops > 0 ? fmt::format("{:.1f} TFLOP/s", r.peak.tflops) : "none",
                     r.peak.assumed);
  if (std::optional<double> floor_ms = r.gemm_at_peak_ms())
    out += fmt::format("; the GEMM at that peak takes {:.3f} ms", *floor_ms);
  return out + "\n\n";
}

// A row per timed contender, the minimum bytes, then the footnotes: why a contender has no
// row, its note, how its GEMMs launched.
std::string contender_table(const BenchReport &r) {
  std::string out =
      fmt::format("{:<36} {:>10} {:>9} {:>9} {:>9} {:>7} {:>7}  {}\n", "contender", "median ms",
                  "min ms", "p90 ms", "TFLOP/s", "% peak", "kernels", "bytes moved");
  std::vector<std::string> footnotes;
  for (const Contender *c : r.contenders()) {
    if (!c->supported) {
      footnotes.push_back(fmt::format(
          "{}: not supported at {} ({})", c->key,
          r.arithmetic.half() ? fmt::format("{} operands", ir::dtype_name(r.arithmetic.operands))
                              : r.arithmetic.precision_name(),
          c->reason));
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
    for (const rt::GemmLaunch &g : c->gemm_launches)
      footnotes.push_back(fmt::format("{} {}: {}", c->key, g.kernel, gemm_launch_text(g)));
  }
  out += fmt::format("minimum bytes (inputs/params/state read once, outputs/state written once): "
                     "{}\n",
                     mib(r.min_bytes));
  for (const std::string &f : footnotes)
    out += f + "\n";
  return out + "\n";
}

// Fused against cuBLAS and unfused, and whether fused and unfused outputs agree.
std::string report_summary(const BenchReport &r) {
  std::string out;
  std::optional<double> over_cublas = BenchReport::ratio(r.fused, r.cublas);
  std::optional<double> over_unfused = BenchReport::ratio(r.fused, r.unfused);
  out += fmt::format("fused / cuBLAS GEMM alone: {}\n",
                     over_cublas ? fmt::format("{:.3f}x the time", *over_cublas) : "n/a");
  out += fmt::format("fused / unfused:           {}\n",
                     over_unfused ? fmt::format("{:.3f}x the time", *over_unfused) : "n/a");
  if (r.agreement)
    out += fmt::format("fused vs unfused output:   max |diff| {:.3g}, ||diff||/||unfused|| {:.3g} "
                       "({} {:.3g}{}){}\n",
                       r.agreement->max_abs, r.agreement->rel,
                       r.agreement->agrees() ? "within" : "BEYOND", r.agreement->bound,
                       r.agreement->agrees() ? ""
                                             : ": the two runs disagree, one of them computes a "
                                               "wrong result",
                       r.agreement->gradients_given_saved
                           ? "; the unfused gradients on the values the fused forward saved"
                           : "");
  return out;
}

} // namespace

std::string report_text(const BenchReport &r) {
  return report_header(r) + contender_table(r) + report_summary(r);
}

namespace {

std::string gemm_launches_json(const std::vector<rt::GemmLaunch> &gemms) {
  std::vector<std::string> items;
  for (const rt::GemmLaunch &g : gemms)
    items.push_back(fmt::format("{{\"kernel\": {}, \"tile\": {}, \"splits\": {}, \"config\": {}}}",
                                json_string(g.kernel), json_optional_text(g.tile), g.splits,
                                json_string(g.config)));
  return json_list(items);
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
  return fmt::format(
      "{{\n    \"supported\": {}, \"reason\": {}, \"error\": {}, \"note\": {},\n"
      "    \"ms\": {},\n    \"tflops\": {}, \"percent_of_peak\": {}, "
      "\"kernels\": {}, \"bytes_moved\": {}, \"compile_ms\": {}, \"cache_hit\": {},\n"
      "    \"gemm_launches\": {}\n"
      "  }}",
      c.supported ? "true" : "false", json_optional_text(c.reason), json_optional_text(c.error),
      json_optional_text(c.note), timing, json_optional(r.tflops(c)),
      json_optional(r.percent_of_peak(c)), json_optional(c.kernels), json_optional(c.bytes_moved),
      json_optional(c.compile_ms), json_optional(c.cache_hit), gemm_launches_json(c.gemm_launches));
}

} // namespace

// The schema is documented in docs/FORMATS.md ("kfuse-bench/1"); change both together.
std::string report_json(const BenchReport &r) {
  std::vector<std::string> dim_fields, shapes;
  for (const auto &[name, value] : r.dims)
    dim_fields.push_back(fmt::format("{}: {}", json_string(name), value));
  std::string dims_json = "{";
  for (size_t i = 0; i < dim_fields.size(); ++i)
    dims_json += (i ? ", " : "") + dim_fields[i];
  dims_json += "}";
  for (const GemmShape &s : r.gemms)
    shapes.push_back(fmt::format("{{\"m\": {}, \"n\": {}, \"k\": {}, \"trans_b\": {}, "
                                 "\"operands\": \"{}\", \"result\": \"{}\"}}",
                                 s.m, s.n, s.k, s.trans_b ? "true" : "false",
                                 ir::dtype_name(s.operands), ir::dtype_name(s.result)));
  std::string agreement = "null";
  if (r.agreement)
    agreement = fmt::format("{{\"max_abs\": {}, \"rel\": {}, \"bound\": {}}}",
                            json_number(r.agreement->max_abs), json_number(r.agreement->rel),
                            json_number(r.agreement->bound));
  std::string s = "{\n";
  s += "  \"schema\": \"kfuse-bench/1\",\n";
  s += fmt::format("  \"date\": {},\n", json_string(r.date));
  s += fmt::format("  \"pipeline\": {},\n", json_string(r.pipeline));
  s += fmt::format("  \"file\": {},\n", json_string(r.file));
  s += fmt::format("  \"dims\": {},\n", dims_json);
  s += fmt::format("  \"mode\": {},\n", json_string(r.mode));
  s += fmt::format("  \"precision\": {},\n", json_string(r.arithmetic.precision_name()));
  s += fmt::format("  \"device\": {{\"name\": {}, \"compute_capability\": {}, "
                   "\"driver_version\": {}, \"l2_bytes\": {}, \"cublas_version\": {}}},\n",
                   json_string(r.device), r.compute_capability, r.driver_version, r.l2_bytes,
                   json_optional_text(r.cublas_version));
  s += fmt::format("  \"timing\": {{\"method\": \"cuda-events\", \"statistic\": \"median\", "
                   "\"warmup\": {}, \"iters\": {}, \"l2_flush_bytes\": {}}},\n",
                   r.warmup, r.iters, r.flush_bytes);
  s += fmt::format(
      "  \"gemm\": {{\"shapes\": {}, \"flop\": {}, \"operands\": {}, "
      "\"accumulation\": {}}},\n",
      json_list(shapes), json_number(r.flop),
      r.gemms.empty() ? "null" : json_string(std::string(ir::dtype_name(r.arithmetic.operands))),
      r.gemms.empty() ? "null" : "\"fp32\"");
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

} // namespace kfuse::tool
