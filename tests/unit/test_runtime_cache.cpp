// The on-disk cache: entry validation, corruption recovery, concurrent writers, and the JIT's
// use of it (hits, misses, rebuilds). No GPU needed.
#include "runtime/disk_cache.h"
#include "runtime/error.h"
#include "runtime/nvrtc_compiler.h"

#include <doctest/doctest.h>

#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char **environ;

using namespace kfuse::rt;
namespace fs = std::filesystem;

namespace {

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
public:
  TempDir() {
    char pattern[] = "/tmp/kfuse-test-cache-XXXXXX";
    const char *made = ::mkdtemp(pattern);
    REQUIRE(made != nullptr);
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::string &path() const { return path_; }

private:
  std::string path_;
};

std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Payloads that validate themselves: "writer=W iteration=I size=S\n" followed by S bytes that
// are a function of (W, I). Sizes vary from tiny to a few hundred KiB so that a torn or
// interleaved write would show.
std::string make_payload(int writer, int iteration) {
  std::uint64_t state = hash64(std::to_string(writer) + "/" + std::to_string(iteration), 7);
  std::size_t size = 1 + state % 300000;
  std::string out = "writer=" + std::to_string(writer) + " iteration=" + std::to_string(iteration) +
                    " size=" + std::to_string(size) + "\n";
  for (std::size_t i = 0; i < size; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    out.push_back(static_cast<char>(state >> 56));
  }
  return out;
}

bool valid_payload(const std::string &payload) {
  int writer = -1;
  int iteration = -1;
  if (std::sscanf(payload.c_str(), "writer=%d iteration=%d", &writer, &iteration) != 2)
    return false;
  return payload == make_payload(writer, iteration);
}

const char *const kHelperName = "runtime: disk cache writer process (helper)";

// Stores and loads `key` in `dir` `iterations` times. Counts loads that returned something
// other than a payload some writer stored (must never happen: the checksum rejects it) and
// misses after this writer's first store (must never happen either: entries are replaced
// atomically, so once one exists a reader always finds a whole one).
struct HammerResult {
  int invalid = 0;
  int misses_after_store = 0;
  int hits = 0;
};

HammerResult hammer(const std::string &dir, const std::string &key, int writer, int iterations) {
  DiskCache cache(dir);
  HammerResult result;
  bool stored = false;
  for (int i = 0; i < iterations; ++i) {
    if (i % 2 == 0) {
      cache.store(key, make_payload(writer, i));
      stored = true;
    }
    if (std::optional<std::string> got = cache.load(key)) {
      if (valid_payload(*got))
        ++result.hits;
      else
        ++result.invalid;
    } else if (stored) {
      ++result.misses_after_store;
    }
  }
  return result;
}

const char *const kKernelSource = R"(#include "kfuse_test_scale.cuh"
extern "C" __global__ void scale(const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = x[i] * KFUSE_TEST_SCALE;
}
)";

CompileRequest scale_request() {
  CompileRequest req;
  req.source = kKernelSource;
  req.file_name = "scale.cu";
  req.arch = "sm_90a";
  req.headers["kfuse_test_scale.cuh"] = "#define KFUSE_TEST_SCALE 2.0f\n";
  return req;
}

} // namespace

