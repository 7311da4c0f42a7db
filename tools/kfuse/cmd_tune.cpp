// kfuse tune F.kf --dim N=... [--mode train|eval] [--precision fp32|3xtf32|tf32] [--arch sm_XX]
//                 [--iters 20] [--warmup 3] [--seed 1]
// kfuse tune --show
//
// For each GEMM kernel of the pipeline, in plan order, times the whole pipeline with each of the
// kernel's candidate configurations (its tiles x split-K caps, codegen/gemm_tuning.h), the
// kernels before it at the configurations they won, and keeps the fastest, unless it beats the
// heuristics' choice by less than the run-to-run noise: the heuristics' choice is always a
// candidate, so tuning never stores a slower configuration. Every candidate tile is a compile
// (NVRTC, through the disk cache); a split-K cap is launch data, so the caps of one tile share a
// compile. Timing is `kfuse bench`'s (bench_timer.h): CUDA events, L2 flushed, the median.
//
// The winners go to the tuning store (runtime/tuning_store.h), keyed by the device and each
// kernel's signature; the split-K cap for the class of the batch (codegen::rows_class). Later
// compiles on this device read them (Options::use_tuned, --no-tuned). --show lists the store.
#include "compiler/dsl/source.h"
#include "compiler/lower.h"
#include "runtime/driver.h"
#include "runtime/launch_geometry.h"
#include "runtime/pipeline.h"
#include "runtime/stream.h"
#include "runtime/tuning_store.h"
#include "tools/kfuse/bench_timer.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"
#include "tools/kfuse/device_tensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kfuse::tool {
namespace {

constexpr const char *kUsage =
    "usage: kfuse tune FILE.kf --dim NAME=VALUE... [--mode train|eval] [--precision "
    "fp32|3xtf32|tf32]\n"
    "                  [--arch sm_XX] [--iters 20] [--warmup 3] [--seed 1]\n"
    "       kfuse tune --show\n";

// A candidate must beat the heuristics' choice by more than this fraction of its time to be
// stored: medians of the same configuration differ by about 1% from run to run.
constexpr double kNoise = 0.02;

std::string percent(double ms, double heuristic_ms) {
  return fmt::format("{:+.1f}%", (ms / heuristic_ms - 1) * 100);
}

int show(const CommandLine &cl) {
  if (!cl.positional.empty() || !cl.options.empty() || !cl.dims.empty() || cl.flags.size() != 1)
    throw UsageError(fmt::format("--show takes no file or other option\n{}", kUsage));
  const rt::TuningStore store = rt::TuningStore::from_environment();
  const std::vector<rt::TuningEntry> entries = store.entries();
  std::string out = fmt::format("{} tuned GEMM kernel{} in {}\n", entries.size(),
                                entries.size() == 1 ? "" : "s", store.directory());
  for (const rt::TuningEntry &e : entries) {
    out += fmt::format("{} {} on {} (signature {})\n", e.pipeline, e.kernel, e.device, e.signature);
    if (e.tile)
      out += fmt::format("  tile {:<10} tuned at N={}: {:.4f} ms, heuristic {:.4f} ms ({}), {}\n",
                         e.tile->tile, e.tile->at.rows, e.tile->at.ms, e.tile->at.heuristic_ms,
                         percent(e.tile->at.ms, e.tile->at.heuristic_ms), e.tile->at.date);
    for (const rt::TunedSplit &s : e.splits)
      out +=
          fmt::format("  split-K {:<7} for N in class {} with tile {}, tuned at N={}: {:.4f} "
                      "ms, heuristic {:.4f} ms ({}), {}\n",
                      s.max_splits == 0 ? std::string("rule") : fmt::format("<= {}", s.max_splits),
                      s.rows_class, s.tile, s.at.rows, s.at.ms, s.at.heuristic_ms,
                      percent(s.at.ms, s.at.heuristic_ms), s.at.date);
  }
  write_stdout(out);
  return 0;
}

struct Candidate {
  std::optional<codegen::Sm90Tile> tile; // nullopt: the kernel's one tile
  std::string tile_text;
  int cap = 0; // split-K cap; 0: the rule's own S
  int splits = 1;
  double ms = 0;
};

} // namespace

