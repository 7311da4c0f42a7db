// NVRTC compilation for sm_90a without a GPU: CUBINs, ptxas resources, and compile errors that
// quote the generated source.
#include "runtime/error.h"
#include "runtime/nvrtc_compiler.h"

#include <doctest/doctest.h>

#include <cctype>
#include <string>
#include <thread>
#include <vector>

using namespace kfuse::rt;

namespace {

bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

const KernelResources *find_kernel(const CompiledModule &m, const std::string &name) {
  for (const KernelResources &k : m.kernels)
    if (k.name == name)
      return &k;
  return nullptr;
}

// Two kernels: one with static shared memory, one with a dynamically indexed local array (a
// stack frame), plus a non-inlined device function that is not a kernel.
const char *const kTwoKernels = R"(#include "kfuse_test_defs.cuh"

__device__ __noinline__ float pick(const float *v, int i) { return v[i & 15]; }

extern "C" __global__ void reverse_block(const float *x, float *y) {
  __shared__ float tile[KFUSE_TEST_TILE];
  tile[threadIdx.x] = x[blockIdx.x * KFUSE_TEST_TILE + threadIdx.x];
  __syncthreads();
  y[blockIdx.x * KFUSE_TEST_TILE + threadIdx.x] = tile[KFUSE_TEST_TILE - 1 - threadIdx.x];
}

extern "C" __global__ void local_array(const float *x, float *y, int n) {
  float v[16];
  for (int i = 0; i < 16; ++i)
    v[i] = x[(threadIdx.x + i) % n];
  y[threadIdx.x] = pick(v, static_cast<int>(x[0]));
}
)";

CompileRequest two_kernels() {
  CompileRequest req;
  req.source = kTwoKernels;
  req.file_name = "two_kernels.cu";
  req.arch = "sm_90a";
  req.headers["kfuse_test_defs.cuh"] = "#pragma once\n#define KFUSE_TEST_TILE 128\n";
  return req;
}

} // namespace

TEST_CASE("runtime: nvrtc_version is major.minor") {
  std::string v = nvrtc_version();
  MESSAGE("NVRTC " << v);
  CHECK(v.find('.') != std::string::npos);
  CHECK(std::isdigit(static_cast<unsigned char>(v[0])));
}

TEST_CASE("runtime: NVRTC compiles for sm_90a without a GPU and reports resources") {
  CompiledModule m = compile(two_kernels(), nullptr);
  REQUIRE(m.cubin.size() > 4);
  CHECK(m.cubin.substr(0, 4) == "\x7f"
                                "ELF");
  CHECK_FALSE(m.cache_hit);
  CHECK(m.compile_ms > 0);
  CHECK(contains(m.log, "ptxas"));

  REQUIRE(m.kernels.size() == 2); // pick() is a device function, not a kernel
  const KernelResources *reverse = find_kernel(m, "reverse_block");
  const KernelResources *local = find_kernel(m, "local_array");
  REQUIRE(reverse != nullptr);
  REQUIRE(local != nullptr);
  CHECK(reverse->registers > 0);
  CHECK(reverse->shared_bytes == 128 * 4);
  CHECK(reverse->stack_bytes == 0);
  CHECK(local->registers > 0);
  CHECK(local->shared_bytes == 0);
  CHECK(local->stack_bytes >= 64); // v[16] lives on the stack: pick() takes its address
  for (const KernelResources &k : m.kernels)
    MESSAGE(k.name << ": " << k.registers << " registers, " << k.shared_bytes << " B smem, "
                   << k.stack_bytes << " B stack, " << k.spill_stores << "/" << k.spill_loads
                   << " B spill stores/loads");
}

TEST_CASE("runtime: a syntax error throws CompileError quoting the generated line") {
  CompileRequest req;
  req.file_name = "broken.cu";
  req.arch = "sm_90a";
  req.source = "extern \"C\" __global__ void broken(float *x) {\n"
               "  float y = x[0]\n"
               "  x[threadIdx.x] = y * kfuse_marker;\n"
               "}\n";
  try {
    compile(req, nullptr);
    FAIL("expected CompileError");
  } catch (const CompileError &e) {
    const std::string what = e.what();
    MESSAGE(what);
    CHECK(e.file_name() == "broken.cu");
    CHECK(contains(what, "broken.cu"));
    CHECK(contains(what, "sm_90a"));
    CHECK(contains(e.log(), "broken.cu(3): error"));
    // The offending generated line, numbered and marked, with the line before it.
    CHECK(contains(what, ">     3 |   x[threadIdx.x] = y * kfuse_marker;"));
    CHECK(contains(what, "      2 |   float y = x[0]"));
    // The quote sits right under the error it belongs to.
    std::size_t error = what.find("broken.cu(3): error");
    std::size_t quote = what.find(">     3 |");
    REQUIRE(error != std::string::npos);
    CHECK(quote > error);
    std::size_t next_error = what.find("broken.cu(", error + 1);
    CHECK(quote < next_error); // npos when there is no further error
  }
}

