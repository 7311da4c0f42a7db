#include "runtime/disk_cache.h"

#include "runtime/error.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

namespace kfuse::rt {
namespace {

// ---- hashing -------------------------------------------------------------------------------

constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// A bijective 64-bit mixer: every input bit affects every output bit.
std::uint64_t avalanche(std::uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ULL;
  x ^= x >> 32;
  return x;
}

std::uint64_t rotate_left(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Little-endian regardless of the host, so hashes (and cache keys) agree across machines.
std::uint64_t read_le64(const unsigned char *p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

void append_le(std::string &out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t take_le(std::string_view in, std::size_t offset, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(in[offset + i]);
  return v;
}

// ---- entry layout --------------------------------------------------------------------------
// [0,8) magic | [8,12) format version | [12,16) key size | [16,24) payload size |
// [24,32) hash64(payload, kChecksumSeed) | key | payload. All integers little-endian; the file is
// exactly 32 + key size + payload size bytes.

constexpr char kMagic[8] = {'k', 'f', 'c', 'a', 'c', 'h', 'e', '\n'};
constexpr std::size_t kHeaderSize = 32;
constexpr std::uint64_t kChecksumSeed = 0x636865636b73756dULL;

std::string entry_header(const std::string &key, const std::string &payload) {
  std::string header(kMagic, sizeof(kMagic));
  append_le(header, DiskCache::kFormatVersion, 4);
  append_le(header, key.size(), 4);
  append_le(header, payload.size(), 8);
  append_le(header, hash64(payload, kChecksumSeed), 8);
  header += key;
  return header;
}

// The payload of a well-formed entry for `key`, or nothing.
std::optional<std::string> entry_payload(std::string_view bytes, const std::string &key) {
  if (bytes.size() < kHeaderSize || bytes.substr(0, sizeof(kMagic)) != std::string_view(kMagic, 8))
    return std::nullopt;
  if (take_le(bytes, 8, 4) != DiskCache::kFormatVersion || take_le(bytes, 12, 4) != key.size())
    return std::nullopt;
  std::uint64_t payload_size = take_le(bytes, 16, 8);
  if (bytes.size() < kHeaderSize + key.size() ||
      bytes.size() - kHeaderSize - key.size() != payload_size)
    return std::nullopt;
  if (bytes.substr(kHeaderSize, key.size()) != key)
    return std::nullopt;
  std::string_view payload = bytes.substr(kHeaderSize + key.size());
  if (hash64(payload, kChecksumSeed) != take_le(bytes, 24, 8))
    return std::nullopt;
  return std::string(payload);
}

// ---- files ---------------------------------------------------------------------------------

std::string errno_text(int error) {
  return std::error_code(error, std::generic_category()).message();
}

class FileDescriptor {
public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  FileDescriptor(const FileDescriptor &) = delete;
  FileDescriptor &operator=(const FileDescriptor &) = delete;
  int get() const { return fd_; }
  // Closes now and reports the error close() saw (on some filesystems the first sign of a
  // failed write).
  int close_checked() {
    int r = ::close(fd_);
    fd_ = -1;
    return r == 0 ? 0 : errno;
  }

private:
  int fd_;
};

// 0 or the errno of the failed write.
int write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return errno;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return 0;
}

void check_key(const std::string &key) {
  bool ok = !key.empty() && key.size() <= 128;
  for (char c : key)
    ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                c == '_' || c == '-');
  if (!ok)
    throw Error(fmt::format("kfuse cache: invalid key '{}' (expected 1-128 characters of "
                            "[0-9A-Za-z_-])",
                            key));
}

std::string temp_path(const std::string &directory, const std::string &key) {
  static std::atomic<std::uint64_t> counter{0};
  return fmt::format("{}/.{}.tmp.{}.{}.{}", directory, key, static_cast<long>(::getpid()),
                     static_cast<long>(::syscall(SYS_gettid)), counter.fetch_add(1));
}

// Removes `path` if it is still the file `seen` describes: another process may have renamed a
// fresh, valid entry over it since we read it, and that one must stay. (The check and the
// unlink are not atomic together; losing that race costs a valid entry, i.e. one extra miss.)
void discard(const std::string &path, const struct stat &seen) {
  struct stat now {};
  if (::stat(path.c_str(), &now) == 0 && now.st_dev == seen.st_dev && now.st_ino == seen.st_ino)
    ::unlink(path.c_str());
}

// Why a file or directory `st` describes must not be trusted, or "" when it may: it belongs
// to someone else or others may write it.
std::string untrusted(const struct stat &st) {
  if (st.st_uid != ::geteuid())
    return fmt::format("owned by uid {}, not by this user (uid {})", st.st_uid, ::geteuid());
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return fmt::format("writable by group or others (mode {:04o})", st.st_mode & 07777);
  return "";
}

} // namespace

std::uint64_t hash64(std::string_view data, std::uint64_t seed) {
  const auto *p = reinterpret_cast<const unsigned char *>(data.data());
  const std::size_t n = data.size();
  const std::uint64_t lane_key = avalanche(seed + kGolden);
  std::uint64_t h = avalanche(seed ^ (n * kGolden));
  // Each step is a bijection of h for a fixed word, and the word goes through a full mixer, so
  // inputs differing in one word never collide at that step.
  auto absorb = [&](std::uint64_t word) {
    h ^= avalanche(word ^ lane_key);
    h = rotate_left(h, 29) * kGolden + 0x632be59bd9b4e019ULL;
  };
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    absorb(read_le64(p + i));
  std::uint64_t tail = 0;
  for (std::size_t j = n; j > i; --j)
    tail = (tail << 8) | p[j - 1];
  absorb(tail | (static_cast<std::uint64_t>(n - i) << 56)); // the tail's length, 0-7, on top
  return avalanche(h ^ n);
}

std::string hash_hex(std::string_view data) {
  return fmt::format("{:016x}{:016x}", hash64(data, 0x6b66757365000001ULL),
                     hash64(data, 0x6b66757365000002ULL));
}

DiskCache::DiskCache(std::string directory, WarningSink warn)
    : directory_(std::move(directory)), warn_(std::move(warn)) {
  while (directory_.size() > 1 && directory_.back() == '/')
    directory_.pop_back();
}

void DiskCache::warn(const std::string &message) const {
  if (warn_)
    warn_(message);
  else
    std::fprintf(stderr, "kfuse: warning: %s\n", message.c_str());
}

std::string DiskCache::untrusted_directory() const {
  struct stat st {};
  if (::stat(directory_.c_str(), &st) != 0)
    return errno_text(errno);
  if (!S_ISDIR(st.st_mode))
    return "not a directory";
  return untrusted(st);
}

DiskCache DiskCache::from_environment() {
  auto variable = [](const char *name) -> std::string {
    const char *value = std::getenv(name);
    return value ? value : "";
  };
  if (std::string dir = variable("KFUSE_CACHE_DIR"); !dir.empty())
    return DiskCache(dir);
  if (std::string xdg = variable("XDG_CACHE_HOME"); !xdg.empty())
    return DiskCache(xdg + "/kfuse");
  if (std::string home = variable("HOME"); !home.empty())
    return DiskCache(home + "/.cache/kfuse");
  throw Error("kfuse cache: no cache directory: set KFUSE_CACHE_DIR (or XDG_CACHE_HOME or HOME)");
}

std::string DiskCache::entry_path(const std::string &key) const {
  check_key(key);
  return fmt::format("{}/{}.kfc{}", directory_, key, kFormatVersion);
}

std::vector<std::string> DiskCache::keys() const {
  const std::string suffix = fmt::format(".kfc{}", kFormatVersion);
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto &e : std::filesystem::directory_iterator(directory_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > suffix.size() && name[0] != '.' &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(name.substr(0, name.size() - suffix.size()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> DiskCache::load(const std::string &key) const {
  const std::string path = entry_path(key);
  struct stat dir {};
  if (::stat(directory_.c_str(), &dir) != 0 && (errno == ENOENT || errno == ENOTDIR))
    return std::nullopt; // no cache yet
  if (std::string why = untrusted_directory(); !why.empty()) {
    warn(fmt::format("kfuse cache: not using '{}': {}", directory_, why));
    return std::nullopt;
  }
  // O_NONBLOCK: opening a FIFO planted under an entry's name must not wait for a writer.
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT)
      return std::nullopt;
    warn(fmt::format("kfuse cache: not reading '{}': {}", path,
                     errno == ELOOP ? "a symbolic link" : errno_text(errno)));
    return std::nullopt;
  }
  struct stat seen {};
  std::string refused;
  if (::fstat(fd.get(), &seen) != 0)
    refused = errno_text(errno);
  else if (!S_ISREG(seen.st_mode))
    refused = "not a regular file";
  else if (static_cast<std::uint64_t>(seen.st_size) > kMaxEntryBytes)
    refused = fmt::format("{} bytes, over the limit of {}", seen.st_size, kMaxEntryBytes);
  else
    refused = untrusted(seen);
  if (!refused.empty()) {
    warn(fmt::format("kfuse cache: not reading '{}': {}", path, refused));
    return std::nullopt;
  }

  // Entries are only ever replaced by rename, never rewritten in place, so this file's
  // contents are fixed; read to EOF all the same rather than trust st_size, but never more
  // than the limit.
  std::string bytes(static_cast<std::size_t>(seen.st_size) + 1, '\0');
  std::size_t got = 0;
  for (;;) {
    if (got == bytes.size()) {
      if (bytes.size() > kMaxEntryBytes) {
        warn(fmt::format("kfuse cache: not reading '{}': over the limit of {} bytes", path,
                         kMaxEntryBytes));
        return std::nullopt;
      }
      bytes.resize(bytes.size() * 2);
    }
    ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      warn(fmt::format("kfuse cache: cannot read '{}': {}", path, errno_text(errno)));
      return std::nullopt;
    }
    if (n == 0)
      break;
    got += static_cast<std::size_t>(n);
  }
  bytes.resize(got);

  std::optional<std::string> payload = entry_payload(bytes, key);
  if (!payload)
    discard(path, seen);
  return payload;
}

bool DiskCache::store(const std::string &key, const std::string &payload) const {
  const std::string path = entry_path(key);
  auto skip = [&](const std::string &why) {
    warn(fmt::format("kfuse cache: not storing '{}': {}", path, why));
    return false;
  };
  std::error_code ec;
  std::filesystem::path dir(directory_);
  if (dir.has_parent_path())
    std::filesystem::create_directories(dir.parent_path(), ec);
  if (ec)
    return skip(
        fmt::format("cannot create directory '{}': {}", dir.parent_path().string(), ec.message()));
  if (::mkdir(directory_.c_str(), 0700) != 0 && errno != EEXIST)
    return skip(fmt::format("cannot create directory '{}': {}", directory_, errno_text(errno)));
  if (std::string why = untrusted_directory(); !why.empty())
    return skip(fmt::format("directory '{}': {}", directory_, why));

  const std::string temp = temp_path(directory_, key);
  FileDescriptor fd(
      ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0)
    return skip(fmt::format("cannot create '{}': {}", temp, errno_text(errno)));

  int error = write_all(fd.get(), entry_header(key, payload));
  if (error == 0)
    error = write_all(fd.get(), payload);
  if (error == 0 && ::fsync(fd.get()) != 0)
    error = errno;
  if (int close_error = fd.close_checked(); error == 0)
    error = close_error;
  if (error == 0 && ::rename(temp.c_str(), path.c_str()) != 0) {
    error = errno;
    ::unlink(temp.c_str());
    return skip(fmt::format("cannot rename '{}' to it: {}", temp, errno_text(error)));
  }
  if (error != 0) {
    ::unlink(temp.c_str());
    return skip(fmt::format("cannot write '{}': {}", temp, errno_text(error)));
  }
  return true;
}

} // namespace kfuse::rt
