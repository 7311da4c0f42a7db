// Tuned GEMM configurations without a GPU: the tuning store (round trip, keys, corrupt entries,
// classes of N), the code generator's tile override (each candidate instantiated and compiled by
// NVRTC for sm_90a), and tuned configurations reaching the compile report and the launch.
#include "compiler/build_executable.h"
#include "compiler/codegen/program.h"
#include "compiler/dsl/parser.h"
#include "compiler/lower.h"
#include "compiler/plan/planner.h"
#include "compiler/select/select.h"
#include "compiler/target.h"
#include "kfuse/kfuse.h"
#include "runtime/launch_geometry.h"
#include "runtime/pipeline.h"
#include "runtime/tuning_store.h"
#include "tests/support/run_tool.h"
#include "tests/support/temp_cache.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace kfuse;

namespace {

std::string root() { return KFUSE_SOURCE_DIR; }

const rt::DeviceKey kH100{"NVIDIA H100 80GB HBM3", 132, 90};
const rt::DeviceKey kH200{"NVIDIA H200", 132, 90};

LowerOptions tf32_options(codegen::GemmTunings tunings = {}) {
  LowerOptions o;
  o.target = {"sm_90a", Precision::TF32};
  if (!tunings.empty())
    o.tunings = [tunings](const std::vector<exec::TunableGemm> &) { return tunings; };
  return o;
}

Lowered lowered(const std::string &example, const LowerOptions &o) {
  return lower(dsl::SourceFile::read(root() + "/examples/" + example + ".kf"), o);
}

rt::TuningEntry entry(const std::string &tile, int64_t rows) {
  rt::TuningEntry e;
  e.pipeline = "gemm_bn_scale_softmax";
  e.kernel = "k0_gemm";
  e.tile = rt::TunedTile{tile, {rows, 0.25, 0.3, "2026-11-23T12:00:00Z"}};
  e.splits.push_back(
      {tile, codegen::rows_class(rows), 2, {rows, 0.25, 0.3, "2026-11-23T12:00:00Z"}});
  return e;
}

} // namespace

TEST_CASE("tuning: classes of N are power-of-two buckets") {
  CHECK(codegen::rows_class(1) == 0);
  CHECK(codegen::rows_class(2) == 1);
  CHECK(codegen::rows_class(3) == 2);
  CHECK(codegen::rows_class(4) == 2);
  CHECK(codegen::rows_class(513) == 10);
  CHECK(codegen::rows_class(1024) == 10);
  CHECK(codegen::rows_class(1025) == 11);
}

TEST_CASE("tuning: an entry round-trips through its text, bad text says why") {
  rt::TuningEntry e = entry("64x256x1", 128);
  e.device = kH100.text();
  e.signature = "0123abcd";
  std::string why;
  std::optional<rt::TuningEntry> back = rt::parse_tuning_entry(rt::format_tuning_entry(e), &why);
  REQUIRE(back);
  CHECK(rt::format_tuning_entry(*back) == rt::format_tuning_entry(e));
  CHECK(back->device == "NVIDIA H100 80GB HBM3, 132 SMs, sm_90");
  CHECK(back->tile->tile == "64x256x1");
  CHECK(back->splits.at(0).rows_class == 7);
  CHECK_FALSE(rt::parse_tuning_entry("garbage\n", &why));
  CHECK(why == "line 1: expected 'kfuse-tuning 1'");
  CHECK_FALSE(rt::parse_tuning_entry("kfuse-tuning 1\ntile 64x256x1 zero\n", &why));
  CHECK(why == "line 2: expected 'tile NAME ROWS MS HEURISTIC_MS DATE'");
  // Values out of range are as unreadable as text that does not parse.
  for (const char *line :
       {"tile 64x256x1 2147483648 0.25 0.3 D", "tile 64x256x1 128 inf 0.3 D",
        "tile 64x256x1 128 0.25 nan D", "tile 64x256x1 -1 0.25 0.3 D",
        "split 64x256x1 7 1025 128 0.25 0.3 D", "split 64x256x1 7 -1 128 0.25 0.3 D",
        "split 64x256x1 32 2 128 0.25 0.3 D"}) {
    CAPTURE(line);
    why.clear();
    CHECK_FALSE(rt::parse_tuning_entry(std::string("kfuse-tuning 1\n") + line + "\n", &why));
    CHECK(why.rfind("line 2: expected '", 0) == 0);
  }
}

