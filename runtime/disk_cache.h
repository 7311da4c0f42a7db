// A directory of cache entries keyed by a hex string; the JIT stores compiled modules here.
//
// Invariants:
// - An entry is written to a temporary file in the cache directory (named from the pid, the
//   thread and a counter, so no two writers share one), written in full, fsync'ed, then renamed
//   over the entry's name. Readers therefore see a whole old entry, a whole new entry, or none;
//   any number of processes and threads may store and load the same key at once.
// - Every entry starts with a header (magic, format version, key, payload size, 64-bit checksum
//   of the payload). load() verifies all of it, then lets the caller check that the payload
//   decodes; an entry that is empty, torn, truncated, longer than its header says, of another
//   format version or key, or whose payload does not decode is corrupt: a warning and a miss,
//   never returned. A lookup removes it (the warning comes once; the next store() rewrites it),
//   a listing keeps it (Corrupt::keep).
//
// Trust: the cache trusts only its directory's owner, who must be the current user. The
// directory, and every folder above it that store() creates, is created 0700 whatever the
// umask, and entries 0600. A directory or entry owned by another user or
// writable by group or others is refused (as ssh and ccache refuse such files), so nobody else
// can plant an entry: the checksum guards against torn and corrupt files, not against forgery.
// Entries are opened without following symlinks and without blocking (O_NOFOLLOW, O_NONBLOCK),
// checked with fstat before reading (regular file, owner, mode, at most kMaxEntryBytes), and
// read up to that limit only.
//
// Errors: the cache is an optimization, so a cache that cannot be used never fails the work
// that uses it. load() reports a refused, corrupt or unreadable entry or directory as a warning
// and a miss; store() reports a directory that cannot be created or used, or an entry that cannot
// be written, as a warning and returns false. Warnings name the path and the reason; they go to the
// warning sink (stderr by default). A missing directory or entry is a plain miss. Failing to remove
// a bad entry is not an error: it is still a miss, and the next store() replaces it.
//
// Temporary files left by a process killed mid-store are named ".<key>.tmp.*" and are never
// read; deleting them (or the whole directory) at any time is safe.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kfuse::rt {

class DiskCache {
public:
  using WarningSink = std::function<void(const std::string &)>;

  // Entries live in `directory`, created on the first store(). Warnings go to `warn`; the
  // default prints "kfuse: warning: ..." on stderr.
  explicit DiskCache(std::string directory, WarningSink warn = {});

  // $KFUSE_CACHE_DIR, else $XDG_CACHE_HOME/kfuse, else $HOME/.cache/kfuse (empty variables count
  // as unset). Throws kfuse::Error when none of them is set.
  static DiskCache from_environment();

  const std::string &directory() const { return directory_; }

  // Why a payload that passed the entry's checks cannot be used, or "" when it can: the
  // caller's decoder, so that an entry whose payload does not decode is one more corrupt entry.
  using PayloadCheck = std::function<std::string(std::string_view payload)>;
  // What load() does with a corrupt entry after the warning: a lookup removes it, a listing
  // (which must change nothing) keeps it.
  enum class Corrupt { remove, keep };

  // Keys are 1 to 128 characters of [0-9A-Za-z_-] (hash_hex() output qualifies); anything else
  // throws kfuse::Error.
  std::optional<std::string> load(const std::string &key, const PayloadCheck &check = {},
                                  Corrupt corrupt = Corrupt::remove) const;
  // true when the entry was written; false (after a warning) when the cache is unusable.
  bool store(const std::string &key, const std::string &payload) const;

  // The keys of the entries in the directory (of this format version), sorted; none where the
  // directory does not exist. A file whose name is not an entry's (KEY.kfcVERSION) is skipped
  // with a warning, as is a directory that cannot be listed; entries of other format versions
  // and subfolders are skipped silently.
  std::vector<std::string> keys() const;

  // Where the entry for `key` lives (tests corrupt it on purpose).
  std::string entry_path(const std::string &key) const;

  // Bumped when the entry layout changes; part of the entry's file name, so builds with
  // different layouts sharing a directory do not delete each other's entries.
  static constexpr std::uint32_t kFormatVersion = 1;

  // The largest entry load() reads (cubins are a few MiB).
  static constexpr std::uint64_t kMaxEntryBytes = std::uint64_t{256} << 20;

private:
  // Empty when the directory (which must exist) may be used, else why not.
  std::string untrusted_directory() const;
  // The bytes of the entry file at `path` (`seen`: its fstat), or nothing: a miss, with a
  // warning where the directory or file is refused or unreadable.
  std::optional<std::string> read_entry_file(const std::string &path, struct stat &seen) const;
  void warn(const std::string &message) const;

  std::string directory_;
  WarningSink warn_;
};

// A 64-bit non-cryptographic hash (used for entry checksums). Different seeds give independent
// hashes.
std::uint64_t hash64(std::string_view data, std::uint64_t seed);

// A 128-bit non-cryptographic hash of `data` as 32 lowercase hex digits (two independently
// seeded hash64 lanes). Stable across runs, builds and machines: cache keys depend on it.
std::string hash_hex(std::string_view data);

} // namespace kfuse::rt