TEST_CASE("runtime: hash_hex is a stable 128-bit hex digest") {
  const std::string empty = hash_hex("");
  CHECK(empty.size() == 32);
  CHECK(empty.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(hash_hex("kfuse") == hash_hex(std::string("kfuse")));
  CHECK(hash_hex("kfuse") != hash_hex("kfusf"));
  CHECK(hash_hex("kfuse") != hash_hex("kfuse "));
  CHECK(hash_hex(std::string(1, '\0')) != hash_hex(std::string(2, '\0')));
  CHECK(hash_hex(std::string(8, 'a')) != hash_hex(std::string(9, 'a')));
  // The two lanes are independent: neither half repeats the other.
  CHECK(empty.substr(0, 16) != empty.substr(16));
  CHECK(hash64("x", 1) != hash64("x", 2));

  // Pinned: cache keys on disk depend on these exact values. Changing the hash invalidates
  // every cache (bump the formats' versions too).
  CHECK(hash_hex("") == "996514a2fc986cc1b153ab8696d4238b");
  CHECK(hash_hex("kfuse") == "0d6823fc7d3346d126211c27c3bc2ad6");

  // Single-bit flips in a longer input change about half of the output bits.
  std::string text(1000, 'q');
  const std::string base = hash_hex(text);
  for (std::size_t at : {std::size_t(0), std::size_t(517), std::size_t(999)}) {
    std::string flipped = text;
    flipped[at] ^= 1;
    CHECK(hash_hex(flipped) != base);
  }
}

TEST_CASE("runtime: disk cache stores and loads entries") {
  TempDir tmp;
  DiskCache cache(tmp.path() + "/nested/dir");
  const std::string key = hash_hex("entry");

  CHECK_FALSE(cache.load(key).has_value()); // the directory does not exist yet: a miss
  cache.store(key, "payload");
  CHECK(cache.load(key) == std::optional<std::string>("payload"));
  cache.store(key, "replaced");
  CHECK(cache.load(key) == std::optional<std::string>("replaced"));

  const std::string binary("a\0b\0\xff", 5);
  cache.store("binary", binary);
  CHECK(cache.load("binary") == std::optional<std::string>(binary));
  cache.store("empty", "");
  CHECK(cache.load("empty") == std::optional<std::string>(""));

  // No temporary file is left behind.
  int files = 0;
  for (const auto &entry : fs::directory_iterator(cache.directory())) {
    CHECK(entry.path().filename().string()[0] != '.');
    ++files;
  }
  CHECK(files == 3);

  CHECK_THROWS_AS(cache.load("../escape"), kfuse::Error);
  CHECK_THROWS_AS(cache.store("", "x"), kfuse::Error);
  CHECK_THROWS_AS(cache.store(std::string(129, 'a'), "x"), kfuse::Error);
}

TEST_CASE("runtime: every corrupt disk cache entry is a warning saying why, a miss, and removed") {
  TempDir tmp;
  std::vector<std::string> warnings;
  DiskCache cache(tmp.path(), [&](const std::string &w) { warnings.push_back(w); });
  const std::string payload = make_payload(1, 1) + std::string(64, 'z');
  const std::string size_mismatch = "(truncated, or bytes appended)";
  const std::string checksum = "checksum mismatch: the payload is torn or corrupt";

  struct Corruption {
    const char *name;
    std::string (*apply)(const std::string &entry);
    std::string why; // in the warning
  };
  const Corruption corruptions[] = {
      {"flip the last payload byte",
       [](const std::string &e) {
         std::string c = e;
         c.back() ^= 0x40;
         return c;
       },
       checksum},
      {"flip a payload byte in the middle",
       [](const std::string &e) {
         std::string c = e;
         c[c.size() / 2] ^= 0x01;
         return c;
       },
       checksum},
      {"flip a checksum byte",
       [](const std::string &e) {
         std::string c = e;
         c[24] ^= 0x01;
         return c;
       },
       checksum},
      {"flip a size byte",
       [](const std::string &e) {
         std::string c = e;
         c[16] ^= 0x01;
         return c;
       },
       size_mismatch},
      {"flip a key size byte",
       [](const std::string &e) {
         std::string c = e;
         c[12] ^= 0x01;
         return c;
       },
       size_mismatch},
      {"flip a key byte",
       [](const std::string &e) {
         std::string c = e;
         c[32] ^= 0x01;
         return c;
       },
       "it holds the entry of another key"},
      {"flip the format version",
       [](const std::string &e) {
         std::string c = e;
         c[8] ^= 0x02;
         return c;
       },
       "format version 3 in a version-1 entry"},
      {"truncate to half", [](const std::string &e) { return e.substr(0, e.size() / 2); },
       size_mismatch},
      {"truncate by one byte", [](const std::string &e) { return e.substr(0, e.size() - 1); },
       size_mismatch},
      {"truncate inside the header", [](const std::string &e) { return e.substr(0, 10); },
       "truncated: 10 bytes, shorter than the 32-byte header"},
      {"empty file", [](const std::string &) { return std::string(); }, "an empty file"},
      {"append a byte", [](const std::string &e) { return e + "!"; }, size_mismatch},
      {"garbage",
       [](const std::string &) {
         std::string g;
         for (int i = 0; i < 5000; ++i)
           g.push_back(static_cast<char>(i * 131 + 7));
         return g;
       },
       "not a kfuse cache entry (no entry header)"},
  };

  for (const Corruption &corruption : corruptions) {
    CAPTURE(corruption.name);
    const std::string key = hash_hex(corruption.name);
    cache.store(key, payload);
    const std::string path = cache.entry_path(key);
    REQUIRE(fs::exists(path));
    write_file(path, corruption.apply(read_file(path)));

    warnings.clear();
    CHECK_FALSE(cache.load(key).has_value());
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].rfind("kfuse cache: ignoring corrupt entry '" + path + "': ", 0) == 0);
    CHECK(warnings[0].find(corruption.why) != std::string::npos);
    CHECK_FALSE(fs::exists(path)); // removed
    CHECK_FALSE(cache.load(key).has_value());
    CHECK(warnings.size() == 1); // a removed entry is a plain miss

    cache.store(key, payload); // rebuilt
    CHECK(cache.load(key) == std::optional<std::string>(payload));
  }

  SUBCASE("an entry filed under another key's name is not returned") {
    const std::string a = hash_hex("a");
    const std::string b = hash_hex("b");
    cache.store(a, "payload of a");
    fs::copy_file(cache.entry_path(a), cache.entry_path(b));
    warnings.clear();
    CHECK_FALSE(cache.load(b).has_value());
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0] == "kfuse cache: ignoring corrupt entry '" + cache.entry_path(b) +
                             "': it holds the entry of another key");
    CHECK_FALSE(fs::exists(cache.entry_path(b)));
    CHECK(cache.load(a) == std::optional<std::string>("payload of a"));
  }

  SUBCASE("a payload its reader refuses is corrupt too; a listing keeps what it finds corrupt") {
    const std::string key = hash_hex("decoded");
    cache.store(key, "payload");
    auto refuse = [](std::string_view bytes) {
      return bytes == "payload" ? std::string("does not decode") : std::string();
    };
    warnings.clear();
    CHECK_FALSE(cache.load(key, refuse, DiskCache::Corrupt::keep).has_value());
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0] ==
          "kfuse cache: ignoring corrupt entry '" + cache.entry_path(key) + "': does not decode");
    CHECK(cache.load(key) == std::optional<std::string>("payload")); // kept
    CHECK_FALSE(cache.load(key, refuse).has_value());
    CHECK_FALSE(fs::exists(cache.entry_path(key)));
  }
}

