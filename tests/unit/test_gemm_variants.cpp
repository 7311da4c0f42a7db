// A narrow layer's GEMM compiled with a second, wider tile, which runs take where the bound rows
// give it enough of a wave (codegen::KernelLaunch::by_rows, rt::variant_of): which kernels get
// one, what it launches with, and which one the rule picks, without a GPU.
#include "compiler/build_executable.h"
#include "compiler/codegen/program.h"
#include "compiler/dsl/parser.h"
#include "compiler/plan/planner.h"
#include "compiler/target.h"
#include "runtime/launch_geometry.h"
#include "runtime/launch_table.h"
#include "runtime/pipeline.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace kfuse;

namespace {

// N rows through a Linear of `in` -> `out` features followed by `after` (an op on `h`).
plan::Plan layer(int out, const char *after, ir::Mode mode, const char *dtype = "f32",
                 int in = 512) {
  dsl::SourceFile src(
      "layer.kf", fmt::format("pipeline layer {{\n  dim N\n  input x: {0}[N, {3}]\n"
                              "  param w: {0}[{1}, {3}]\n  param g: f32[{1}]\n  param b: f32[{1}]\n"
                              "  state rm: f32[{1}]\n  state rv: f32[{1}]\n"
                              "  h = linear(x, w)\n  return {2}\n}}\n",
                              dtype, out, after, in));
  dsl::Diagnostics diags(src);
  return plan::make_plan(dsl::parse_kf(src, diags), mode);
}

} // namespace

TEST_CASE("gemm variants: a narrow layer's GEMM on sm_90a carries its 128 x 128 twin, and with "
          "a deep K its 128 x 256 one") {
  for (const char *dtype : {"f32", "bf16"}) {
    CAPTURE(dtype);
    const codegen::Program p = codegen::generate(
        layer(1024, "gelu(h)", ir::Mode::Train, dtype, 2048), Target{"sm_90a", Precision::TF32});
    const codegen::KernelLaunch &gemm = p.launches.at(0);
    CHECK(gemm.tile == "64x128x2");
    REQUIRE(gemm.by_rows.size() == 2);
    const codegen::KernelLaunch &wide = gemm.by_rows[0];
    CHECK(wide.entry == "k0_gemm_wide");
    CHECK(wide.tile == "128x128x1");
    CHECK(wide.geometry.tile_rows == 128);
    CHECK(wide.geometry.tile_cols == 128);
    CHECK(wide.geometry.blocks_per_sm == 1);
    CHECK(wide.geometry.min_waves == 1);
    CHECK(wide.geometry.kblock_time == 3);
    CHECK(gemm.geometry.kblock_time == 0);
    CHECK(gemm.geometry.blocks_per_sm == 2);
    const codegen::KernelLaunch &wider = gemm.by_rows[1];
    CHECK(wider.entry == "k0_gemm_wider");
    CHECK(wider.tile == "128x256x1");
    CHECK(wider.geometry.tile_cols == 256);
    CHECK(wider.geometry.kblock_time == 5);
    REQUIRE(wider.params.size() == gemm.params.size());
    CHECK(wider.params.at(1).map.box_rows == 256);
    // The same parameters in the same order; the tensor maps' boxes follow the tile.
    REQUIRE(wide.params.size() == gemm.params.size());
    for (size_t i = 0; i < gemm.params.size(); ++i)
      CHECK(wide.params[i].kind == gemm.params[i].kind);
    CHECK(gemm.params.at(0).map.box_rows == 64);
    CHECK(wide.params.at(0).map.box_rows == 128);
    CHECK(wide.params.at(1).map.box_rows == 128);
    CHECK(p.source.find("void __launch_bounds__") != std::string::npos);
    CHECK(p.source.find("\nk0_gemm_wide(") != std::string::npos);
    CHECK(p.source.find("\nk0_gemm(") != std::string::npos);
    CHECK(p.source.find("\nk0_gemm_wider(") != std::string::npos);
    CHECK(gemm.config.find("k0_gemm_wide where the rows") != std::string::npos);
    CHECK(gemm.config.find("k0_gemm_wider instead of k0_gemm_wide where its estimated time") !=
          std::string::npos);
  }
}

