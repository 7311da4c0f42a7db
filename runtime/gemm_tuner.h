// Tuning a pipeline's GEMM kernels on the current GPU (`kfuse tune`, Options::tune_at_start).
//
// For each GEMM kernel, in plan order, the whole pipeline is timed with each of the kernel's
// candidate configurations (its tiles x split-K caps, compiler/codegen/gemm_tuning.h), the
// kernels before it at the configurations they won; the fastest is kept unless it beats the
// heuristics' choice by no more than the run-to-run noise (kNoise): the heuristics' choice is
// always a candidate, so tuning never stores a slower configuration. Every candidate tile is a
// compile (NVRTC, through the disk cache); the caps of one tile share it (a cap is launch data),
// and caps that give the same split count are timed once. Timing is gpu_timer.h's, as `kfuse
// bench` times: CUDA events, L2 flushed, the median. The winners go to the tuning store.
#pragma once

#include "kfuse/kfuse.h"
#include "runtime/tuning_store.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kfuse::rt {

// A candidate must beat the heuristics' choice by more than this fraction of its time to be
// stored: medians of one configuration differ by about 1% from run to run.
constexpr double kNoise = 0.02;

struct TuningRequest {
  std::map<std::string, int64_t> dims; // every dim of the pipeline
  int warmup = 3, iters = 20;
  uint64_t seed = 1; // of the random inputs and parameters
};

struct TunedCandidate {
  std::string tile;
  int cap = 0;    // split-K cap; 0: the rule's own S
  int splits = 1; // the S the timed runs launched
  double ms = 0;
  // "ran as k0_gemm_wide 128x128x1" where the timed runs launched a compiled variant
  // (KernelLaunch::by_rows) rather than the kernel itself; "pinned: no variant at any N" for the
  // kernel's own tile compiled without its variants; empty otherwise.
  std::string ran;
};

struct TunedKernel {
  std::string entry;
  int64_t rows = 0;
  std::string shape; // "128x1024x512"
  std::vector<TunedCandidate> candidates;
  size_t fastest = 0, stored = 0, heuristic = 0; // indices into candidates
};

struct TuningRun {
  DeviceKey device;
  std::vector<TunedKernel> kernels;
  double heuristic_ms = 0, tuned_ms = 0; // the pipeline's median, before and after
  int compiles = 0, timings = 0;
  double seconds = 0;
  std::string directory; // the tuning store's
};

// Tunes the pipeline in `kf_text` (from `file_name`) as `options` compiles it (use_tuned and
// tune_at_start aside) and stores the winners. Throws kfuse::Error without a GPU, for a pipeline
// without GEMM kernels, for dims that are not exactly the pipeline's, and where the store cannot
// be written.
TuningRun tune_gemms(const std::string &kf_text, const std::string &file_name,
                     const Options &options, const TuningRequest &request);

} // namespace kfuse::rt
