// lower(): the whole path in one call, and KFUSE_DUMP / KFUSE_DUMP_DIR.
#include "compiler/lower.h"
#include "kfuse/error.h"

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

// Sets an environment variable for the scope of a test.
struct Env {
  std::string name;
  Env(const char *n, const std::string &value) : name(n) { setenv(n, value.c_str(), 1); }
  ~Env() { unsetenv(name.c_str()); }
};

} // namespace

TEST_CASE("lower: .kf text to plan and CUDA in one call, fused or not") {
  Lowered fused =
      lower(dsl::SourceFile("chain.kf", kChain), {ir::Mode::Eval, codegen::GemmMath::Fp32, true});
  CHECK(fused.graph.name == "chain");
  CHECK(fused.plan.kernels.size() == 1); // the scale folds into the GEMM epilogue
  CHECK(fused.program.source.find("extern \"C\"") != std::string::npos);
  Lowered unfused =
      lower(dsl::SourceFile("chain.kf", kChain), {ir::Mode::Eval, codegen::GemmMath::Fp32, false});
  CHECK(unfused.plan.kernels.size() == 2);
}

TEST_CASE("lower: KFUSE_DUMP=ir,plan,cuda,launch writes every step to KFUSE_DUMP_DIR") {
  char tmpl[] = "/tmp/kfuse-dump-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  std::filesystem::path dir = tmpl;
  {
    Env what("KFUSE_DUMP", "ir,plan,cuda,launch");
    Env where("KFUSE_DUMP_DIR", dir.string());
    Lowered l = lower(dsl::SourceFile("chain.kf", kChain),
                      {ir::Mode::Train, codegen::GemmMath::Fp32, true});
    CHECK(read(dir / "chain.train.plan.txt").rfind("plan chain (mode train)", 0) == 0);
    CHECK(read(dir / "chain.train.cuda.cu") == l.program.source);
    CHECK(read(dir / "chain.train.0-parsed.kf").rfind("pipeline chain {", 0) == 0);
    CHECK(std::filesystem::exists(dir / "chain.train.1-canonicalize_linear.kf"));
    // Each kernel's launch description, as the runtime will evaluate it.
    const std::string launch = read(dir / "chain.train.launch.txt");
    CHECK(launch.rfind("k0_gemm: a block per tile of N x ", 0) == 0);
    CHECK(launch.find("block 256") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
  Env bad("KFUSE_DUMP", "plan,sass");
  CHECK_THROWS_WITH_AS(lower(dsl::SourceFile("chain.kf", kChain), {}),
                       doctest::Contains("KFUSE_DUMP: 'sass' is not one of ir, plan, cuda, launch"),
                       Error);
}