TEST_CASE("gemm variants: none where the tile is not the width's guess or a second one cannot "
          "run") {
  auto variants = [](const plan::Plan &p, const Target &target,
                     const codegen::GemmTunings &tunings = {}) {
    return codegen::generate(p, target, tunings).launches.at(0).by_rows.size();
  };
  // Column statistics in the epilogue: the column kernel is compiled for one partial tile height.
  CHECK(variants(layer(1024, "batchnorm(h, g, b, rm, rv)", ir::Mode::Train),
                 Target{"sm_90a", Precision::TF32}) == 0);
  // The same batchnorm in eval mode folds into the epilogue: no statistics, a variant; two
  // where K is deep enough for the 128 x 256 tile (2040: TMA-aligned, below 2048).
  CHECK(variants(layer(1024, "batchnorm(h, g, b, rm, rv)", ir::Mode::Eval),
                 Target{"sm_90a", Precision::TF32}) == 1);
  CHECK(variants(layer(1024, "batchnorm(h, g, b, rm, rv)", ir::Mode::Eval, "bf16", 2040),
                 Target{"sm_90a", Precision::TF32}) == 1);
  CHECK(variants(layer(1024, "batchnorm(h, g, b, rm, rv)", ir::Mode::Eval, "bf16", 2048),
                 Target{"sm_90a", Precision::TF32}) == 2);
  CHECK(variants(layer(1024, "batchnorm(h, g, b, rm, rv)", ir::Mode::Eval, "f32", 2048),
                 Target{"sm_90a", Precision::TF32}) == 2);
  CHECK(variants(layer(1024, "batchnorm(h, g, b, rm, rv)", ir::Mode::Eval, "f32", 2040),
                 Target{"sm_90a", Precision::TF32}) == 1);
  // Wide layers take 128 x 256 already; the mma.sync and 3xtf32 mainloops have one tile.
  CHECK(variants(layer(4096, "gelu(h)", ir::Mode::Eval), Target{"sm_90a", Precision::TF32}) == 0);
  CHECK(variants(layer(1024, "gelu(h)", ir::Mode::Eval), Target{"sm_80", Precision::TF32}) == 0);
  CHECK(variants(layer(1024, "gelu(h)", ir::Mode::Eval), Target{"sm_90a", Precision::FP32x3}) == 0);
  // A tuned tile is the tile.
  codegen::GemmTunings tuned;
  tuned["k0_gemm"].tile = codegen::Sm90Tile::M64N128x2;
  CHECK(variants(layer(1024, "gelu(h)", ir::Mode::Eval), Target{"sm_90a", Precision::TF32},
                 tuned) == 0);
}

TEST_CASE("gemm variants: runs take the 128 x 128 tile from a full wave of it, the 128 x 256 one "
          "instead where its waves take less time, and neither needs a split") {
  const plan::Plan p = layer(1024, "gelu(h)", ir::Mode::Eval, "bf16", 2048);
  const codegen::Program prog = codegen::generate(p, Target{"sm_90a", Precision::TF32});
  const exec::Executable exe = build_executable(p, prog);
  const exec::Kernel &gemm = exe.kernels.at(0);
  // 1024 features: 8 columns of 128 x 128 tiles, so 132 SMs need 17 row tiles. Once they have
  // them, the 4 columns of 128 x 256 tiles weigh 5 a wave against 3: 17 row tiles give 68 such
  // tiles, one wave (5), against two of 128 x 128 (6); 34 give 136, two waves (10), against 272
  // in three (9); 50 give 200 (10) against 400 in four (12).
  CHECK(rt::variant_of(gemm, {{"N", 128}}, 132, 0) == 0);
  CHECK(rt::variant_of(gemm, {{"N", 16 * 128}}, 132, 0) == 0);
  CHECK(rt::variant_of(gemm, {{"N", 16 * 128 + 1}}, 132, 0) == 2);
  CHECK(rt::variant_of(gemm, {{"N", 33 * 128}}, 132, 0) == 2);
  CHECK(rt::variant_of(gemm, {{"N", 33 * 128 + 1}}, 132, 0) == 1);
  CHECK(rt::variant_of(gemm, {{"N", 49 * 128}}, 132, 0) == 1);
  CHECK(rt::variant_of(gemm, {{"N", 49 * 128 + 1}}, 132, 0) == 2);
  CHECK(rt::variant_of(gemm, {{"N", 16384}}, 132, 0) == 2);
  CHECK(rt::variant_of(gemm, {{"N", 16384}}, 0, 0) == 0); // no device: the launch itself
  CHECK(&rt::variant(gemm, 1) == &gemm.variants[0]);
  CHECK(&rt::variant(gemm, 2) == &gemm.variants[1]);
  CHECK(rt::split_count(rt::variant(gemm, 1).geometry, {{"N", 16 * 128 + 1}}, 132, 0) == 1);
  CHECK(rt::split_count(rt::variant(gemm, 2).geometry, {{"N", 16 * 128 + 1}}, 132, 0) == 1);

  rt::LaunchTable table(exe, 0);
  CHECK(table.entries() == std::vector<std::string>{"k0_gemm", "k0_gemm_wide", "k0_gemm_wider"});
  table.prepare({{"N", 34 * 128}}, 132);
  CHECK(table.launched(0).entry == "k0_gemm_wide");
  table.prepare({{"N", 16384}}, 132);
  CHECK(table.launched(0).entry == "k0_gemm_wider");
  CHECK(table.splits(0) == 1);
  table.prepare({{"N", 128}}, 132);
  CHECK(table.launched(0).entry == "k0_gemm");
  CHECK(table.splits(0) > 1);
  // The wide tile's full wave splits nothing: no split-K workspace; at 128 rows K is split.
  CHECK(table.workspace_bytes({{"N", 16384}}, 132) == 0);
  CHECK(table.workspace_bytes({{"N", 128}}, 132) > 0);
}