TEST_CASE("runtime: an unusable cache directory is a warning naming the path") {
  TempDir tmp;
  const std::string file = tmp.path() + "/not-a-directory";
  write_file(file, "x");
  std::vector<std::string> warnings;
  DiskCache cache(file + "/cache", [&](const std::string &w) { warnings.push_back(w); });
  CHECK_FALSE(cache.load("key").has_value()); // a path that cannot exist is a plain miss
  CHECK(warnings.empty());
  CHECK_FALSE(cache.store("key", "payload"));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == "kfuse cache: not storing '" + file +
                           "/cache/key.kfc1': cannot create directory '" + file +
                           "': Not a directory");
}

namespace {

// A cache in a fresh directory that records its warnings.
struct WatchedCache {
  TempDir tmp;
  std::vector<std::string> warnings;
  DiskCache cache{tmp.path() + "/cache", [this](const std::string &w) { warnings.push_back(w); }};
  std::string path(const std::string &key) const { return cache.entry_path(key); }
  bool warned(const std::string &text) const {
    for (const std::string &w : warnings)
      if (w.find(text) != std::string::npos)
        return true;
    return false;
  }
};

mode_t mode_of(const std::string &path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

} // namespace

TEST_CASE("runtime: the cache directory is created 0700 and entries 0600") {
  WatchedCache w;
  mode_t old_umask = ::umask(0);
  bool stored = w.cache.store("key", "payload");
  ::umask(old_umask);
  REQUIRE(stored);
  CHECK(mode_of(w.cache.directory()) == 0700);
  CHECK(mode_of(w.path("key")) == 0600);
  CHECK(w.warnings.empty());
}

TEST_CASE("runtime: every folder the cache creates is 0700 whatever the umask") {
  TempDir tmp;
  std::vector<std::string> warnings;
  DiskCache cache(tmp.path() + "/a/b//cache/",
                  [&](const std::string &w) { warnings.push_back(w); });
  const mode_t old_umask = ::umask(0);
  const bool stored = cache.store("key", "payload");
  ::umask(old_umask);
  REQUIRE(stored);
  CHECK(warnings.empty());
  for (const char *folder : {"/a", "/a/b", "/a/b/cache"}) {
    CAPTURE(folder);
    CHECK(mode_of(tmp.path() + folder) == 0700);
  }
  CHECK(mode_of(cache.entry_path("key")) == 0600);
  CHECK(mode_of(tmp.path()) == 0700); // a folder that existed is left as it was (mkdtemp's)
}

TEST_CASE("runtime: listing the cache skips and reports files that are not entries") {
  WatchedCache w;
  REQUIRE(w.cache.store("good", "payload"));
  const std::string dir = w.cache.directory();
  write_file(dir + "/bad.name.kfc1", "x");
  write_file(dir + "/notes.txt", "x");
  write_file(dir + "/other.kfc2", "another format version's entry");
  write_file(dir + "/.good.tmp.1.2.3", "a store in progress");
  fs::create_directory(dir + "/tuning");
  CHECK(w.cache.keys() == std::vector<std::string>{"good"});
  REQUIRE(w.warnings.size() == 2);
  for (const char *stray : {"bad.name.kfc1", "notes.txt"})
    CHECK(w.warned("kfuse cache: skipping '" + dir + "/" + stray +
                   "': not a cache entry (entries are KEY.kfc1, KEY 1-128 characters of "
                   "[0-9A-Za-z_-])"));
  CHECK(fs::exists(dir + "/bad.name.kfc1")); // listing deletes nothing
  CHECK(fs::exists(dir + "/notes.txt"));

  // No directory yet is no entries, and nothing to say.
  std::vector<std::string> warnings;
  DiskCache none(w.tmp.path() + "/absent", [&](const std::string &m) { warnings.push_back(m); });
  CHECK(none.keys().empty());
  CHECK(warnings.empty());
}

TEST_CASE("runtime: the cache refuses entries and directories others could have written") {
  WatchedCache w;
  REQUIRE(w.cache.store("key", "payload"));
  SUBCASE("a group-writable entry") {
    ::chmod(w.path("key").c_str(), 0620);
    CHECK_FALSE(w.cache.load("key").has_value());
    CHECK(w.warned("not reading '" + w.path("key") + "': writable by group or others (mode 0620)"));
  }
  SUBCASE("a world-writable directory (a shared mode-1777 cache)") {
    ::chmod(w.cache.directory().c_str(), 01777);
    CHECK_FALSE(w.cache.load("key").has_value());
    CHECK(w.warned("not using '" + w.cache.directory() +
                   "': writable by group or others (mode 1777)"));
    CHECK_FALSE(w.cache.store("other", "payload"));
    CHECK_FALSE(fs::exists(w.path("other")));
  }
  SUBCASE("an entry owned by another user") {
    if (::geteuid() != 0) {
      MESSAGE("not root: a foreign owner cannot be made here; the mode cases cover the check");
      return;
    }
    REQUIRE(::chown(w.path("key").c_str(), 65534, 65534) == 0);
    CHECK_FALSE(w.cache.load("key").has_value());
    CHECK(w.warned("not reading '" + w.path("key") +
                   "': owned by uid 65534, not by this user (uid 0)"));
  }
  SUBCASE("a directory owned by another user") {
    if (::geteuid() != 0) {
      MESSAGE("not root: a foreign owner cannot be made here; the mode cases cover the check");
      return;
    }
    REQUIRE(::chown(w.cache.directory().c_str(), 65534, 65534) == 0);
    CHECK_FALSE(w.cache.load("key").has_value());
    CHECK(w.warned("owned by uid 65534"));
  }
}

TEST_CASE("runtime: the cache opens only regular files, never following links or blocking") {
  WatchedCache w;
  REQUIRE(w.cache.store("real", "payload"));
  SUBCASE("a symlink to a valid entry") {
    REQUIRE(::symlink(w.path("real").c_str(), w.path("key").c_str()) == 0);
    CHECK_FALSE(w.cache.load("key").has_value());
    CHECK(w.warned("not reading '" + w.path("key") + "': a symbolic link"));
  }
  SUBCASE("a symlink to /dev/zero") {
    REQUIRE(::symlink("/dev/zero", w.path("key").c_str()) == 0);
    CHECK_FALSE(w.cache.load("key").has_value());
    CHECK(w.warned("a symbolic link"));
  }
  SUBCASE("a FIFO named like an entry (no writer: a blocking open would hang)") {
    REQUIRE(::mkfifo(w.path("key").c_str(), 0600) == 0);
    CHECK_FALSE(w.cache.load("key").has_value());
    CHECK(w.warned("not reading '" + w.path("key") + "': not a regular file"));
  }
  SUBCASE("an entry over the size limit") {
    {
      std::ofstream big(w.path("key"), std::ios::binary);
      big.seekp(static_cast<std::streamoff>(DiskCache::kMaxEntryBytes));
      big.put('x');
    }
    ::chmod(w.path("key").c_str(), 0600);
    CHECK_FALSE(w.cache.load("key").has_value());
    CHECK(w.warned("over the limit of 268435456"));
  }
  // A store replaces whatever was there with a regular entry.
  REQUIRE(w.cache.store("key", "fresh"));
  CHECK(w.cache.load("key") == std::optional<std::string>("fresh"));
}

TEST_CASE("runtime: disk cache location comes from the environment") {
  struct Saved {
    const char *name;
    std::optional<std::string> value;
  };
  std::vector<Saved> saved;
  for (const char *name : {"KFUSE_CACHE_DIR", "XDG_CACHE_HOME", "HOME"}) {
    const char *v = std::getenv(name);
    saved.push_back({name, v ? std::optional<std::string>(v) : std::nullopt});
  }

  ::setenv("KFUSE_CACHE_DIR", "/tmp/kfuse-explicit", 1);
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  ::setenv("HOME", "/tmp/home", 1);
  CHECK(DiskCache::from_environment().directory() == "/tmp/kfuse-explicit");
  ::setenv("KFUSE_CACHE_DIR", "", 1); // empty counts as unset
  CHECK(DiskCache::from_environment().directory() == "/tmp/xdg/kfuse");
  ::unsetenv("XDG_CACHE_HOME");
  CHECK(DiskCache::from_environment().directory() == "/tmp/home/.cache/kfuse");
  ::unsetenv("HOME");
  ::unsetenv("KFUSE_CACHE_DIR");
  CHECK_THROWS_AS(DiskCache::from_environment(), kfuse::Error);

  for (const Saved &s : saved) {
    if (s.value)
      ::setenv(s.name, s.value->c_str(), 1);
    else
      ::unsetenv(s.name);
  }
}

TEST_CASE("runtime: disk cache under concurrent threads") {
  TempDir tmp;
  const std::string key = hash_hex("threads");
  std::vector<HammerResult> results(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] { results[t] = hammer(tmp.path(), key, t, 60); });
  for (std::thread &t : threads)
    t.join();
  for (const HammerResult &r : results) {
    CHECK(r.invalid == 0);
    CHECK(r.misses_after_store == 0);
  }
  std::optional<std::string> last = DiskCache(tmp.path()).load(key);
  REQUIRE(last.has_value());
  CHECK(valid_payload(*last));
}

