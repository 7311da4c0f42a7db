// lower(): the whole path in one call, and KFUSE_DUMP / KFUSE_DUMP_DIR (ptx and sass, which the
// runtime dumps after NVRTC, included).
#include "compiler/lower.h"
#include "kfuse/error.h"
#include "kfuse/kfuse.h"
#include "runtime/sass_disassembler.h"

#include <cstdlib>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace kfuse;

namespace {

const char *kChain = R"(pipeline chain {
  dim N
  input  x: f32[N, 4]
  param  weight: f32[3, 4]
  param  scale: f32[3]
  return mul(linear(x, weight), scale)
}
)";

std::string read(const std::filesystem::path &p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::filesystem::path temp_dir() {
  char tmpl[] = "/tmp/kfuse-dump-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}

// Sets an environment variable for the scope of a test.
struct Env {
  std::string name;
  Env(const char *n, const std::string &value) : name(n) { setenv(n, value.c_str(), 1); }
  ~Env() { unsetenv(name.c_str()); }
};

} // namespace

TEST_CASE("lower: .kf text to plan and CUDA in one call, fused or not") {
  Lowered fused = lower(dsl::SourceFile("chain.kf", kChain), {ir::Mode::Eval, {}, true});
  CHECK(fused.graph.name == "chain");
  CHECK(fused.plan.kernels.size() == 1); // the scale folds into the GEMM epilogue
  CHECK(fused.program.source.find("extern \"C\"") != std::string::npos);
  Lowered unfused = lower(dsl::SourceFile("chain.kf", kChain), {ir::Mode::Eval, {}, false});
  CHECK(unfused.plan.kernels.size() == 2);
}

TEST_CASE("lower: KFUSE_DUMP=ir,plan,cuda,launch writes every step to KFUSE_DUMP_DIR") {
  const std::filesystem::path dir = temp_dir();
  {
    Env what("KFUSE_DUMP", "ir,plan,cuda,launch");
    Env where("KFUSE_DUMP_DIR", dir.string());
    Lowered l = lower(dsl::SourceFile("chain.kf", kChain), {ir::Mode::Train, {}, true});
    CHECK(read(dir / "chain.train.plan.txt").rfind("plan chain (mode train)", 0) == 0);
    CHECK(read(dir / "chain.train.cuda.cu") == l.program.source);
    CHECK(read(dir / "chain.train.0-parsed.kf").rfind("pipeline chain {", 0) == 0);
    CHECK(std::filesystem::exists(dir / "chain.train.1-canonicalize_linear.kf"));
    // Each kernel's launch description, as the runtime will evaluate it.
    const std::string launch = read(dir / "chain.train.launch.txt");
    CHECK(launch.rfind("k0_gemm: a block per tile of N x ", 0) == 0);
    CHECK(launch.find("block 128") != std::string::npos);
    // The SIMT GEMM's 128 x 128 variant, with the share of a wave from which runs take it.
    CHECK(launch.find("\n  variant k0_gemm_wide, run where its estimated time at the bound dims "
                      "is the lowest (k-block time 5 against k0_gemm's 2): a block per tile of "
                      "N x ") != std::string::npos);
    CHECK(launch.find("in 128 x 128 tiles; block 256") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
  Env bad("KFUSE_DUMP", "plan,asm");
  CHECK_THROWS_WITH_AS(
      lower(dsl::SourceFile("chain.kf", kChain), {}),
      doctest::Contains("KFUSE_DUMP: 'asm' is not one of ir, plan, cuda, launch, ptx, sass"),
      Error);
}

TEST_CASE("KFUSE_DUMP=ptx writes NVRTC's PTX of every kernel beside the other dumps") {
  const std::filesystem::path dir = temp_dir();
  {
    Env what("KFUSE_DUMP", "ptx");
    Env where("KFUSE_DUMP_DIR", dir.string());
    Options o;
    o.arch = "sm_90a";
    Pipeline::from_string(kChain, "chain.kf", o);
  }
  const std::string ptx = read(dir / "chain.train.ptx.ptx");
  CHECK(ptx.find(".target sm_90a") != std::string::npos);
  CHECK(ptx.find(".entry k0_gemm") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("KFUSE_DUMP=sass runs the toolkit's disassembler, and says so where there is none") {
  const std::filesystem::path dir = temp_dir();
  const std::string none = "KFUSE_DUMP=sass needs the CUDA toolkit's nvdisasm or cuobjdump; "
                           "neither is in " +
                           dir.string();
  CHECK_THROWS_WITH_AS(rt::disassemble_sass("cubin", {dir.string()}),
                       doctest::Contains(none.c_str()), Error);
  // A stand-in cuobjdump shows how it is called: -sass on a file holding the CUBIN.
  const std::filesystem::path tool = dir / "cuobjdump";
  {
    std::ofstream script(tool);
    script << "#!/bin/sh\necho \"args: $1\"; cat \"$2\"\n";
  }
  std::filesystem::permissions(tool, std::filesystem::perms::owner_all);
  CHECK(rt::disassemble_sass("CUBIN BYTES", {dir.string()}) == "args: -sass\nCUBIN BYTES");
  {
    std::ofstream script(tool);
    script << "#!/bin/sh\necho broken; exit 3\n";
  }
  CHECK_THROWS_WITH_AS(rt::disassemble_sass("x", {dir.string()}),
                       doctest::Contains("failed (status 3):\nbroken"), Error);
  // The search path: PATH's directories, then the toolkit's.
  const char *path = std::getenv("PATH");
  const std::string saved = path ? path : "";
  setenv("PATH", "/a:/b:/a", 1);
  const std::vector<std::string> dirs = rt::sass_tool_dirs();
  setenv("PATH", saved.c_str(), 1);
  CHECK(dirs == std::vector<std::string>{"/a", "/b", "/usr/local/cuda/bin"});
  std::filesystem::remove_all(dir);
}
