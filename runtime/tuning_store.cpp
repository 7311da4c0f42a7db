#include "runtime/tuning_store.h"

#include "kfuse/error.h"
#include "runtime/driver.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace kfuse::rt {

namespace {

constexpr const char *kMagic = "kfuse-tuning 1";

std::string at_text(const TunedAt &at) {
  return fmt::format("{} {:.6f} {:.6f} {}", at.rows, at.ms, at.heuristic_ms, at.date);
}

// The largest batch a tuning ran at: extents are 32-bit on the GPU.
constexpr int64_t kMaxRows = (int64_t{1} << 31) - 1;
// The largest split-K cap an entry may hold (as --max-split-k): the launch takes at most its
// own maximum anyway, so a larger cap only means a corrupt entry.
constexpr int kMaxSplitCap = 1024;

bool positive_time(double ms) { return std::isfinite(ms) && ms > 0; }

bool read_at(std::istringstream &in, TunedAt &at) {
  return static_cast<bool>(in >> at.rows >> at.ms >> at.heuristic_ms >> at.date) && at.rows > 0 &&
         at.rows <= kMaxRows && positive_time(at.ms) && positive_time(at.heuristic_ms);
}

// "at N=1024 (0.120 ms, heuristic 0.130 ms)"
std::string measured(const TunedAt &at) {
  return fmt::format("N={} ({:.4f} ms vs the heuristic's {:.4f} ms, {})", at.rows, at.ms,
                     at.heuristic_ms, at.date);
}

} // namespace

std::string DeviceKey::text() const {
  return fmt::format("{}, {} SMs, sm_{}", name, multiprocessors, compute_capability);
}