// Run by the test below in child processes (skipped otherwise): the child re-executes this
// binary with this test case selected, so it starts with a clean process (no threads, no
// NVRTC state inherited through fork).
// clang-format off
TEST_CASE(kHelperName * doctest::skip()) {
  // clang-format on
  const char *dir = std::getenv("KFUSE_TEST_CACHE_DIR");
  const char *key = std::getenv("KFUSE_TEST_CACHE_KEY");
  const char *writer = std::getenv("KFUSE_TEST_CACHE_WRITER");
  if (!dir || !key || !writer)
    return;
  HammerResult r = hammer(dir, key, std::atoi(writer), 120);
  CHECK(r.invalid == 0);
  CHECK(r.misses_after_store == 0);
  CHECK(r.hits > 0);
  // Tells the parent this test case really ran (a filter that matched nothing would exit 0).
  std::ofstream(std::string(dir) + "/ran-" + writer) << "ok";
}

TEST_CASE("runtime: disk cache under concurrent processes") {
  TempDir tmp;
  const std::string key = hash_hex("processes");
  constexpr int kChildren = 4;

  std::vector<std::string> env_strings;
  for (char **e = environ; *e; ++e)
    env_strings.emplace_back(*e);
  env_strings.push_back("KFUSE_TEST_CACHE_DIR=" + tmp.path());
  env_strings.push_back("KFUSE_TEST_CACHE_KEY=" + key);

  std::vector<pid_t> children;
  for (int child = 0; child < kChildren; ++child) {
    std::vector<std::string> env = env_strings;
    env.push_back("KFUSE_TEST_CACHE_WRITER=" + std::to_string(100 + child));
    std::vector<char *> envp;
    for (std::string &s : env)
      envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string self = "/proc/self/exe";
    std::string filter = std::string("--test-case=") + kHelperName;
    std::string no_skip = "--no-skip";
    std::string minimal = "--minimal";
    char *argv[] = {self.data(), filter.data(), no_skip.data(), minimal.data(), nullptr};
    pid_t pid = 0;
    REQUIRE(::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) == 0);
    children.push_back(pid);
  }

  // The parent stores and loads too while the children run.
  HammerResult mine = hammer(tmp.path(), key, 1, 120);
  CHECK(mine.invalid == 0);
  CHECK(mine.misses_after_store == 0);

  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  for (int child = 0; child < kChildren; ++child)
    CHECK(fs::exists(tmp.path() + "/ran-" + std::to_string(100 + child)));
  std::optional<std::string> last = DiskCache(tmp.path()).load(key);
  REQUIRE(last.has_value());
  CHECK(valid_payload(*last));
  MESSAGE("parent: " << mine.hits << " hits out of 120 loads");
}