TEST_CASE("gemm variants: the SIMT GEMM's 128 x 32 tile carries its 128 x 128 twin, statistics "
          "included, which runs take where its estimated time is lower") {
  for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
    for (const char *arch : {"sm_90a", "sm_80"}) {
      CAPTURE(arch);
      const plan::Plan p = layer(1024, "batchnorm(h, g, b, rm, rv)", mode);
      const codegen::Program prog = codegen::generate(p, Target{arch, Precision::FP32});
      const codegen::KernelLaunch &gemm = prog.launches.at(0);
      CHECK(gemm.tile == "128x32x1");
      CHECK(gemm.geometry.block_threads == 128);
      REQUIRE(gemm.by_rows.size() == 1);
      const codegen::KernelLaunch &wide = gemm.by_rows[0];
      CHECK(wide.entry == "k0_gemm_wide");
      CHECK(wide.tile == "128x128x1");
      CHECK(wide.geometry.block_threads == 256);
      CHECK(wide.geometry.kblock_time == 5);
      CHECK(gemm.geometry.kblock_time == 2);
      // One column kernel merges either tile's statistics: both are 128 rows high.
      CHECK(gemm.geometry.tile_rows == 128);
      CHECK(wide.geometry.tile_rows == 128);
      REQUIRE(wide.params.size() == gemm.params.size());
      for (size_t i = 0; i < gemm.params.size(); ++i) {
        CHECK(wide.params[i].kind == gemm.params[i].kind);
        CHECK(wide.params[i].tile_rows == gemm.params[i].tile_rows);
      }
      CHECK(prog.source.find("kf::gemm_simt<kf::SimtNarrow, true>") != std::string::npos);
      CHECK(prog.source.find("kf::gemm_simt<kf::SimtWide, true>") != std::string::npos);
      // K = 512: 32 k-blocks; 1024 features: 8 columns of 128 x 128 tiles, 32 of 128 x 32. In
      // k-block times: at 256 rows 16 wide tiles split 8 ways take (4 + 4) x 5 = 40 and 64
      // narrow ones split 2 ways (16 + 4) x 2 = 40 (a tie: the launch itself); at 257 rows 24
      // wide tiles split 5 ways take (7 + 4) x 5 = 55, 96 narrow ones unsplit 32 x 2 = 64.
      const exec::Executable exe = build_executable(p, prog);
      const exec::Kernel &run = exe.kernels.at(0);
      CHECK(rt::variant_of(run, {{"N", 1}}, 132, 0) == 0);
      CHECK(rt::variant_of(run, {{"N", 256}}, 132, 0) == 0);
      CHECK(rt::variant_of(run, {{"N", 257}}, 132, 0) == 1);
      CHECK(rt::variant_of(run, {{"N", 16384}}, 132, 0) == 1); // 8 waves x 32 x 5 < 32 x 32 x 2
      // Without split-K, 8 wide tiles take 32 x 5 and 32 narrow ones 32 x 2.
      CHECK(rt::variant_of(run, {{"N", 128}}, 132, 1) == 0);
      CHECK(rt::variant_of(run, {{"N", 128}}, 0, 0) == 0); // no device: the launch itself
      // At 128 rows the narrow tile's 32 tiles split K four ways, filling 128 of 132 SMs.
      CHECK(rt::split_count(run.geometry, {{"N", 128}}, 132, 0) == 4);
    }
  }
  // A row epilogue stages whole rows in its tile: the 128 x 128 tile alone.
  const codegen::Program rows = codegen::generate(layer(128, "softmax(h, dim=1)", ir::Mode::Eval),
                                                  Target{"sm_90a", Precision::FP32});
  CHECK(rows.launches.at(0).tile == "128x128x1");
  CHECK(rows.launches.at(0).by_rows.empty());
}

TEST_CASE("gemm variants: one that ptxas spilled is reported unused and runs never take it") {
  const plan::Plan p = layer(1024, "gelu(h)", ir::Mode::Eval, "bf16", 2048);
  exec::Executable exe =
      build_executable(p, codegen::generate(p, Target{"sm_90a", Precision::TF32}));
  REQUIRE(exe.kernels.at(0).variants.size() == 2);
  CompileReport report;
  report.kernels = {{"k0_gemm", 128, 0, 0, 0, 0, "", false, ""},
                    {"k0_gemm_wide", 168, 0, 0, 0, 0, "", true, ""},
                    {"k0_gemm_wider", 168, 0, 160, 380, 572, "", true, ""}};
  rt::drop_spilling_variants(exe, report);
  const exec::Kernel &gemm = exe.kernels.at(0);
  REQUIRE(gemm.variants.size() == 1);
  CHECK(gemm.variants[0].entry == "k0_gemm_wide");
  CHECK(report.kernels[0].unused.empty());
  CHECK(report.kernels[1].unused.empty());
  CHECK(report.kernels[2].unused ==
        "ptxas spilled 380 bytes (stores) and 572 bytes (loads) in it; k0_gemm or its other "
        "variants run instead");

  rt::LaunchTable table(exe, 0);
  CHECK(table.entries() == std::vector<std::string>{"k0_gemm", "k0_gemm_wide"});
  table.prepare({{"N", 16384}}, 132); // the wider one's time, were it kept
  CHECK(table.launched(0).entry == "k0_gemm_wide");
}
