// The tuning store: what `kfuse tune` measured, per device and GEMM kernel, in the disk cache's
// directory (<cache>/tuning), read by every later compile (LowerOptions::tunings).
//
// An entry is keyed by the device (name, SM count, compute capability) and the kernel's
// signature (exec::TunableGemm::signature: operand type, math, arch, K, output features and
// the generated epilogue: everything that makes its source but the tile). It holds the tile
// tuned for that kernel, with the batch N it was tuned at (a tile is compile-time: one per
// kernel), and split-K caps per class of N (codegen::rows_class), each for the tile it was
// measured with (they are chosen at run time when the dims are bound).
//
// Entries are DiskCache entries: written atomically, checksummed, trusted only from their
// owner. An entry that is unreadable, corrupt (its text does not parse, a value is out of
// range, it is another device's or kernel's), or names a tile the kernel cannot take is
// reported on the warning sink and ignored: the heuristics then choose, and nothing fails.
// A lookup removes a corrupt entry; listing (entries()) changes nothing.
#pragma once

#include "compiler/executable.h"
#include "runtime/disk_cache.h"

#include <optional>
#include <string>
#include <vector>

namespace kfuse::rt {

struct DeviceKey {
  std::string name;
  int multiprocessors = 0;
  int compute_capability = 0; // major * 10 + minor
  // "NVIDIA H100 80GB HBM3, 132 SMs, sm_90"
  std::string text() const;
  // The current device's (Driver::current_device()); throws kfuse::Error without a GPU.
  static DeviceKey current();
};

// One measurement that picked a configuration: the batch it ran at, the median time of the
// pipeline with it and with the heuristics' choice, and when (UTC, ISO 8601).
struct TunedAt {
  int64_t rows = 0;
  double ms = 0, heuristic_ms = 0;
  std::string date;
};

struct TunedTile {
  std::string tile; // codegen::tile_name, or the kernel's one tile
  TunedAt at;
};

struct TunedSplit {
  std::string tile; // the tile it was measured with
  int rows_class = 0;
  int max_splits = 0; // 0: the rule's own S won
  TunedAt at;
};

struct TuningEntry {
  std::string device;    // DeviceKey::text()
  std::string signature; // hash_hex of the kernel's signature
  std::string pipeline, kernel;
  std::optional<TunedTile> tile;
  std::vector<TunedSplit> splits;
};

// The entry's stored text, and back; parse_tuning_entry returns why it cannot be read.
std::string format_tuning_entry(const TuningEntry &e);
std::optional<TuningEntry> parse_tuning_entry(const std::string &text, std::string *why);

class TuningStore {
public:
  explicit TuningStore(std::string directory, DiskCache::WarningSink warn = {});
  // <the disk cache's directory>/tuning.
  static TuningStore from_environment();

  const std::string &directory() const { return cache_.directory(); }

  std::optional<TuningEntry> load(const DeviceKey &device, const std::string &signature) const;
  // Replaces the entry of (device, signature); false (after a warning) where it cannot.
  bool store(const DeviceKey &device, const std::string &signature, TuningEntry entry) const;
  // Every readable entry, for `kfuse tune --show`; stray files and corrupt entries are
  // reported on the warning sink, skipped and left in place.
  std::vector<TuningEntry> entries() const;

  // The tuned configurations of a pipeline's GEMM kernels on `device`, for codegen::generate.
  codegen::GemmTunings tunings(const DeviceKey &device,
                               const std::vector<exec::TunableGemm> &gemms) const;

private:
  std::string key(const DeviceKey &device, const std::string &signature) const;
  // The entry under `key`; with `device` and `signature`, only if it is theirs.
  std::optional<TuningEntry> read(const std::string &key, const DeviceKey *device,
                                  const std::string *signature, DiskCache::Corrupt corrupt) const;
  void warn(const std::string &message) const;

  DiskCache cache_;
  DiskCache::WarningSink warn_;
};

} // namespace kfuse::rt
