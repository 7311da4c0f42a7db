#include "runtime/gemm_tuner.h"
#include "compiler/extent.h"

#include "runtime/driver.h"
#include "runtime/gpu_timer.h"
#include "runtime/launch_geometry.h"
#include "runtime/pipeline.h"
#include "runtime/random_tensors.h"
#include "runtime/stream.h"
#include "runtime/utc_time.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

namespace kfuse::rt {

namespace {

// Every dim of `g` bound in `dims`, and nothing else.
void check_dims(const exec::Interface &g, const std::map<std::string, int64_t> &dims) {
  for (const std::string &d : g.dims)
    if (!dims.count(d))
      throw Error(fmt::format("pipeline '{}': tuning needs a value for dim {}", g.name, d));
  for (const auto &[name, value] : dims) {
    if (std::find(g.dims.begin(), g.dims.end(), name) == g.dims.end())
      throw Error(
          fmt::format("pipeline '{}': tuning was given dim {}, which it has not", g.name, name));
    if (auto problem = dim_value_problem(name, value))
      throw Error(fmt::format("pipeline '{}': tuning: {}", g.name, *problem));
  }
}

} // namespace

TuningRun tune_gemms(const std::string &kf_text, const std::string &file_name, const Options &asked,
                     const TuningRequest &request) {
  Options options = asked;
  options.use_tuned = false; // every candidate is given explicitly
  options.tune_at_start.clear();
  options.max_split_k = 0; // the candidates' caps decide
  const auto started = std::chrono::steady_clock::now();
  // Lowered with `tunings` (the heuristics' own where empty).
  auto lowered_with = [&](const codegen::GemmTunings &tunings) {
    exec::Request r = PipelineAccess::request(options, true);
    r.tunings = [&tunings](const std::vector<exec::TunableGemm> &) { return tunings; };
    return exec::compile_executable(kf_text, file_name, r);
  };
  const exec::Executable heuristic = lowered_with({});
  const exec::Interface &g = heuristic.interface;
  check_dims(g, request.dims);
  const exec::Dims &dims = request.dims;
  // Each tunable GEMM kernel, and its index among the GEMM kernels (PipelineAccess::gemm_launches).
  std::vector<std::pair<const exec::Kernel *, size_t>> gemms;
  size_t gemm_kernels = 0;
  for (const exec::Kernel &l : heuristic.kernels)
    if (l.gemm) {
      if (!l.signature.empty())
        gemms.emplace_back(&l, gemm_kernels);
      ++gemm_kernels;
    }
  if (gemms.empty())
    throw Error(fmt::format("pipeline '{}' has no GEMM kernel to tune", g.name));

  Driver &driver = Driver::get();
  driver.require();
  driver.make_current();
  TuningRun run;
  run.device = DeviceKey::current();
  const TuningStore store = TuningStore::from_environment();
  run.directory = store.directory();
  const PipelineData data(g, dims, request.seed);
  const std::vector<DeviceTensor> outputs = data.make_outputs();
  const std::vector<Tensor> output_tensors = tensors_of(outputs);
  Stream stream;
  L2Flush flush;
  std::set<std::string> sources;

  // The pipeline with `tunings`, compiled (through the disk cache) and bound.
  auto compiled_with = [&](const codegen::GemmTunings &tunings) {
    exec::Executable l = lowered_with(tunings);
    if (sources.insert(l.source).second)
      ++run.compiles;
    Pipeline p = PipelineAccess::compile(std::move(l));
    data.bind_all(p);
    return p;
  };

  const std::string date = utc_now();
  codegen::GemmTunings chosen;
  for (const auto &[gemm, gemm_index] : gemms) {
    TunedKernel k;
    k.entry = gemm->entry;
    k.rows = gemm->geometry.rows.evaluate(dims); // a dim, a constant or a product (`B*T`)
    k.shape = fmt::format("{}x{}x{}", k.rows, gemm->cols.str(), gemm->inner.str());
    const int rows_class = codegen::rows_class(k.rows);
    // The heuristics' own config first (no tile asked for: the kernel and the variants its runs
    // choose by rows), then each tile the kernel takes, compiled alone (pinned, no variant).
    std::vector<std::optional<codegen::Sm90Tile>> tiles{std::nullopt};
    tiles.insert(tiles.end(), gemm->tiles.begin(), gemm->tiles.end());
    std::vector<std::optional<codegen::Sm90Tile>> tile_of; // per candidate
    std::set<int> unpinned_alone; // the S at which the heuristics' runs launched the kernel itself
    std::vector<Pipeline> pipelines; // per candidate
    for (const std::optional<codegen::Sm90Tile> &tile : tiles) {
      codegen::GemmTunings tunings = chosen;
      codegen::GemmTuning &mine = tunings[gemm->entry];
      mine.tile = tile;
      mine.tile_why = "a candidate of kfuse tune";
      const exec::Executable l = lowered_with(tunings);
      const exec::Kernel &launch =
          *std::find_if(l.kernels.begin(), l.kernels.end(),
                        [&](const exec::Kernel &x) { return x.entry == gemm->entry; });
      const bool same_as_heuristic = tile && launch.tile == gemm->tile;
      std::set<int> seen; // caps that give the same S are one candidate
      for (int cap : codegen::kSplitLimits) {
        const exec::Kernel &runs =
            variant(launch, variant_of(launch, dims, run.device.multiprocessors, cap));
        const int splits = split_count(runs.geometry, dims, run.device.multiprocessors, cap);
        if (!seen.insert(splits).second || (same_as_heuristic && unpinned_alone.count(splits)))
          continue; // timed already
        mine.max_splits.clear();
        if (cap > 0)
          mine.max_splits[rows_class] = cap;
        Pipeline p = compiled_with(tunings);
        // How p's runs launch the GEMM: the S of a split-K launch is known once p has run.
        p.run(data.inputs, output_tensors, stream.handle());
        stream.synchronize();
        const GemmLaunch launched = PipelineAccess::gemm_launches(p).at(gemm_index);
        TunedCandidate c;
        c.tile = launch.tile;
        c.cap = cap;
        c.splits = launched.splits;
        if (launched.kernel != launch.entry)
          c.ran = "ran as " + launched.kernel + " " + launched.tile;
        else if (!tile)
          unpinned_alone.insert(launched.splits);
        else if (same_as_heuristic && !gemm->variants.empty())
          c.ran = "pinned: no variant at any N";
        if (!tile && cap == 0)
          k.heuristic = k.candidates.size();
        k.candidates.push_back(c);
        tile_of.push_back(tile);
        pipelines.push_back(std::move(p));
      }
    }
    // The candidates timed against each other, their runs interleaved (time_interleaved).
    std::vector<std::function<void(CUstream)>> works;
    for (Pipeline &p : pipelines)
      works.push_back(
          [&p, &data, &output_tensors](CUstream st) { p.run(data.inputs, output_tensors, st); });
    const std::vector<TimingStats> times =
        time_interleaved(stream.handle(), works, request.warmup, request.iters, flush);
    run.timings += static_cast<int>(times.size());
    for (size_t i = 0; i < times.size(); ++i)
      k.candidates[i].ms = times[i].median;
    for (size_t i = 0; i < k.candidates.size(); ++i)
      if (k.candidates[i].ms < k.candidates[k.fastest].ms)
        k.fastest = i;
    const TunedCandidate &base = k.candidates[k.heuristic];
    k.stored = k.candidates[k.fastest].ms < base.ms * (1 - kNoise) ? k.fastest : k.heuristic;
    const TunedCandidate &won = k.candidates[k.stored];
    if (run.kernels.empty())
      run.heuristic_ms = base.ms;
    run.tuned_ms = won.ms;

    codegen::GemmTuning &t = chosen[gemm->entry];
    t.tile = tile_of[k.stored];
    if (won.cap > 0)
      t.max_splits[rows_class] = won.cap;
    TuningEntry entry;
    if (std::optional<TuningEntry> old = store.load(run.device, gemm->signature))
      for (const TunedSplit &s : old->splits)
        if (s.tile == won.tile && s.rows_class != rows_class)
          entry.splits.push_back(s); // other classes measured with the same tile stay
    entry.pipeline = g.name;
    entry.kernel = gemm->entry;
    const TunedAt at{k.rows, won.ms, base.ms, date};
    if (tile_of[k.stored]) // the heuristics' own tile keeps its variants: nothing to pin
      entry.tile = TunedTile{won.tile, at};
    entry.splits.push_back({won.tile, rows_class, won.cap, at});
    if (!store.store(run.device, gemm->signature, entry))
      throw Error(fmt::format("pipeline '{}': cannot store the tuned configuration of {} in '{}'",
                              g.name, gemm->entry, store.directory()));
    run.kernels.push_back(std::move(k));
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return run;
}

} // namespace kfuse::rt
