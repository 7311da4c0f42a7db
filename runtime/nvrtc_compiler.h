// JIT compilation of generated CUDA C++ with NVRTC, cached on disk.
//
// NVRTC produces a CUBIN for an explicit architecture, so compiling needs no GPU and no driver.
// compile() is thread-safe: every call owns its NVRTC program, and the only shared state is
// immutable after its (thread-safe) first initialisation.
#pragma once

#include "runtime/disk_cache.h"

#include <map>
#include <string>
#include <vector>

namespace kfuse::rt {

// One kernel's resource usage as ptxas reported it (--ptxas-options=-v).
struct KernelResources {
  std::string name; // the symbol: unmangled for extern "C" kernels, mangled otherwise
  int registers = 0;
  int shared_bytes = 0; // static shared memory; dynamic shared memory is chosen at launch
  int stack_bytes = 0;  // stack frame
  int spill_stores = 0; // bytes
  int spill_loads = 0;  // bytes
};

struct CompileRequest {
  std::string source;
  std::string file_name; // e.g. "gemm_scale_bn.cu": appears in the log and in errors
  std::string arch;      // a real architecture, e.g. "sm_90a" (Driver::arch() for this GPU)
  // Extra NVRTC options, after kfuse's own (--gpu-architecture, -std=c++17 unless one is given
  // here, --ptxas-options=-v). Setting the architecture here is an error: use `arch`.
  std::vector<std::string> options;
  std::map<std::string, std::string> headers; // include name -> text, for #include "name"
};

struct CompiledModule {
  std::string cubin;
  std::string log; // NVRTC's log of the compile that produced the cubin (also on a cache hit)
  std::vector<KernelResources> kernels; // in the order ptxas compiled them
  bool cache_hit = false;
  double compile_ms = 0; // wall time of this compile() call, cache lookup included
  std::string key;       // the cache key (computed even without a cache)
};

// Compiles `req`, or loads the result from `cache` (may be null) when an identical request was
// compiled before. The key covers the source, every header's name and text, the file name, the
// architecture, the options, the NVRTC version and library, and the cache format.
// Throws CompileError (with the annotated log) when NVRTC rejects the program or its options,
// kfuse::Error for an invalid request. A cache that cannot be used is skipped with a warning
// (see DiskCache): the compile still succeeds.
CompiledModule compile(const CompileRequest &req, const DiskCache *cache);

// The PTX of `req` (KFUSE_DUMP=ptx): a second NVRTC compile, for the virtual architecture of
// req.arch, made only when asked, never cached. Throws as compile() does.
std::string compile_ptx(const CompileRequest &req);

// The cache key compile() uses for `req`.
std::string compile_cache_key(const CompileRequest &req);

// NVRTC's version, "major.minor" (e.g. "13.0").
std::string nvrtc_version();

// Per-kernel resources from the ptxas verbose part of an NVRTC log. Only entry functions
// (kernels) are listed; device functions compiled separately are skipped.
std::vector<KernelResources> parse_ptxas_resources(const std::string &log);

} // namespace kfuse::rt