int cmd_tune(int argc, char **argv) {
  CommandLine cl = parse_command_line(
      argc, argv, {"mode", "precision", "arch", "iters", "warmup", "seed", "dim"}, {"show"});
  if (cl.flag("show"))
    return show(cl);
  Options options = pipeline_options(cl);
  options.use_tuned = false; // every candidate is given explicitly
  if (options.precision == Precision::BF16)
    throw UsageError(fmt::format("--precision: tune takes fp32, 3xtf32 and tf32\n{}", kUsage));
  const int iters = parse_count(cl, "iters", 20, 1);
  const int warmup = parse_count(cl, "warmup", 3, 0);
  const uint64_t seed = static_cast<uint64_t>(parse_count(cl, "seed", 1, 0));
  const dsl::SourceFile src = dsl::SourceFile::read(cl.file());
  const Lowered heuristic = lower(src, rt::PipelineAccess::lower_options(options, true));
  const ir::Graph &g = heuristic.graph;
  const ir::DimBindings dims = cl.dims_of(g, /*all=*/true);
  std::vector<const codegen::KernelLaunch *> gemms;
  for (const codegen::KernelLaunch &l : heuristic.program.launches)
    if (!l.signature.empty())
      gemms.push_back(&l);
  if (gemms.empty())
    throw Error(fmt::format("pipeline '{}' has no GEMM kernel to tune", g.name));

  rt::Driver &driver = rt::Driver::get();
  if (!driver.available())
    throw Error("kfuse tune needs a GPU: CUDA driver unavailable: " + driver.why_unavailable());
  driver.make_current();
  const rt::DeviceKey device = rt::DeviceKey::current();
  const auto started = std::chrono::steady_clock::now();
  const PipelineData data(g, dims, seed);
  const std::vector<DeviceTensor> outputs = data.make_outputs();
  rt::Stream stream;
  L2Flush flush;
  int compiles = 0, timings = 0;
  std::set<std::string> sources;

  // The pipeline with `tunings`, compiled (through the disk cache) and timed.
  auto time_with = [&](const codegen::GemmTunings &tunings) {
    LowerOptions lo = rt::PipelineAccess::lower_options(options, true);
    lo.tunings = [&tunings](const codegen::Program &) { return tunings; };
    Lowered l = lower(src, lo);
    if (sources.insert(l.program.source).second)
      ++compiles;
    Pipeline p = rt::PipelineAccess::compile(std::move(l), options, true);
    data.bind_all(p);
    const std::vector<Tensor> out = tensors_of(outputs);
    ++timings;
    return time_on_stream(
               stream.handle(), [&](CUstream st) { p.run(data.inputs, out, st); }, warmup, iters,
               flush)
        .median;
  };

  const std::string date = utc_now();
  const rt::TuningStore store = rt::TuningStore::from_environment();
  codegen::GemmTunings chosen;
  double first_heuristic_ms = 0, last_ms = 0;
  std::string table = fmt::format("{}: tuning {} GEMM kernel{} on {}, {} mode, {} iterations\n",
                                  g.name, gemms.size(), gemms.size() == 1 ? "" : "s", device.text(),
                                  ir::mode_name(ir_mode(options.mode)), iters);
  for (const codegen::KernelLaunch *gemm : gemms) {
    const int64_t rows = gemm->geometry.rows.is_symbolic() ? dims.at(gemm->geometry.rows.sym)
                                                           : gemm->geometry.rows.value;
    const int rows_class = codegen::rows_class(rows);
    std::vector<std::optional<codegen::Sm90Tile>> tiles;
    for (codegen::Sm90Tile t : gemm->tiles)
      tiles.push_back(t);
    if (tiles.empty())
      tiles.push_back(std::nullopt);
    std::vector<Candidate> candidates;
    std::optional<Candidate> baseline;
    for (const std::optional<codegen::Sm90Tile> &tile : tiles) {
      codegen::GemmTunings tunings = chosen;
      codegen::GemmTuning &mine = tunings[gemm->entry];
      mine.tile = tile;
      mine.tile_why = "a candidate of kfuse tune";
      // The S each cap gives with this tile: caps that give the same S are one candidate.
      LowerOptions lo = rt::PipelineAccess::lower_options(options, true);
      lo.tunings = [&tunings](const codegen::Program &) { return tunings; };
      const Lowered l = lower(src, lo);
      const codegen::KernelLaunch *mine_launch = nullptr;
      for (const codegen::KernelLaunch &k : l.program.launches)
        if (k.entry == gemm->entry)
          mine_launch = &k;
      std::set<int> seen;
      for (int cap : codegen::kSplitLimits) {
        Candidate c;
        c.tile = tile;
        c.tile_text = mine_launch->tile;
        c.cap = cap;
        c.splits = rt::split_count(mine_launch->geometry, dims, device.multiprocessors, cap);
        if (!seen.insert(c.splits).second)
          continue;
        mine.max_splits.clear();
        if (cap > 0)
          mine.max_splits[rows_class] = cap;
        c.ms = time_with(tunings);
        candidates.push_back(c);
        if (cap == 0 && c.tile_text == gemm->tile)
          baseline = c;
      }
    }
    const Candidate best =
        *std::min_element(candidates.begin(), candidates.end(),
                          [](const Candidate &a, const Candidate &b) { return a.ms < b.ms; });
    const Candidate won = best.ms < baseline->ms * (1 - kNoise) ? best : *baseline;
    if (first_heuristic_ms == 0)
      first_heuristic_ms = baseline->ms;
    last_ms = won.ms;
    table += fmt::format("{} ({}x{}x{}, N={}):\n  {:<10} {:>9} {:>3} {:>10} {:>9}\n", gemm->entry,
                         rows, gemm->cols.str(), gemm->inner.str(), rows, "tile", "split-K", "S",
                         "median ms", "vs heur.");
    auto same = [](const Candidate &a, const Candidate &b) {
      return a.tile_text == b.tile_text && a.cap == b.cap;
    };
    for (const Candidate &c : candidates)
      table += fmt::format("  {:<10} {:>9} {:>3} {:>10.4f} {:>9}{}\n", c.tile_text,
                           c.cap == 0 ? std::string("rule") : fmt::format("<= {}", c.cap), c.splits,
                           c.ms, percent(c.ms, baseline->ms),
                           same(c, won)    ? "  <- stored"
                           : same(c, best) ? "  <- fastest, but within the noise of the heuristic's"
                                           : "");

    codegen::GemmTuning &t = chosen[gemm->entry];
    t.tile = won.tile;
    if (won.cap > 0)
      t.max_splits[rows_class] = won.cap;
    rt::TuningEntry entry;
    if (std::optional<rt::TuningEntry> old = store.load(device, gemm->signature))
      for (const rt::TunedSplit &s : old->splits)
        if (s.tile == won.tile_text && s.rows_class != rows_class)
          entry.splits.push_back(s); // other classes measured with the same tile stay
    entry.pipeline = g.name;
    entry.kernel = gemm->entry;
    const rt::TunedAt at{rows, won.ms, baseline->ms, date};
    entry.tile = rt::TunedTile{won.tile_text, at};
    entry.splits.push_back({won.tile_text, rows_class, won.cap, at});
    if (!store.store(device, gemm->signature, entry))
      throw Error(fmt::format("cannot store the tuned configuration of {} in '{}'", gemm->entry,
                              store.directory()));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  table += fmt::format("pipeline: {:.4f} ms with the heuristics' configs, {:.4f} ms tuned ({})\n"
                       "{} compile{} (NVRTC or the disk cache), {} timing{} of {} + {} runs, "
                       "{:.1f} s; stored in {}\n",
                       first_heuristic_ms, last_ms, percent(last_ms, first_heuristic_ms), compiles,
                       compiles == 1 ? "" : "s", timings, timings == 1 ? "" : "s", warmup, iters,
                       seconds, store.directory());
  write_stdout(table);
  return 0;
}

} // namespace kfuse::tool
