#include "runtime/nvrtc_compiler.h"

#include "runtime/error.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <nvrtc.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace kfuse::rt {
namespace {

// Bumped whenever the options kfuse adds, the key material or the payload layout change.
constexpr int kCompileFormatVersion = 1;

void check_nvrtc(nvrtcResult r, const char *call) {
  if (r != NVRTC_SUCCESS)
    throw Error(fmt::format("{} failed: {}", call, nvrtcGetErrorString(r)));
}

// nvrtcProgram, destroyed on every path.
class Program {
public:
  explicit Program(const CompileRequest &req) {
    std::vector<const char *> names;
    std::vector<const char *> texts;
    for (const auto &[name, text] : req.headers) {
      names.push_back(name.c_str());
      texts.push_back(text.c_str());
    }
    check_nvrtc(nvrtcCreateProgram(&program_, req.source.c_str(), req.file_name.c_str(),
                                   static_cast<int>(names.size()), texts.data(), names.data()),
                "nvrtcCreateProgram");
  }
  ~Program() { nvrtcDestroyProgram(&program_); }
  Program(const Program &) = delete;
  Program &operator=(const Program &) = delete;
  nvrtcProgram get() const { return program_; }

private:
  nvrtcProgram program_ = nullptr;
};

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::vector<std::string> full_options(const CompileRequest &req) {
  bool has_std = false;
  for (const std::string &option : req.options) {
    if (starts_with(option, "-arch") || starts_with(option, "--gpu-architecture"))
      throw Error(fmt::format("compile {}: option '{}' sets the architecture; set "
                              "CompileRequest::arch instead",
                              req.file_name, option));
    has_std = has_std || starts_with(option, "-std") || starts_with(option, "--std");
  }
  std::vector<std::string> options = {"--gpu-architecture=" + req.arch};
  if (!has_std)
    options.push_back("-std=c++17");
  options.push_back("--ptxas-options=-v");
  // NVRTC 12.9+ keeps its own cache of compiled programs beside the driver's JIT cache where a
  // driver is installed; a hit there skips ptxas and with it the resource report parsed below.
  // kfuse's disk cache already stores the binary and that report.
  options.push_back("--no-cache");
  // NVVM's optimizer and ptxas each work one kernel at a time by default; a pipeline's kernels
  // (a GEMM, a column kernel, a row kernel) are independent, so both run them on every CPU. On
  // the H100 machine (16 CPUs) this cut gemm_bn_scale_softmax's cold compile from 2.7 to 1.7 s
  // (train, tf32). ptxas still prints each kernel's report whole, in one piece.
  options.push_back("--split-compile=0");
  options.push_back("--ptxas-options=--split-compile=0");
  options.insert(options.end(), req.options.begin(), req.options.end());
  return options;
}

// What identifies the compiler beyond its major.minor: the shared library NVRTC was loaded from
// (file name and size), so a patch release of the toolkit does not reuse older binaries.
const std::string &nvrtc_identity() {
  static const std::string identity = [] {
    std::string id = "nvrtc " + nvrtc_version();
    Dl_info info{};
    if (dladdr(reinterpret_cast<void *>(&nvrtcVersion), &info) != 0 && info.dli_fname) {
      std::string file = info.dli_fname;
      if (char *real = realpath(info.dli_fname, nullptr)) {
        file = real;
        std::free(real);
      }
      struct stat st {};
      std::string base = file.substr(file.find_last_of('/') + 1);
      // Only a shared NVRTC identifies the compiler; a statically linked one would make the
      // key depend on the executable.
      if (base.find("nvrtc") != std::string::npos && ::stat(file.c_str(), &st) == 0)
        id += fmt::format(" {} {}", base, static_cast<long long>(st.st_size));
    }
    return id;
  }();
  return identity;
}

// ---- payload serialisation -----------------------------------------------------------------

class PayloadWriter {
public:
  void integer(std::uint64_t v) {
    for (int i = 0; i < 8; ++i)
      out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void text(std::string_view s) {
    integer(s.size());
    out_.append(s);
  }
  std::string take() { return std::move(out_); }

private:
  std::string out_;
};

// Reads what PayloadWriter wrote; any overrun marks the reader failed instead of throwing.
class PayloadReader {
public:
  explicit PayloadReader(std::string_view in) : in_(in) {}
  std::uint64_t integer() {
    if (in_.size() < 8) {
      ok_ = false;
      return 0;
    }
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i)
      v = (v << 8) | static_cast<unsigned char>(in_[i]);
    in_.remove_prefix(8);
    return v;
  }
  std::string text() {
    std::uint64_t n = integer();
    if (!ok_ || n > in_.size()) {
      ok_ = false;
      return {};
    }
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return in_.empty(); }

private:
  std::string_view in_;
  bool ok_ = true;
};

constexpr std::string_view kPayloadTag = "kfuse-module";

std::string encode(const CompiledModule &m) {
  PayloadWriter w;
  w.text(kPayloadTag);
  w.text(m.cubin);
  w.text(m.log);
  w.integer(m.kernels.size());
  for (const KernelResources &k : m.kernels) {
    w.text(k.name);
    for (int v : {k.registers, k.shared_bytes, k.stack_bytes, k.spill_stores, k.spill_loads})
      w.integer(static_cast<std::uint64_t>(static_cast<std::int64_t>(v)));
  }
  return w.take();
}

// The ranges ptxas can report, so that a value read back from an entry is one a compile could
// have given: 255 registers per thread on every architecture kfuse targets, 227 KiB of shared
// memory per block (sm_90), 512 KiB of local memory per thread (stack frames and spills).
constexpr std::int64_t kMaxRegisters = 255;
constexpr std::int64_t kMaxSharedBytes = 227 * 1024;
constexpr std::int64_t kMaxLocalBytes = 512 * 1024;

// The module `payload` holds, or nothing with `why`.
std::optional<CompiledModule> decode(std::string_view payload, std::string &why) {
  PayloadReader r(payload);
  CompiledModule m;
  if (r.text() != kPayloadTag) {
    why = "not a compiled module";
    return std::nullopt;
  }
  m.cubin = r.text();
  m.log = r.text();
  std::uint64_t count = r.integer();
  for (std::uint64_t i = 0; r.ok() && why.empty() && i < count; ++i) {
    KernelResources k;
    k.name = r.text();
    const struct {
      const char *what;
      int *value;
      std::int64_t most;
    } fields[] = {{"registers", &k.registers, kMaxRegisters},
                  {"static shared bytes", &k.shared_bytes, kMaxSharedBytes},
                  {"stack bytes", &k.stack_bytes, kMaxLocalBytes},
                  {"spill store bytes", &k.spill_stores, kMaxLocalBytes},
                  {"spill load bytes", &k.spill_loads, kMaxLocalBytes}};
    for (const auto &field : fields) {
      const auto v = static_cast<std::int64_t>(r.integer());
      if (v >= 0 && v <= field.most)
        *field.value = static_cast<int>(v);
      else if (why.empty())
        why = fmt::format("kernel '{}' has {} {}, outside [0, {}]", k.name, v, field.what,
                          field.most);
    }
    m.kernels.push_back(std::move(k));
  }
  if (why.empty() && (!r.ok() || !r.at_end()))
    why = "the compiled module is truncated or has trailing bytes";
  else if (why.empty() && m.cubin.empty())
    why = "the compiled module has no CUBIN";
  if (!why.empty())
    return std::nullopt;
  return m;
}

// ---- logs ----------------------------------------------------------------------------------

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    std::size_t end = text.find('\n');
    lines.push_back(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
  }
  return lines;
}