TEST_CASE("tuning: the store keys entries by device and kernel signature") {
  TempCache tmp;
  std::vector<std::string> warnings;
  rt::TuningStore store(tmp.dir + "/tuning", [&](const std::string &w) { warnings.push_back(w); });
  CHECK_FALSE(store.load(kH100, "sig A"));
  REQUIRE(store.store(kH100, "sig A", entry("128x128x1", 1024)));
  std::optional<rt::TuningEntry> e = store.load(kH100, "sig A");
  REQUIRE(e);
  CHECK(e->tile->tile == "128x128x1");
  CHECK(e->tile->at.rows == 1024);
  CHECK(e->device == kH100.text());
  CHECK_FALSE(store.load(kH200, "sig A"));
  CHECK_FALSE(store.load(rt::DeviceKey{kH100.name, 114, 90}, "sig A"));
  CHECK_FALSE(store.load(kH100, "sig B"));
  REQUIRE(store.store(kH200, "sig A", entry("64x128x2", 64)));
  CHECK(store.entries().size() == 2);
  CHECK(warnings.empty());
}

TEST_CASE("tuning: a corrupt or unreadable entry is reported and ignored") {
  TempCache tmp;
  std::vector<std::string> warnings;
  rt::TuningStore store(tmp.dir + "/tuning", [&](const std::string &w) { warnings.push_back(w); });
  REQUIRE(store.store(kH100, "sig", entry("128x128x1", 1024)));
  // A whole entry whose text is not a tuning entry (a checksum that holds).
  rt::DiskCache cache(tmp.dir + "/tuning", [&](const std::string &w) { warnings.push_back(w); });
  const std::vector<std::string> keys = cache.keys();
  REQUIRE(keys.size() == 1);
  REQUIRE(cache.store(keys[0], "kfuse-tuning 1\nsplit nonsense\n"));
  CHECK_FALSE(store.load(kH100, "sig"));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] == "kfuse cache: ignoring corrupt entry '" + cache.entry_path(keys[0]) +
                           "': not a tuning entry: line 2: expected 'split TILE CLASS CAP ROWS "
                           "MS HEURISTIC_MS DATE'");
  CHECK(store.entries().empty());
  // Torn bytes: the disk cache's checks catch them, and say so.
  REQUIRE(store.store(kH100, "sig", entry("128x128x1", 1024)));
  {
    std::ofstream f(cache.entry_path(keys[0]), std::ios::binary | std::ios::app);
    f << "trailing";
  }
  warnings.clear();
  CHECK_FALSE(store.load(kH100, "sig"));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("ignoring corrupt entry '" + cache.entry_path(keys[0]) + "'") !=
        std::string::npos);
  // A whole entry of another device under this one's key (as a hash collision would give).
  rt::TuningEntry other = entry("128x128x1", 1024);
  other.device = kH200.text();
  other.signature = rt::hash_hex("sig");
  REQUIRE(cache.store(keys[0], rt::format_tuning_entry(other)));
  warnings.clear();
  CHECK_FALSE(store.load(kH100, "sig"));
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("it is the entry of another device or kernel") != std::string::npos);
}

TEST_CASE("codegen: a tile override instantiates that tile, NVRTC compiles every candidate") {
  TempCache tmp;
  const Lowered heuristic = lowered("gemm_bn_scale_softmax", tf32_options());
  const codegen::KernelLaunch &gemm = heuristic.program.launches.at(1);
  CHECK(gemm.tile == "128x256x1");
  CHECK(gemm.tiles.size() == 4);
  CHECK_FALSE(gemm.signature.empty());
  const char *instantiations[] = {"Sm90Gemm<kf::sm90::Operand::Tf32, 256>",
                                  "Sm90Gemm<kf::sm90::Operand::Tf32, 128>",
                                  "Sm90Gemm<kf::sm90::Operand::Tf32, 256, 64, 1>",
                                  "Sm90Gemm<kf::sm90::Operand::Tf32, 128, 64, 2>"};
  const int rows[] = {128, 128, 64, 64}, cols[] = {256, 128, 256, 128};
  for (size_t i = 0; i < 4; ++i) {
    const codegen::Sm90Tile tile = codegen::kSm90Tiles[i];
    INFO(codegen::tile_name(tile));
    codegen::GemmTunings t;
    t["k1_gemm"].tile = tile;
    t["k1_gemm"].tile_why = "asked for";
    Lowered l = lowered("gemm_bn_scale_softmax", tf32_options(t));
    const codegen::KernelLaunch &k1 = l.program.launches.at(1);
    CHECK(l.program.source.find(instantiations[i]) != std::string::npos);
    CHECK(k1.tile == codegen::tile_name(tile));
    CHECK(k1.geometry.tile_rows == rows[i]);
    CHECK(k1.geometry.tile_cols == cols[i]);
    // The signature leaves the tile out: the store finds the kernel whatever tile it took.
    CHECK(k1.signature == gemm.signature);
    CHECK(k1.config.find("asked for") != std::string::npos);
    Pipeline p = rt::PipelineAccess::compile(build_executable(l));
    for (const KernelReport &k : p.report().kernels) {
      CHECK(k.spill_stores == 0);
      CHECK(k.stack_bytes == 0);
    }
  }
}