TEST_CASE("runtime: compile cache hits, misses and rebuilds") {
  TempDir tmp;
  DiskCache cache(tmp.path());
  const CompileRequest req = scale_request();

  CompiledModule first = compile(req, &cache);
  CHECK_FALSE(first.cache_hit);
  CHECK(first.key == compile_cache_key(req));
  CHECK(cache.load(first.key).has_value());

  CompiledModule second = compile(req, &cache);
  CHECK(second.cache_hit);
  CHECK(second.key == first.key);
  CHECK(second.cubin == first.cubin);
  CHECK(second.log == first.log);
  REQUIRE(second.kernels.size() == 1);
  CHECK(second.kernels[0].name == "scale");
  CHECK(second.kernels[0].registers == first.kernels[0].registers);
  CHECK(second.kernels[0].registers > 0);
  MESSAGE("compile " << first.compile_ms << " ms, cache hit " << second.compile_ms << " ms");

  SUBCASE("what the binary depends on is in the key") {
    CompileRequest changed = req;
    changed.options.push_back("-DKFUSE_UNUSED=1");
    CHECK_FALSE(compile(changed, &cache).cache_hit);
    CHECK(compile(changed, &cache).cache_hit);

    changed = req;
    changed.headers["kfuse_test_scale.cuh"] = "#define KFUSE_TEST_SCALE 3.0f\n";
    CHECK(compile_cache_key(changed) != first.key);

    changed = req;
    changed.arch = "sm_80";
    CHECK(compile_cache_key(changed) != first.key);

    changed = req;
    changed.source += "\n";
    CHECK(compile_cache_key(changed) != first.key);

    changed = req;
    changed.headers["another.cuh"] = "";
    CHECK(compile_cache_key(changed) != first.key);

    changed = req;
    changed.file_name = "renamed.cu";
    CHECK(compile_cache_key(changed) != first.key);

    CHECK(compile(req, &cache).cache_hit); // the original entry is still there
  }

  SUBCASE("a corrupt entry is rebuilt") {
    const std::string path = cache.entry_path(first.key);
    std::string bytes = read_file(path);
    bytes[bytes.size() - 100] ^= 0x10; // inside the stored module
    write_file(path, bytes);

    CompiledModule rebuilt = compile(req, &cache);
    CHECK_FALSE(rebuilt.cache_hit);
    CHECK(rebuilt.cubin == first.cubin);
    CompiledModule again = compile(req, &cache);
    CHECK(again.cache_hit);
    CHECK(again.cubin == first.cubin);
  }

  SUBCASE("a truncated entry is rebuilt") {
    const std::string path = cache.entry_path(first.key);
    write_file(path, read_file(path).substr(0, 40));
    CHECK_FALSE(compile(req, &cache).cache_hit);
    CHECK(compile(req, &cache).cache_hit);
  }

  SUBCASE("without a cache every compile is a miss") {
    CHECK_FALSE(compile(req, nullptr).cache_hit);
    CHECK_FALSE(compile(req, nullptr).cache_hit);
  }
}

