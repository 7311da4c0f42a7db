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

// The pipeline as tuning compiles it: every candidate is given explicitly.
struct TuningSource {
  const std::string &kf_text;
  const std::string &file_name;
  Options options;

  // Lowered with `tunings` (the heuristics' own where empty).
  exec::Executable lowered_with(const codegen::GemmTunings &tunings) const {
    exec::Request r = PipelineAccess::request(options, true);
    r.tunings = [&tunings](const std::vector<exec::TunableGemm> &) { return tunings; };
    return exec::compile_executable(kf_text, file_name, r);
  }
};

TuningSource tuning_source(const std::string &kf_text, const std::string &file_name,
                           const Options &asked) {
  Options options = asked;
  options.use_tuned = false; // every candidate is given explicitly
  options.tune_at_start.clear();
  options.max_split_k = 0; // the candidates' caps decide
  return {kf_text, file_name, options};
}

// Each tunable GEMM kernel, and its index among the GEMM kernels (PipelineAccess::gemm_launches).
std::vector<std::pair<const exec::Kernel *, size_t>>
tunable_gemms(const exec::Executable &heuristic) {
  std::vector<std::pair<const exec::Kernel *, size_t>> gemms;
  size_t gemm_kernels = 0;
  for (const exec::Kernel &l : heuristic.kernels)
    if (l.gemm) {
      if (!l.signature.empty())
        gemms.emplace_back(&l, gemm_kernels);
      ++gemm_kernels;
    }
  if (gemms.empty())
    throw Error(fmt::format("pipeline '{}' has no GEMM kernel to tune", heuristic.interface.name));
  return gemms;
}

// The candidates of one GEMM kernel: the pipeline compiled and bound with each, and the tile
// each pins (none: the heuristics' own config).
struct Candidates {
  std::vector<std::optional<codegen::Sm90Tile>> tile_of;
  std::vector<Pipeline> pipelines;
};

// Tunes GEMM kernels one after the other on the current GPU, each timed in the whole pipeline
// with the kernels tuned before it at the configurations they won.
class GemmTuner {
public:
  GemmTuner(const TuningSource &source, const exec::Interface &g, const TuningRequest &request,
            const TuningStore &store, TuningRun &run)
      : source_(source), g_(g), request_(request), dims_(request.dims), store_(store), run_(run),
        data_(g, request.dims, request.seed), outputs_(data_.make_outputs()),
        output_tensors_(tensors_of(outputs_)) {}

  void tune(const exec::Kernel &gemm, size_t gemm_index) {
    TunedKernel k;
    k.entry = gemm.entry;
    k.rows = gemm.geometry.rows.evaluate(dims_); // a dim, a constant or a product (`B*T`)
    k.shape = fmt::format("{}x{}x{}", k.rows, gemm.cols.str(), gemm.inner.str());
    const int rows_class = codegen::rows_class(k.rows);
    Candidates candidates = candidates_of(gemm, gemm_index, rows_class, k);
    time_candidates(candidates.pipelines, k);
    keep_fastest(gemm, rows_class, candidates.tile_of, k);
    run_.kernels.push_back(std::move(k));
  }

private:
  // The pipeline with `tunings`, compiled (through the disk cache) and bound.
  Pipeline compiled_with(const codegen::GemmTunings &tunings) {
    exec::Executable l = source_.lowered_with(tunings);
    if (sources_.insert(l.source).second)
      ++run_.compiles;
    Pipeline p = PipelineAccess::compile(std::move(l));
    data_.bind_all(p);
    return p;
  }

  // The heuristics' own config first (no tile asked for: the kernel and the variants its runs
  // choose by rows), then each tile the kernel takes, compiled alone (pinned, no variant).
  Candidates candidates_of(const exec::Kernel &gemm, size_t gemm_index, int rows_class,
                           TunedKernel &k) {
    std::vector<std::optional<codegen::Sm90Tile>> tiles{std::nullopt};
    tiles.insert(tiles.end(), gemm.tiles.begin(), gemm.tiles.end());
    std::set<int> unpinned_alone; // the S at which the heuristics' runs launched the kernel itself
    Candidates candidates;
    for (const std::optional<codegen::Sm90Tile> &tile : tiles)
      add_tile(gemm, gemm_index, rows_class, tile, unpinned_alone, k, candidates);
    return candidates;
  }