// The integer that ends right before `suffix` in `line` ("128 bytes stack frame"), or 0.
int number_before(std::string_view line, std::string_view suffix) {
  std::size_t at = line.find(suffix);
  if (at == std::string_view::npos)
    return 0;
  std::size_t end = at;
  while (end > 0 && line[end - 1] == ' ')
    --end;
  std::size_t begin = end;
  while (begin > 0 && line[begin - 1] >= '0' && line[begin - 1] <= '9')
    --begin;
  return begin == end ? 0 : std::atoi(std::string(line.substr(begin, end - begin)).c_str());
}

// For "FILE(LINE): error: ..." or "FILE(LINE): catastrophic error: ...", FILE and LINE.
std::optional<std::pair<std::string, int>> error_location(std::string_view line) {
  std::size_t close = line.find("): ");
  if (close == std::string_view::npos)
    return std::nullopt;
  std::string_view rest = line.substr(close + 3);
  if (!starts_with(rest, "error") && !starts_with(rest, "catastrophic error"))
    return std::nullopt;
  std::size_t open = line.rfind('(', close);
  if (open == std::string_view::npos || open == 0 || open + 1 == close)
    return std::nullopt;
  int number = 0;
  for (char c : line.substr(open + 1, close - open - 1)) {
    if (c < '0' || c > '9')
      return std::nullopt;
    number = number * 10 + (c - '0');
  }
  return std::make_pair(std::string(line.substr(0, open)), number);
}

