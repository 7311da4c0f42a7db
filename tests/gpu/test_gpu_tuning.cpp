// Tuned GEMM configurations on the GPU: `kfuse tune` and Options::tune_at_start store an entry
// per GEMM kernel, a later compile on the same device loads it (its config says "tuned on"), and
// the pipeline with a tuned tile and split-K cap still matches the fp64 reference. Few
// iterations: the point is the path, not the numbers.
#include "compiler/build_executable.h"
#include "compiler/lower.h"
#include "runtime/launch_geometry.h"
#include "runtime/pipeline.h"
#include "runtime/tuning_store.h"
#include "tests/support/gpu_cases.h"
#include "tests/support/run_tool.h"
#include "tests/support/source_tree.h"
#include "tests/support/temp_cache.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <map>
#include <string>

using namespace kfuse;

namespace {

const char *kExample = "examples/gemm_scale_bn_512x1024.kf";

Options tf32(Mode mode) {
  Options o;
  o.mode = mode;
  o.precision = Precision::TF32;
  return o;
}

} // namespace

TEST_CASE("tune: kfuse tune stores a config that later compiles load, and results still match") {
  TempCache cache;
  testing::ToolRun r = testing::run_kfuse(std::string("tune ") + kExample +
                                          " --dim N=128 --precision tf32 --mode eval --iters 3 "
                                          "--warmup 1");
  INFO(r.out, r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("<- stored") != std::string::npos);
  CHECK(r.out.find("k1_gemm (128x1024x512, N=128)") != std::string::npos);
  const std::vector<rt::TuningEntry> entries = rt::TuningStore::from_environment().entries();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].kernel == "k1_gemm");
  CHECK(entries[0].device == rt::DeviceKey::current().text());
  // A tile only where another than the heuristics' won; always the split-K cap of N's class.
  REQUIRE(entries[0].splits.size() == 1);
  const rt::TunedAt &at = entries[0].splits[0].at;
  CHECK(at.rows == 128);
  CHECK(at.ms <= at.heuristic_ms);
  if (entries[0].tile)
    CHECK(entries[0].tile->tile != "64x128x2");

  Pipeline tuned = Pipeline::from_file(testing::source_path(kExample), tf32(Mode::Eval));
  CHECK(tuned.report().kernels.at(1).config.find("tuned on " + entries[0].device) !=
        std::string::npos);
  Options heuristic = tf32(Mode::Eval);
  heuristic.use_tuned = false;
  CHECK(Pipeline::from_file(testing::source_path(kExample), heuristic)
            .report()
            .kernels.at(1)
            .config.find("tuned on") == std::string::npos);
  testing::expect_match(testing::repo_file(kExample), kExample, Mode::Eval, 128, 7, 1,
                        Precision::TF32);
}

TEST_CASE("tune: a stored tile other than the heuristic's and a split-K cap run and match") {
  TempCache cache;
  const rt::DeviceKey device = rt::DeviceKey::current();
  for (Mode mode : {Mode::Train, Mode::Eval}) {
    const Lowered l = lower(dsl::SourceFile::read(testing::source_path(kExample)),
                            lower_options(rt::PipelineAccess::request(tf32(mode), true)));
    const codegen::KernelLaunch &gemm = l.program.launches.at(1);
    REQUIRE(gemm.tile == "64x128x2"); // the heuristic's for 1024 output features
    rt::TuningEntry e;
    e.pipeline = "gemm_scale_bn_512x1024";
    e.kernel = gemm.entry;
    const rt::TunedAt at{128, 0.01, 0.02, "2026-11-23T12:00:00Z"};
    e.tile = rt::TunedTile{"128x128x1", at};
    e.splits.push_back({"128x128x1", codegen::rows_class(128), 2, at});
    REQUIRE(rt::TuningStore::from_environment().store(device, gemm.signature, e));
  }
  for (Mode mode : {Mode::Train, Mode::Eval}) {
    Pipeline p = Pipeline::from_file(testing::source_path(kExample), tf32(mode));
    CHECK(p.cuda_source().find("Sm90Gemm<kf::sm90::Operand::Tf32, 128>") != std::string::npos);
    const std::string &config = p.report().kernels.at(1).config;
    INFO(config);
    CHECK(config.find("tf32 128x128x1 tile: tuned on " + device.text()) != std::string::npos);
    CHECK(config.find("for 65..128 rows split-K at most 2") != std::string::npos);
    // 128 and 100 rows: the tuned class (S <= 2); 33 rows: another class, the rule's S.
    for (int64_t n : {128, 100, 33})
      testing::expect_match(testing::repo_file(kExample), kExample, mode, n, 11, 2,
                            Precision::TF32);
  }
}