TEST_CASE("codegen: a tile override a GEMM cannot take is an error naming the kernel") {
  codegen::GemmTunings t;
  t["k0_gemm"].tile = codegen::Sm90Tile::M64N256;
  LowerOptions x3 = tf32_options(t);
  x3.target.precision = Precision::FP32x3;
  CHECK_THROWS_WITH(lowered("gemm_bn_scale_softmax", x3),
                    doctest::Contains("k0_gemm: tile 64x256x1 was asked for, but this GEMM's "
                                      "tiles are not tuned (3xtf32 has one, 128x128x1)"));
  codegen::GemmTunings other;
  other["k9_gemm"].tile = codegen::Sm90Tile::M64N256;
  CHECK_THROWS_WITH(lowered("gemm_bn_scale_softmax", tf32_options(other)),
                    doctest::Contains("names 'k9_gemm', which is no GEMM kernel of the plan"));
}

TEST_CASE("tuning: a stored configuration reaches the compile report and the launch") {
  TempCache tmp;
  std::vector<std::string> warnings;
  rt::TuningStore store(tmp.dir + "/tuning", [&](const std::string &w) { warnings.push_back(w); });
  const Lowered heuristic = lowered("gemm_bn_scale_softmax", tf32_options());
  const std::string &signature = heuristic.program.launches.at(1).signature;
  const plan::Plan kernels = select::kernel_view(heuristic.plan);
  const std::vector<exec::TunableGemm> gemms = select::gemm_keys(
      kernels, select::select_kernels(kernels, Target{"sm_90a", Precision::TF32}));
  REQUIRE(store.store(kH100, signature, entry("64x256x1", 1024)));

  LowerOptions o = tf32_options();
  o.tunings = [&](const std::vector<exec::TunableGemm> &g) { return store.tunings(kH100, g); };
  Pipeline p = rt::PipelineAccess::compile(build_executable(lowered("gemm_bn_scale_softmax", o)));
  const std::string &config = p.report().kernels.at(1).config;
  INFO(config);
  CHECK(config.find("tf32 64x256x1 tile: tuned on NVIDIA H100 80GB HBM3, 132 SMs, sm_90 at "
                    "N=1024 (0.2500 ms vs the heuristic's 0.3000 ms") != std::string::npos);
  CHECK(config.find("for 513..1024 rows split-K at most 2, tuned on") != std::string::npos);
  CHECK(p.cuda_source().find("Sm90Gemm<kf::sm90::Operand::Tf32, 256, 64, 1>") != std::string::npos);

  // The cap is data: at N in (512, 1024] S is at most 2, other classes keep the rule's S.
  const Lowered tuned = lowered("gemm_bn_scale_softmax", o);
  const exec::Geometry geo = geometry_of(tuned.program.launches.at(1).geometry);
  CHECK(geo.max_splits_by_class.at(10) == 2);
  CHECK(rt::split_count(geo, {{"N", 64}}, 132, 0) > 2);
  CHECK(rt::split_count(geo, {{"N", 1000}}, 13200, 0) == 2);
  CHECK(rt::split_count(geo, {{"N", 1000}}, 13200, 4) == 4); // Options::max_split_k first

  // Another device, or the same device with a tile the kernel cannot take: the heuristics.
  CHECK(store.tunings(kH200, gemms).empty());
  rt::TuningEntry bad = entry("32x32x1", 1024);
  REQUIRE(store.store(kH100, signature, bad));
  CHECK(store.tunings(kH100, gemms).empty());
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("ignoring the tile '32x32x1' tuned for k1_gemm") != std::string::npos);
}