  // The candidates of `tile`: one per split-K cap that gives a split count not timed yet.
  void add_tile(const exec::Kernel &gemm, size_t gemm_index, int rows_class,
                const std::optional<codegen::Sm90Tile> &tile, std::set<int> &unpinned_alone,
                TunedKernel &k, Candidates &candidates) {
    codegen::GemmTunings tunings = chosen_;
    codegen::GemmTuning &mine = tunings[gemm.entry];
    mine.tile = tile;
    mine.tile_why = "a candidate of kfuse tune";
    const exec::Executable l = source_.lowered_with(tunings);
    const exec::Kernel &launch =
        *std::find_if(l.kernels.begin(), l.kernels.end(),
                      [&](const exec::Kernel &x) { return x.entry == gemm.entry; });
    const bool same_as_heuristic = tile && launch.tile == gemm.tile;
    std::set<int> seen; // caps that give the same S are one candidate
    for (int cap : codegen::kSplitLimits) {
      const exec::Kernel &runs =
          variant(launch, variant_of(launch, dims_, run_.device.multiprocessors, cap));
      const int splits = split_count(runs.geometry, dims_, run_.device.multiprocessors, cap);
      if (!seen.insert(splits).second || (same_as_heuristic && unpinned_alone.count(splits)))
        continue; // timed already
      mine.max_splits.clear();
      if (cap > 0)
        mine.max_splits[rows_class] = cap;
      Pipeline p = compiled_with(tunings);
      // How p's runs launch the GEMM: the S of a split-K launch is known once p has run.
      p.run(data_.inputs, output_tensors_, stream_.handle());
      stream_.synchronize();
      const GemmLaunch launched = PipelineAccess::gemm_launches(p).at(gemm_index);
      TunedCandidate c;
      c.tile = launch.tile;
      c.cap = cap;
      c.splits = launched.splits;
      if (launched.kernel != launch.entry)
        c.ran = "ran as " + launched.kernel + " " + launched.tile;
      else if (!tile)
        unpinned_alone.insert(launched.splits);
      else if (same_as_heuristic && !gemm.variants.empty())
        c.ran = "pinned: no variant at any N";
      if (!tile && cap == 0)
        k.heuristic = k.candidates.size();
      k.candidates.push_back(c);
      candidates.tile_of.push_back(tile);
      candidates.pipelines.push_back(std::move(p));
    }
  }

  // The candidates timed against each other, their runs interleaved (time_interleaved).
  void time_candidates(std::vector<Pipeline> &pipelines, TunedKernel &k) {
    std::vector<std::function<void(CUstream)>> works;
    for (Pipeline &p : pipelines)
      works.push_back([&p, this](CUstream st) { p.run(data_.inputs, output_tensors_, st); });
    const std::vector<TimingStats> times =
        time_interleaved(stream_.handle(), works, request_.warmup, request_.iters, flush_);
    run_.timings += static_cast<int>(times.size());
    for (size_t i = 0; i < times.size(); ++i)
      k.candidates[i].ms = times[i].median;
    for (size_t i = 0; i < k.candidates.size(); ++i)
      if (k.candidates[i].ms < k.candidates[k.fastest].ms)
        k.fastest = i;
  }

  // The fastest candidate, unless within the noise of the heuristics' own: the config the
  // kernels after this one are timed with, and the one the tuning store keeps.
  void keep_fastest(const exec::Kernel &gemm, int rows_class,
                    const std::vector<std::optional<codegen::Sm90Tile>> &tile_of, TunedKernel &k) {
    const TunedCandidate &base = k.candidates[k.heuristic];
    k.stored = k.candidates[k.fastest].ms < base.ms * (1 - kNoise) ? k.fastest : k.heuristic;
    const TunedCandidate &won = k.candidates[k.stored];
    if (run_.kernels.empty())
      run_.heuristic_ms = base.ms;
    run_.tuned_ms = won.ms;

    codegen::GemmTuning &t = chosen_[gemm.entry];
    t.tile = tile_of[k.stored];
    if (won.cap > 0)
      t.max_splits[rows_class] = won.cap;
    TuningEntry entry;
    if (std::optional<TuningEntry> old = store_.load(run_.device, gemm.signature))
      for (const TunedSplit &s : old->splits)
        if (s.tile == won.tile && s.rows_class != rows_class)
          entry.splits.push_back(s); // other classes measured with the same tile stay
    entry.pipeline = g_.name;
    entry.kernel = gemm.entry;
    const TunedAt at{k.rows, won.ms, base.ms, date_};
    if (tile_of[k.stored]) // the heuristics' own tile keeps its variants: nothing to pin
      entry.tile = TunedTile{won.tile, at};
    entry.splits.push_back({won.tile, rows_class, won.cap, at});
    if (!store_.store(run_.device, gemm.signature, entry))
      throw Error(fmt::format("pipeline '{}': cannot store the tuned configuration of {} in '{}'",
                              g_.name, gemm.entry, store_.directory()));
  }

  const TuningSource &source_;
  const exec::Interface &g_;
  const TuningRequest &request_;
  const exec::Dims &dims_;
  const TuningStore &store_;
  TuningRun &run_;
  const PipelineData data_;
  const std::vector<DeviceTensor> outputs_;
  const std::vector<Tensor> output_tensors_;
  Stream stream_;
  L2Flush flush_;
  std::set<std::string> sources_; // the distinct sources compiled
  const std::string date_ = utc_now();
  codegen::GemmTunings chosen_; // the configs of the kernels tuned so far
};

} // namespace

TuningRun tune_gemms(const std::string &kf_text, const std::string &file_name, const Options &asked,
                     const TuningRequest &request) {
  const TuningSource source = tuning_source(kf_text, file_name, asked);
  const auto started = std::chrono::steady_clock::now();
  const exec::Executable heuristic = source.lowered_with({});
  check_dims(heuristic.interface, request.dims);
  const std::vector<std::pair<const exec::Kernel *, size_t>> gemms = tunable_gemms(heuristic);

  Driver &driver = Driver::get();
  driver.require();
  driver.make_current();
  TuningRun run;
  run.device = DeviceKey::current();
  const TuningStore store = TuningStore::from_environment();
  run.directory = store.directory();
  GemmTuner tuner(source, heuristic.interface, request, store, run);
  for (const auto &[gemm, gemm_index] : gemms)
    tuner.tune(*gemm, gemm_index);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return run;
}

} // namespace kfuse::rt