namespace {

std::string le64(std::int64_t v) {
  std::string out;
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff));
  return out;
}

} // namespace

TEST_CASE("runtime: a compiled module that does not decode, or whose resources are out of range, "
          "is a warning and a recompile") {
  TempDir tmp;
  std::vector<std::string> warnings;
  DiskCache cache(tmp.path(), [&](const std::string &w) { warnings.push_back(w); });
  const CompileRequest req = scale_request();
  const CompiledModule first = compile(req, &cache);
  REQUIRE(first.kernels.size() == 1);
  const std::optional<std::string> stored = cache.load(first.key);
  REQUIRE(stored.has_value());
  // The payload: "kfuse-module", the cubin, the log, the kernel count, then per kernel its
  // name and five 64-bit resource values (registers first); every text after its 64-bit size.
  const std::size_t registers_at =
      8 + 12 + 8 + first.cubin.size() + 8 + first.log.size() + 8 + 8 + first.kernels[0].name.size();
  REQUIRE(stored->substr(registers_at, 8) == le64(first.kernels[0].registers));
  auto with_registers = [&](std::int64_t registers) {
    std::string p = *stored;
    p.replace(registers_at, 8, le64(registers));
    return p;
  };
  struct Case {
    std::string payload, why;
  };
  for (const Case &c : {
           Case{"not a module", "not a compiled module"},
           Case{*stored + "x", "the compiled module is truncated or has trailing bytes"},
           Case{stored->substr(0, stored->size() - 3),
                "the compiled module is truncated or has trailing bytes"},
           Case{with_registers(999), "kernel 'scale' has 999 registers, outside [0, 255]"},
           Case{with_registers(-1), "kernel 'scale' has -1 registers, outside [0, 255]"},
       }) {
    CAPTURE(c.why);
    REQUIRE(cache.store(first.key, c.payload)); // a valid checksum over it
    warnings.clear();
    const CompiledModule again = compile(req, &cache);
    CHECK_FALSE(again.cache_hit);
    CHECK(again.cubin == first.cubin);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0] ==
          "kfuse cache: ignoring corrupt entry '" + cache.entry_path(first.key) + "': " + c.why);
    CHECK(compile(req, &cache).cache_hit); // replaced by the recompile
  }
}