// The log with, under each error that points into the generated source or one of the headers,
// that line (marked '>') and the one before it, numbered.
std::string annotate_log(const CompileRequest &req, std::string_view log) {
  std::string out;
  for (std::string_view line : split_lines(log)) {
    out.append(line).push_back('\n');
    auto location = error_location(line);
    if (!location)
      continue;
    const auto &[file, number] = *location;
    const std::string *text = nullptr;
    if (file == req.file_name)
      text = &req.source;
    else if (auto it = req.headers.find(file); it != req.headers.end())
      text = &it->second;
    if (text == nullptr)
      continue;
    std::vector<std::string_view> source = split_lines(*text);
    if (number < 1 || number > static_cast<int>(source.size()))
      continue;
    for (int n = std::max(1, number - 1); n <= number; ++n)
      out += fmt::format("{} {:>5} | {}\n", n == number ? '>' : ' ', n, source[n - 1]);
  }
  return out;
}

double milliseconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Compiles `program` with `options` and returns NVRTC's log. Throws CompileError, with the log
// annotated with source lines, when NVRTC rejects it.
std::string compile_program(const Program &program, const CompileRequest &req,
                            const std::vector<std::string> &options) {
  std::vector<const char *> option_pointers;
  for (const std::string &option : options)
    option_pointers.push_back(option.c_str());
  nvrtcResult result = nvrtcCompileProgram(program.get(), static_cast<int>(option_pointers.size()),
                                           option_pointers.data());

  std::size_t log_size = 0;
  check_nvrtc(nvrtcGetProgramLogSize(program.get(), &log_size), "nvrtcGetProgramLogSize");
  std::string log(log_size, '\0');
  if (log_size > 0)
    check_nvrtc(nvrtcGetProgramLog(program.get(), log.data()), "nvrtcGetProgramLog");
  while (!log.empty() && log.back() == '\0')
    log.pop_back();

  if (result != NVRTC_SUCCESS) {
    std::string joined;
    for (const std::string &option : options)
      joined += (joined.empty() ? "" : " ") + option;
    std::string message =
        fmt::format("NVRTC failed to compile {} for {} ({}):\n{}options: {}", req.file_name,
                    req.arch, nvrtcGetErrorString(result), annotate_log(req, log), joined);
    throw CompileError(message, req.file_name, log);
  }
  return log;
}

} // namespace

std::string nvrtc_version() {
  int major = 0;
  int minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return fmt::format("{}.{}", major, minor);
}

std::vector<KernelResources> parse_ptxas_resources(const std::string &log) {
  // ptxas reports, per entry function:
  //   ptxas info    : Compiling entry function 'k' for 'sm_90a'
  //   ptxas info    : Function properties for k
  //   ptxas         .     128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
  //   ptxas info    : Used 28 registers, used 1 barriers, ..., 256 bytes smem
  // and "Function properties" blocks for non-inlined device functions, which are not kernels.
  std::vector<KernelResources> kernels;
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  auto find = [&](std::string_view name) {
    for (std::size_t i = 0; i < kernels.size(); ++i)
      if (kernels[i].name == name)
        return i;
    return kNone;
  };
  std::size_t entry = kNone;      // the kernel being compiled
  std::size_t properties = kNone; // the kernel the next stack-frame line is about
  constexpr std::string_view kEntry = "Compiling entry function '";
  constexpr std::string_view kProperties = "Function properties for ";
  for (std::string_view line : split_lines(log)) {
    if (!starts_with(line, "ptxas"))
      continue;
    if (std::size_t at = line.find(kEntry); at != std::string_view::npos) {
      std::string_view rest = line.substr(at + kEntry.size());
      std::string_view name = rest.substr(0, rest.find('\''));
      entry = find(name);
      if (entry == kNone) {
        kernels.push_back(KernelResources{std::string(name)});
        entry = kernels.size() - 1;
      }
      properties = kNone;
    } else if (std::size_t from = line.find(kProperties); from != std::string_view::npos) {
      std::string_view name = line.substr(from + kProperties.size());
      while (!name.empty() && (name.back() == ' ' || name.back() == '\r'))
        name.remove_suffix(1);
      properties = find(name); // kNone for device functions
    } else if (line.find("bytes stack frame") != std::string_view::npos) {
      if (properties != kNone) {
        kernels[properties].stack_bytes = number_before(line, "bytes stack frame");
        kernels[properties].spill_stores = number_before(line, "bytes spill stores");
        kernels[properties].spill_loads = number_before(line, "bytes spill loads");
      }
      properties = kNone;
    } else if (line.find("Used ") != std::string_view::npos &&
               line.find(" registers") != std::string_view::npos) {
      if (entry != kNone) {
        kernels[entry].registers = number_before(line, "registers");
        kernels[entry].shared_bytes = number_before(line, "bytes smem");
      }
    }
  }
  return kernels;
}