TEST_CASE("kfuse tune --show lists the stored entries and reports a corrupt one") {
  TempCache tmp;
  rt::TuningStore store(tmp.dir + "/tuning");
  REQUIRE(store.store(kH100, "sig", entry("64x256x1", 128)));
  rt::DiskCache(tmp.dir + "/tuning").store("0badc0de", "not a tuning entry\n");
  testing::ToolRun r = testing::run_kfuse("tune --show"); // KFUSE_CACHE_DIR: tmp.dir
  INFO(r.out, r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("1 tuned GEMM kernel in " + tmp.dir + "/tuning\n") == 0);
  CHECK(r.out.find("gemm_bn_scale_softmax k0_gemm on NVIDIA H100 80GB HBM3, 132 SMs, sm_90") !=
        std::string::npos);
  CHECK(r.out.find("tile 64x256x1   tuned at N=128: 0.2500 ms, heuristic 0.3000 ms (-16.7%), "
                   "2026-11-23T12:00:00Z") != std::string::npos);
  CHECK(r.out.find("split-K <= 2    for N in class 7 with tile 64x256x1") != std::string::npos);
  CHECK(r.err.find("0badc0de") != std::string::npos);
  CHECK(r.err.find("line 1: expected 'kfuse-tuning 1'") != std::string::npos);
}

TEST_CASE("kfuse tune --show skips and reports stray and malformed files, and deletes nothing") {
  TempCache tmp;
  const std::string dir = tmp.dir + "/tuning";
  rt::TuningStore store(dir);
  REQUIRE(store.store(kH100, "sig", entry("64x256x1", 128)));
  rt::DiskCache cache(dir);
  REQUIRE(cache.store("0badc0de", "kfuse-tuning 1\n"));
  {
    std::ofstream(cache.entry_path("0badc0de"), std::ios::binary | std::ios::app) << "torn";
    std::ofstream(dir + "/bad.name.kfc1") << "a stray file named almost like an entry";
  }
  testing::ToolRun r = testing::run_kfuse("tune --show"); // KFUSE_CACHE_DIR: tmp.dir
  INFO(r.out, r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("1 tuned GEMM kernel in " + dir + "\n") == 0);
  CHECK(r.out.find("gemm_bn_scale_softmax k0_gemm") != std::string::npos);
  CHECK(r.err.find("kfuse: warning: kfuse cache: skipping '" + dir +
                   "/bad.name.kfc1': not a cache entry") != std::string::npos);
  CHECK(r.err.find("kfuse: warning: kfuse cache: ignoring corrupt entry '" +
                   cache.entry_path("0badc0de") + "': ") != std::string::npos);
  CHECK(std::filesystem::exists(dir + "/bad.name.kfc1"));
  CHECK(std::filesystem::exists(cache.entry_path("0badc0de")));
}

TEST_CASE("api: Options::tune_at_start refuses what it cannot tune, before the GPU") {
  const std::string file = root() + "/examples/gemm_scale_bn.kf";
  Options o;
  o.tune_at_start = {{"N", 128}};
  o.use_tuned = false;
  CHECK_THROWS_WITH(Pipeline::from_file(file, o),
                    doctest::Contains("Options::tune_at_start stores tuned configurations that "
                                      "Options::use_tuned = false would not use"));
  o.use_tuned = true;
  o.tune_at_start = {};
  o.tune_at_start["M"] = 128;
  CHECK_THROWS_WITH(Pipeline::from_file(file, o),
                    doctest::Contains("pipeline 'gemm_scale_bn': tuning needs a value for dim N"));
  o.tune_at_start["N"] = 128;
  CHECK_THROWS_WITH(Pipeline::from_file(file, o),
                    doctest::Contains("tuning was given dim M, which it has not"));
  o.tune_at_start = {{"N", 0}};
  CHECK_THROWS_WITH(Pipeline::from_file(file, o),
                    doctest::Contains("tuning: dim N = 0 is out of range; dims are "
                                      "integers in [1, 2147483647]"));
  Options no_gemm;
  no_gemm.tune_at_start = {{"N", 4}};
  CHECK_THROWS_WITH(Pipeline::from_string("pipeline relu_only {\n  dim N\n  input x: f32[N, 8]\n"
                                          "  return relu(x)\n}\n",
                                          "relu_only.kf", no_gemm),
                    doctest::Contains("pipeline 'relu_only' has no GEMM kernel to tune"));
}