DeviceKey DeviceKey::current() {
  Driver &d = Driver::get();
  d.require();
  DeviceKey k;
  k.name = d.device_name();
  k.compute_capability = d.compute_capability();
  d.check(d.cuDeviceGetAttribute(&k.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                 d.current_device()),
          "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  return k;
}

std::string format_tuning_entry(const TuningEntry &e) {
  std::string s = fmt::format("{}\ndevice {}\nsignature {}\nkernel {} {}\n", kMagic, e.device,
                              e.signature, e.pipeline, e.kernel);
  if (e.tile)
    s += fmt::format("tile {} {}\n", e.tile->tile, at_text(e.tile->at));
  for (const TunedSplit &sp : e.splits)
    s += fmt::format("split {} {} {} {}\n", sp.tile, sp.rows_class, sp.max_splits, at_text(sp.at));
  return s;
}

std::optional<TuningEntry> parse_tuning_entry(const std::string &text, std::string *why) {
  std::istringstream lines(text);
  std::string line;
  TuningEntry e;
  int number = 0;
  auto fail = [&](const std::string &what) {
    *why = fmt::format("line {}: {}", number, what);
    return std::nullopt;
  };
  while (std::getline(lines, line)) {
    ++number;
    if (number == 1) {
      if (line != kMagic)
        return fail(fmt::format("expected '{}'", kMagic));
      continue;
    }
    std::istringstream in(line);
    std::string field;
    in >> field;
    if (field == "device") {
      std::getline(in >> std::ws, e.device);
    } else if (field == "signature") {
      in >> e.signature;
    } else if (field == "kernel") {
      in >> e.pipeline >> e.kernel;
    } else if (field == "tile") {
      TunedTile t;
      if (!(in >> t.tile) || !read_at(in, t.at))
        return fail("expected 'tile NAME ROWS MS HEURISTIC_MS DATE'");
      e.tile = t;
    } else if (field == "split") {
      TunedSplit sp;
      if (!(in >> sp.tile >> sp.rows_class >> sp.max_splits) || !read_at(in, sp.at) ||
          sp.rows_class < 0 || sp.rows_class > 31 || sp.max_splits < 0 ||
          sp.max_splits > kMaxSplitCap)
        return fail("expected 'split TILE CLASS CAP ROWS MS HEURISTIC_MS DATE'");
      e.splits.push_back(sp);
    } else {
      return fail(fmt::format("unknown field '{}'", field));
    }
  }
  if (number == 0)
    return fail("empty");
  if (e.device.empty() || e.signature.empty() || e.kernel.empty())
    return fail("missing device, signature or kernel");
  return e;
}

TuningStore::TuningStore(std::string directory, DiskCache::WarningSink warn)
    : cache_(std::move(directory), warn), warn_(std::move(warn)) {}

TuningStore TuningStore::from_environment() {
  return TuningStore(DiskCache::from_environment().directory() + "/tuning");
}

void TuningStore::warn(const std::string &message) const {
  if (warn_)
    warn_(message);
  else
    std::fprintf(stderr, "kfuse: warning: %s\n", message.c_str());
}

std::string TuningStore::key(const DeviceKey &device, const std::string &signature) const {
  return hash_hex(device.text() + "\n" + hash_hex(signature));
}

std::optional<TuningEntry> TuningStore::read(const std::string &key, const DeviceKey *device,
                                             const std::string *signature,
                                             DiskCache::Corrupt corrupt) const {
  std::optional<TuningEntry> entry;
  auto parses = [&](std::string_view text) {
    std::string why;
    entry = parse_tuning_entry(std::string(text), &why);
    if (!entry)
      return "not a tuning entry: " + why;
    // A hash collision or a moved file: the entry must be the one asked for.
    if (device && (entry->device != device->text() || entry->signature != hash_hex(*signature))) {
      entry.reset();
      return std::string("it is the entry of another device or kernel");
    }
    return std::string();
  };
  if (!cache_.load(key, parses, corrupt))
    return std::nullopt;
  return entry;
}

std::optional<TuningEntry> TuningStore::load(const DeviceKey &device,
                                             const std::string &signature) const {
  return read(key(device, signature), &device, &signature, DiskCache::Corrupt::remove);
}

bool TuningStore::store(const DeviceKey &device, const std::string &signature,
                        TuningEntry entry) const {
  entry.device = device.text();
  entry.signature = hash_hex(signature);
  return cache_.store(key(device, signature), format_tuning_entry(entry));
}

std::vector<TuningEntry> TuningStore::entries() const {
  std::vector<TuningEntry> out;
  for (const std::string &k : cache_.keys())
    if (std::optional<TuningEntry> e = read(k, nullptr, nullptr, DiskCache::Corrupt::keep))
      out.push_back(std::move(*e));
  return out;
}

codegen::GemmTunings TuningStore::tunings(const DeviceKey &device,
                                          const std::vector<exec::TunableGemm> &gemms) const {
  codegen::GemmTunings out;
  for (const exec::TunableGemm &l : gemms) {
    std::optional<TuningEntry> e = load(device, l.signature);
    if (!e)
      continue;
    codegen::GemmTuning t;
    std::string tile = l.tile;
    if (e->tile && !l.tiles.empty()) {
      std::optional<codegen::Sm90Tile> tuned = codegen::parse_tile(e->tile->tile);
      if (!tuned || std::find(l.tiles.begin(), l.tiles.end(), *tuned) == l.tiles.end()) {
        warn(fmt::format("kfuse tuning store: ignoring the tile '{}' tuned for {}: it takes {}",
                         e->tile->tile, l.entry, "128x256x1, 128x128x1, 64x256x1 or 64x128x2"));
      } else {
        t.tile = tuned;
        tile = e->tile->tile;
        t.tile_why = fmt::format("tuned on {} at {}", e->device, measured(e->tile->at));
      }
    }
    for (const TunedSplit &sp : e->splits) {
      if (sp.tile != tile)
        continue; // measured with another tile
      const int64_t lo = sp.rows_class == 0 ? 1 : (int64_t{1} << (sp.rows_class - 1)) + 1;
      const int64_t hi = int64_t{1} << sp.rows_class;
      if (sp.max_splits > 0)
        t.max_splits[sp.rows_class] = sp.max_splits;
      t.split_whys.push_back(fmt::format("for {}..{} rows split-K {}, tuned on {} at {}", lo, hi,
                                         sp.max_splits == 0
                                             ? std::string("as the rule chooses")
                                             : fmt::format("at most {}", sp.max_splits),
                                         e->device, measured(sp.at)));
    }
    if (t.tile || !t.split_whys.empty())
      out[l.entry] = std::move(t);
  }
  return out;
}

} // namespace kfuse::rt