std::string compile_cache_key(const CompileRequest &req) {
  // Length-prefixed fields, so no two different requests serialise to the same text.
  std::string material;
  auto field = [&](std::string_view s) {
    material += fmt::format("{}:", s.size());
    material.append(s);
  };
  field(fmt::format("kfuse-compile {}", kCompileFormatVersion));
  field(nvrtc_identity());
  field(req.arch);
  field(req.file_name);
  field(req.source);
  field(std::to_string(req.headers.size()));
  for (const auto &[name, text] : req.headers) {
    field(name);
    field(text);
  }
  field(std::to_string(req.options.size()));
  for (const std::string &option : req.options)
    field(option);
  return hash_hex(material);
}

CompiledModule compile(const CompileRequest &req, const DiskCache *cache) {
  const auto start = std::chrono::steady_clock::now();
  if (req.arch.empty())
    throw Error(fmt::format("compile {}: no target architecture (CompileRequest::arch, e.g. "
                            "\"sm_90a\")",
                            req.file_name));
  if (req.file_name.empty())
    throw Error("compile: CompileRequest::file_name is empty (errors would name no file)");
  const std::vector<std::string> options = full_options(req);
  const std::string key = compile_cache_key(req);

  if (cache != nullptr) {
    // An entry that passed the cache's checksum but does not decode is corrupt (or comes from
    // a build that wrote another payload under the same format version): the cache warns, and
    // the compile below replaces it.
    std::optional<CompiledModule> hit;
    auto decodes = [&](std::string_view payload) {
      std::string why;
      hit = decode(payload, why);
      return why;
    };
    if (cache->load(key, decodes) && hit) {
      hit->cache_hit = true;
      hit->key = key;
      hit->compile_ms = milliseconds_since(start);
      return std::move(*hit);
    }
  }

  Program program(req);
  std::string log = compile_program(program, req, options);
  CompiledModule module;
  std::size_t cubin_size = 0;
  check_nvrtc(nvrtcGetCUBINSize(program.get(), &cubin_size), "nvrtcGetCUBINSize");
  if (cubin_size == 0)
    throw Error(fmt::format("compile {}: NVRTC produced no CUBIN for '{}' (the architecture must "
                            "be a real GPU, sm_XY, not a virtual compute_XY)",
                            req.file_name, req.arch));
  module.cubin.resize(cubin_size);
  check_nvrtc(nvrtcGetCUBIN(program.get(), module.cubin.data()), "nvrtcGetCUBIN");
  module.kernels = parse_ptxas_resources(log);
  module.log = std::move(log);
  module.key = key;
  if (cache != nullptr)
    cache->store(key, encode(module));
  module.compile_ms = milliseconds_since(start);
  return module;
}

std::string compile_ptx(const CompileRequest &req) {
  if (req.arch.rfind("sm_", 0) != 0)
    throw Error(fmt::format("compile {}: PTX needs a real architecture sm_XY, got '{}'",
                            req.file_name, req.arch));
  // The virtual architecture of the same features (sm_90a -> compute_90a): NVRTC then stops at
  // PTX. ptxas does not run, so its resource report is not asked for.
  std::vector<std::string> options;
  for (const std::string &option : full_options(req))
    if (option != "--ptxas-options=-v")
      options.push_back(option.rfind("--gpu-architecture=", 0) == 0
                            ? "--gpu-architecture=compute_" + req.arch.substr(3)
                            : option);
  Program program(req);
  compile_program(program, req, options);
  std::size_t size = 0;
  check_nvrtc(nvrtcGetPTXSize(program.get(), &size), "nvrtcGetPTXSize");
  std::string ptx(size, '\0');
  check_nvrtc(nvrtcGetPTX(program.get(), ptx.data()), "nvrtcGetPTX");
  while (!ptx.empty() && ptx.back() == '\0')
    ptx.pop_back();
  return ptx;
}

} // namespace kfuse::rt