TEST_CASE("runtime: a cache that cannot be written is skipped, never a failed compile") {
  TempDir tmp;
  const std::string file = tmp.path() + "/file";
  write_file(file, "x");
  std::vector<std::string> warnings;
  DiskCache cache(file + "/kfuse", [&](const std::string &w) { warnings.push_back(w); });
  CompiledModule m = compile(scale_request(), &cache);
  CHECK_FALSE(m.cubin.empty());
  CHECK_FALSE(m.cache_hit);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find(file + "/kfuse") != std::string::npos);
}

TEST_CASE("runtime: a read-only cache directory with a corrupt entry still compiles") {
  TempDir tmp;
  std::vector<std::string> warnings;
  DiskCache cache(tmp.path(), [&](const std::string &w) { warnings.push_back(w); });
  const CompileRequest req = scale_request();
  const std::string path = cache.entry_path(compile_cache_key(req));
  write_file(path, "corrupt");
  ::chmod(path.c_str(), 0400);
  ::chmod(tmp.path().c_str(), 0500);
  CompiledModule m = compile(req, &cache);
  ::chmod(tmp.path().c_str(), 0700);
  CHECK_FALSE(m.cubin.empty());
  CHECK_FALSE(m.cache_hit);
  REQUIRE_FALSE(warnings.empty());
  CHECK(warnings[0] == "kfuse cache: ignoring corrupt entry '" + path +
                           "': truncated: 7 bytes, shorter than the 32-byte header");
  // Root writes read-only directories; anyone else gets the warning that the store was skipped.
  if (::geteuid() != 0)
    CHECK(warnings.size() == 2);
  else
    CHECK(cache.load(compile_cache_key(req)).has_value());
}
