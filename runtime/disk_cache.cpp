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

// Why `bytes` is not a well-formed entry for `key`, or "" when it is (`payload` is then set).
std::string malformed(std::string_view bytes, const std::string &key, std::string_view &payload) {
  if (bytes.empty())
    return "an empty file";
  if (bytes.size() < kHeaderSize)
    return fmt::format("truncated: {} bytes, shorter than the {}-byte header", bytes.size(),
                       kHeaderSize);
  if (bytes.substr(0, sizeof(kMagic)) != std::string_view(kMagic, sizeof(kMagic)))
    return "not a kfuse cache entry (no entry header)";
  if (const std::uint64_t version = take_le(bytes, 8, 4); version != DiskCache::kFormatVersion)
    return fmt::format("format version {} in a version-{} entry", version,
                       DiskCache::kFormatVersion);
  const std::uint64_t key_size = take_le(bytes, 12, 4), payload_size = take_le(bytes, 16, 8);
  const std::uint64_t body = bytes.size() - kHeaderSize;
  if (key_size > body || payload_size != body - key_size)
    return fmt::format("its header gives a {}-byte key and a {}-byte payload, the file holds {} "
                       "bytes after the header (truncated, or bytes appended)",
                       key_size, payload_size, body);
  if (bytes.substr(kHeaderSize, key_size) != key)
    return "it holds the entry of another key";
  payload = bytes.substr(kHeaderSize + key_size);
  if (hash64(payload, kChecksumSeed) != take_le(bytes, 24, 8))
    return "checksum mismatch: the payload is torn or corrupt";
  return "";
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

bool valid_key(std::string_view key) {
  bool ok = !key.empty() && key.size() <= 128;
  for (char c : key)
    ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                c == '_' || c == '-');
  return ok;
}

void check_key(const std::string &key) {
  if (!valid_key(key))
    throw Error(fmt::format("kfuse cache: invalid key '{}' (expected 1-128 characters of "
                            "[0-9A-Za-z_-])",
                            key));
}

// The key of an entry file named `name` (KEY.kfcVERSION, any version) with its version, or
// nothing where `name` is not an entry's.
std::optional<std::pair<std::string, std::string>> entry_name(const std::string &name) {
  const std::size_t dot = name.rfind(".kfc");
  if (dot == std::string::npos || dot + 4 == name.size() || !valid_key(name.substr(0, dot)))
    return std::nullopt;
  const std::string version = name.substr(dot + 4);
  if (version.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::make_pair(name.substr(0, dot), version);
}

// Creates `path` and every missing folder above it, each with mode 0700 whatever the umask
// (chmod after mkdir): the cache trusts what is in them only because nobody else can write
// there. Folders that exist are left as they are. 0, or the errno and the folder it failed on.
int make_private_directories(const std::string &path, std::string &failed) {
  for (std::size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string folder = path.substr(0, end);
    if (!folder.empty() && folder.back() != '/') { // "a//b": an empty name between slashes
      int error = 0;
      struct stat st {};
      if (::mkdir(folder.c_str(), 0700) == 0)
        error = ::chmod(folder.c_str(), 0700) == 0 ? 0 : errno;
      else if (errno != EEXIST)
        error = errno;
      else if (::stat(folder.c_str(), &st) != 0)
        error = errno;
      else if (!S_ISDIR(st.st_mode))
        error = ENOTDIR;
      if (error != 0) {
        failed = folder;
        return error;
      }
    }
    if (end == std::string::npos)
      return 0;
  }
}

// Reads the open entry `fd`, which fstat said holds `size` bytes, to EOF but never more than
// the limit; nothing (and `why`) where it cannot.
std::optional<std::string> read_entry(int fd, std::uint64_t size, std::string &why) {
  // Entries are only ever replaced by rename, never rewritten in place, so this file's
  // contents are fixed; read to EOF all the same rather than trust st_size.
  std::string bytes(static_cast<std::size_t>(size) + 1, '\0');
  std::size_t got = 0;
  for (;;) {
    if (got == bytes.size()) {
      if (bytes.size() > DiskCache::kMaxEntryBytes) {
        why = fmt::format("over the limit of {} bytes", DiskCache::kMaxEntryBytes);
        return std::nullopt;
      }
      bytes.resize(bytes.size() * 2);
    }
    ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      why = errno_text(errno);
      return std::nullopt;
    }
    if (n == 0)
      break;
    got += static_cast<std::size_t>(n);
  }
  bytes.resize(got);
  return bytes;
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
  const std::string ours = std::to_string(kFormatVersion);
  std::vector<std::string> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(directory_, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name[0] == '.')
      continue; // a store in progress, or one a killed process left
    if (auto entry = entry_name(name)) {
      if (entry->second == ours)
        out.push_back(entry->first);
      continue; // another format version: another build's entry
    }
    std::error_code type_error;
    if (it->symlink_status(type_error).type() == std::filesystem::file_type::directory)
      continue; // the cache's own structure: the tuning store lives in a folder of the cache
    warn(fmt::format("kfuse cache: skipping '{}': not a cache entry (entries are KEY.kfc{}, KEY "
                     "1-128 characters of [0-9A-Za-z_-])",
                     it->path().string(), kFormatVersion));
  }
  if (ec && ec != std::errc::no_such_file_or_directory) // no directory: no entries yet
    warn(fmt::format("kfuse cache: cannot list '{}': {}", directory_, ec.message()));
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> DiskCache::read_entry_file(const std::string &path,
                                                      struct stat &seen) const {
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
  std::string why;
  std::optional<std::string> bytes =
      read_entry(fd.get(), static_cast<std::uint64_t>(seen.st_size), why);
  if (!bytes)
    warn(fmt::format("kfuse cache: cannot read '{}': {}", path, why));
  return bytes;
}

std::optional<std::string> DiskCache::load(const std::string &key, const PayloadCheck &check,
                                           Corrupt corrupt) const {
  const std::string path = entry_path(key);
  struct stat seen {};
  const std::optional<std::string> bytes = read_entry_file(path, seen);
  if (!bytes)
    return std::nullopt;
  std::string_view payload;
  std::string why = malformed(*bytes, key, payload);
  if (why.empty() && check)
    why = check(payload);
  if (!why.empty()) {
    warn(fmt::format("kfuse cache: ignoring corrupt entry '{}': {}", path, why));
    if (corrupt == Corrupt::remove)
      discard(path, seen);
    return std::nullopt;
  }
  return std::string(payload);
}

bool DiskCache::store(const std::string &key, const std::string &payload) const {
  const std::string path = entry_path(key);
  auto skip = [&](const std::string &why) {
    warn(fmt::format("kfuse cache: not storing '{}': {}", path, why));
    return false;
  };
  std::string failed;
  if (int error = make_private_directories(directory_, failed); error != 0)
    return skip(fmt::format("cannot create directory '{}': {}", failed, errno_text(error)));
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