TEST_CASE("tune: Options::tune_at_start tunes before the compile, which then uses the result") {
  TempCache cache;
  Options o = tf32(Mode::Train);
  o.tune_at_start = {{"N", 128}};
  Pipeline p = Pipeline::from_file(testing::source_path(kExample), o);
  REQUIRE(rt::TuningStore::from_environment().entries().size() == 1);
  CHECK(p.report().kernels.at(1).config.find("tuned on " + rt::DeviceKey::current().text()) !=
        std::string::npos);
  testing::expect_match(testing::repo_file(kExample), kExample, Mode::Train, 128, 5, 2,
                        Precision::TF32);
}

TEST_CASE("tune: the heuristics' config keeps its variants, a candidate whose runs launch another "
          "compiled variant says which, with its S, the kernel's own tile is also timed pinned") {
  // fp32 at 512 rows: the SIMT GEMM's 128 x 32 tile carries its 128 x 128 twin; bf16 TinyLlama
  // o_proj at 8192 rows: the sm90 GEMM's 64 x 128 tile carries 128 x 128 and 128 x 256 ones.
  // The runs take the variant of lowest estimated time (rt::variant_of).
  struct Case {
    const char *file;
    std::map<std::string, int64_t> dims;
    std::string dims_text;
  };
  for (const Case &c : {Case{"examples/bert_ffn_gelu_avg_pool1d.kf", {{"N", 512}}, " --dim N=512"},
                        Case{"examples/tinyllama_o_proj_residual_rmsnorm_btf_bf16.kf",
                             {{"B", 4}, {"T", 2048}},
                             " --dim B=4 --dim T=2048"}}) {
    TempCache cache;
    Options o;
    o.mode = Mode::Eval;
    const Lowered l = lower(dsl::SourceFile::read(testing::source_path(c.file)),
                            lower_options(rt::PipelineAccess::request(o, true)));
    const exec::Executable e = build_executable(l);
    const exec::Kernel &gemm = e.kernels.at(0);
    REQUIRE_FALSE(gemm.variants.empty());
    const int sms = rt::DeviceKey::current().multiprocessors;
    const size_t runs = rt::variant_of(gemm, c.dims, sms, 0);
    const exec::Kernel &ran = rt::variant(gemm, runs);
    const int splits = rt::split_count(ran.geometry, c.dims, sms, 0);

    testing::ToolRun r = testing::run_kfuse(std::string("tune ") + c.file + c.dims_text +
                                            " --mode eval --iters 3 --warmup 1");
    INFO(r.out, r.err);
    REQUIRE(r.exit_code == 0);
    // The heuristics' row: the kernel's tile, the rule's S, the variant its runs launched.
    std::string row = fmt::format("  {:<10} {:>9} {:>3} ", gemm.tile, "rule", splits);
    const size_t at = r.out.find(row);
    REQUIRE(at != std::string::npos);
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    CHECK(line.find("(heuristic)") != std::string::npos);
    CHECK((line.find("ran as " + ran.entry + " " + ran.tile) != std::string::npos) == (runs > 0));
    // Where the runs took a variant, the kernel's own tile (sm90: one of its tiles) is a
    // candidate of its own, pinned at every N.
    const bool pinned = r.out.find("pinned: no variant at any N") != std::string::npos;
    if (gemm.tiles.empty())
      CHECK_FALSE(pinned);
    else if (runs > 0)
      CHECK(pinned);
    // What is stored pins a tile only where a pinned tile won: never for the SIMT kernel (no
    // tile to ask for), not where the heuristics' config won.
    const std::vector<rt::TuningEntry> entries = rt::TuningStore::from_environment().entries();
    REQUIRE(entries.size() == 1);
    if (gemm.tiles.empty() || r.out.find("(heuristic)  <- stored") != std::string::npos)
      CHECK_FALSE(entries[0].tile.has_value());
  }
}