TEST_CASE("runtime: an error in a provided header quotes the header line") {
  CompileRequest req;
  req.file_name = "uses_header.cu";
  req.arch = "sm_90a";
  req.headers["bad.cuh"] = "#pragma once\n__device__ int bad() { return undefined_name_here; }\n";
  req.source = "#include \"bad.cuh\"\nextern \"C\" __global__ void k(int *x) { x[0] = bad(); }\n";
  try {
    compile(req, nullptr);
    FAIL("expected CompileError");
  } catch (const CompileError &e) {
    const std::string what = e.what();
    CHECK(contains(what, "bad.cuh(2): error"));
    CHECK(contains(what, ">     2 | __device__ int bad() { return undefined_name_here; }"));
  }
}

TEST_CASE("runtime: invalid requests and options are reported") {
  CompileRequest req = two_kernels();
  SUBCASE("unknown option: CompileError with NVRTC's message") {
    req.options.push_back("--no-such-option");
    try {
      compile(req, nullptr);
      FAIL("expected CompileError");
    } catch (const CompileError &e) {
      CHECK(contains(e.what(), "--no-such-option"));
    }
  }
  SUBCASE("architecture in options") {
    req.options.push_back("-arch=sm_80");
    CHECK_THROWS_AS(compile(req, nullptr), kfuse::Error);
  }
  SUBCASE("no architecture") {
    req.arch.clear();
    CHECK_THROWS_AS(compile(req, nullptr), kfuse::Error);
  }
  SUBCASE("virtual architecture") {
    req.arch = "compute_90a";
    CHECK_THROWS_AS(compile(req, nullptr), kfuse::Error);
  }
  SUBCASE("an explicit -std replaces the default") {
    req.options.push_back("-std=c++20");
    CompiledModule m = compile(req, nullptr);
    CHECK_FALSE(contains(m.log, "followed by"));
  }
}

TEST_CASE("runtime: compiles run concurrently from several threads") {
  constexpr int kThreads = 4;
  std::vector<CompiledModule> results(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        CompileRequest req = two_kernels();
        req.file_name = "thread" + std::to_string(t) + ".cu";
        req.headers["kfuse_test_defs.cuh"] =
            "#define KFUSE_TEST_TILE " + std::to_string(32 * (t + 1)) + "\n";
        results[t] = compile(req, nullptr);
      } catch (const std::exception &e) {
        errors[t] = e.what();
      }
    });
  }
  for (std::thread &t : threads)
    t.join();
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    CHECK(errors[t].empty());
    const KernelResources *reverse = find_kernel(results[t], "reverse_block");
    REQUIRE(reverse != nullptr);
    CHECK(reverse->shared_bytes == 32 * (t + 1) * 4);
  }
}

TEST_CASE("runtime: ptxas resource lines are parsed per kernel") {
  const std::string log = "ptxas info    : 0 bytes gmem\n"
                          "ptxas info    : Compiling entry function 'first' for 'sm_90a'\n"
                          "ptxas info    : Function properties for first\n"
                          "ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 "
                          "bytes spill loads\n"
                          "ptxas info    : Used 255 registers, used 1 barriers, 24 bytes "
                          "cumulative stack size, 1024 bytes smem, 380 bytes cmem[0]\n"
                          "ptxas info    : Compile time = 1.5 ms\n"
                          "ptxas info    : Function properties for helper\n"
                          "ptxas         .     96 bytes stack frame, 0 bytes spill stores, 0 "
                          "bytes spill loads\n"
                          "ptxas info    : Compiling entry function '_Z6secondPf' for 'sm_90a'\n"
                          "ptxas info    : Function properties for _Z6secondPf\n"
                          "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 "
                          "bytes spill loads\n"
                          "ptxas info    : Used 16 registers, used 0 barriers\n"
                          "ptxas warning : Registers are spilled to local memory in function "
                          "'first', 8 bytes spill stores, 12 bytes spill loads\n";
  std::vector<KernelResources> kernels = parse_ptxas_resources(log);
  REQUIRE(kernels.size() == 2);
  CHECK(kernels[0].name == "first");
  CHECK(kernels[0].registers == 255);
  CHECK(kernels[0].shared_bytes == 1024);
  CHECK(kernels[0].stack_bytes == 24);
  CHECK(kernels[0].spill_stores == 8);
  CHECK(kernels[0].spill_loads == 12);
  CHECK(kernels[1].name == "_Z6secondPf");
  CHECK(kernels[1].registers == 16);
  CHECK(kernels[1].shared_bytes == 0);
  CHECK(kernels[1].stack_bytes == 0); // the helper's 96 bytes are not the kernel's

  CHECK(parse_ptxas_resources("").empty());
  CHECK(parse_ptxas_resources("warning: something unrelated\n").empty());
}
