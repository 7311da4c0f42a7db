// Split-K without a GPU: the rule that picks the split count S from the tiles, the SMs and K,
// the grids it gives, what the launch descriptions say, and the workspace it takes.
#include "compiler/build_executable.h"
#include "compiler/codegen/program.h"
#include "compiler/dsl/parser.h"
#include "compiler/ir/printer.h"
#include "compiler/plan/planner.h"
#include "compiler/target.h"
#include "kfuse/kfuse.h"
#include "runtime/launch_geometry.h"
#include "runtime/launch_table.h"
#include "templates/tile_scheduler.cuh"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <set>

using namespace kfuse;

namespace {

// A batch of N rows through a Linear of `in` -> `out` features, of `dtype` tensors.
plan::Plan linear_plan(int in, int out, const char *dtype = "f32") {
  dsl::SourceFile src("linear.kf",
                      fmt::format("pipeline linear {{\n  dim N\n  input x: {0}[N, {1}]\n"
                                  "  param w: {0}[{2}, {1}]\n  return linear(x, w)\n}}\n",
                                  dtype, in, out));
  dsl::Diagnostics diags(src);
  return plan::make_plan(dsl::parse_kf(src, diags), ir::Mode::Eval);
}

exec::Geometry gemm_geometry(const codegen::Program &p) {
  REQUIRE(p.launches.size() == 1);
  REQUIRE(p.launches[0].kind == plan::KernelKind::Gemm);
  return geometry_of(p.launches[0].geometry);
}

// The SIMT GEMM's 128 x 128 variant (the launch itself has the 128 x 32 tile).
exec::Geometry simt_wide(const codegen::Program &p) {
  gemm_geometry(p);
  REQUIRE(p.launches[0].by_rows.size() == 1);
  REQUIRE(p.launches[0].by_rows[0].tile == "128x128x1");
  return geometry_of(p.launches[0].by_rows[0].geometry);
}

int splits(const exec::Geometry &g, int64_t rows, int sms, int max_splits = 0) {
  return rt::split_count(g, {{"N", rows}}, sms, max_splits);
}

} // namespace

TEST_CASE("split-K: S from the tiles, the SMs and K (SIMT tiles, 16-deep k-blocks)") {
  const codegen::Program fp32 =
      codegen::generate(linear_plan(512, 1024), Target{"", Precision::FP32});
  const exec::Geometry g = simt_wide(fp32);
  CHECK(g.tile_k == 16);
  CHECK(g.blocks_per_sm == 1);        // split-K counts an SM once (generate.cpp says why)
  CHECK(splits(g, 128, 132) == 8);    // 8 tiles: capped at 8 splits (64 blocks)
  CHECK(splits(g, 1, 132) == 8);      // 8 tiles as well
  CHECK(splits(g, 1024, 132) == 2);   // 64 tiles: two splits fill one wave of 132
  CHECK(splits(g, 2048, 132) == 1);   // 128 tiles: a second split would start a second wave
  CHECK(splits(g, 4096, 132) == 1);   // 256 tiles of 32 k-blocks: two waves nearly full
  CHECK(splits(g, 128, 16) == 2);     // a 16-SM device: 8 tiles x 2
  CHECK(splits(g, 128, 8) == 1);      // as many tiles as SMs
  CHECK(splits(g, 128, 132, 1) == 1); // Options::max_split_k = 1: never
  CHECK(splits(g, 128, 132, 3) == 3);
  // The 128 x 32 tile: 32 tiles at 128 rows split 4 ways (128 blocks); 256 at 1024 rows fill
  // two waves of 132 nearly (S = 2 would take 4 waves of 16 + 4 k-block times against 2 of 32).
  const exec::Geometry narrow = gemm_geometry(fp32);
  CHECK(narrow.tile_k == 16);
  CHECK(narrow.blocks_per_sm == 1);
  CHECK(splits(narrow, 128, 132) == 4);
  CHECK(splits(narrow, 1, 132) == 4);
  CHECK(splits(narrow, 1024, 132) == 1);
  CHECK(splits(narrow, 128, 16) == 1); // 32 tiles on 16 SMs

  // K bounds S (each split keeps at least 2 k-blocks), and a short K does not pay for the
  // partial tiles (4 k-block times each for the SIMT GEMM).
  auto s_at_k = [](int k) {
    const codegen::Program p = codegen::generate(linear_plan(k, 1024), Target{"", Precision::FP32});
    return splits(gemm_geometry(p), 128, 132);
  };
  CHECK(s_at_k(19) == 1);   // 2 k-blocks: no second split
  CHECK(s_at_k(64) == 1);   // 4 k-blocks: 2 + 4 k-block times split in 2, against 4
  CHECK(s_at_k(100) == 1);  // 7 k-blocks: 3 + 4 split in 3, against 7 (not a tenth less)
  CHECK(s_at_k(160) == 4);  // 10 k-blocks: 3 + 4 split in 4 (the bound 5 takes two waves)
  CHECK(s_at_k(4100) == 4); // 257 k-blocks: the 32 tiles x 4 splits fill 132 SMs
  CHECK(rt::may_split(
            gemm_geometry(codegen::generate(linear_plan(19, 1024), Target{"", Precision::FP32})),
            {{"N", 128}}, 0) == false);
  CHECK(rt::may_split(g, {{"N", 128}}, 0));
  CHECK_FALSE(rt::may_split(g, {{"N", 128}}, 1));
}

TEST_CASE("split-K: the sm90 GEMMs split in k-blocks of their own depth, two blocks per SM") {
  // 64 x 128 tiles, 2 blocks per SM: 16 tiles at 128 x 1024, 264 slots on 132 SMs.
  const codegen::Program tf32 =
      codegen::generate(linear_plan(512, 1024), Target{"sm_90a", Precision::TF32});
  const exec::Geometry t = gemm_geometry(tf32);
  CHECK(t.grid == exec::Geometry::Grid::Persistent);
  CHECK(t.blocks_per_sm == 2);
  CHECK(t.tile_k == 32);
  // 16 k-blocks: a partial tile costs the sm90 GEMM 16 k-block times, more than a split saves
  // (on the H100 the GEMM alone took 10 us unsplit, 13 us split 8 ways).
  CHECK(splits(t, 128, 132) == 1);
  CHECK(rt::resolve(t, {{"N", 128}}, 132, 0).grid.x == 16);
  CHECK(rt::resolve(t, {{"N", 4096}}, 132, 0).grid.x == 264);
  // 128 k-blocks: 16 + 16 split 8 ways, against 128.
  const codegen::Program tf32_deep =
      codegen::generate(linear_plan(4096, 1024), Target{"sm_90a", Precision::TF32});
  const exec::Geometry deep = gemm_geometry(tf32_deep);
  const rt::LaunchShape shape = rt::resolve(deep, {{"N", 128}}, 132, 0);
  CHECK(shape.splits == 8);
  CHECK(shape.grid.x == 128); // 16 tiles x 8 splits, within 264 slots

  const codegen::Program bf16 =
      codegen::generate(linear_plan(512, 1024, "bf16"), Target{"sm_90a", Precision::FP32});
  const exec::Geometry b = gemm_geometry(bf16);
  CHECK(b.tile_k == 64);
  CHECK(splits(b, 128, 132) == 1); // 8 k-blocks of 64: too few to split
  const codegen::Program bf16_deep =
      codegen::generate(linear_plan(4096, 1024, "bf16"), Target{"sm_90a", Precision::FP32});
  const exec::Geometry b_deep = gemm_geometry(bf16_deep);
  CHECK(splits(b_deep, 128, 132) == 8); // 64 k-blocks: 8 + 16 split 8 ways, against 64
  CHECK(rt::resolve(b_deep, {{"N", 128}}, 132, 0).grid.x == 128);

  // The mma.sync mainloop (K not a multiple of 4): 128 x 256 tiles, 32-deep k-blocks.
  const codegen::Program tc =
      codegen::generate(linear_plan(510, 1024), Target{"", Precision::TF32});
  const exec::Geometry m = gemm_geometry(tc);
  CHECK(m.tile_k == 32);
  CHECK(splits(m, 128, 132) == 8); // 4 tiles, 16 k-blocks: the cap
  const rt::LaunchShape tiles = rt::resolve(m, {{"N", 128}}, 132, 0);
  CHECK(tiles.grid.x == 4 * static_cast<unsigned>(tiles.splits)); // a block per tile and split
}

TEST_CASE("split-K: the launch description and the config say that K splits at few rows") {
  const plan::Plan p = linear_plan(512, 1024);
  for (Precision precision : {Precision::FP32, Precision::TF32}) {
    const codegen::Program prog = codegen::generate(p, Target{"sm_90a", precision});
    INFO(prog.launches.at(0).config);
    CHECK(prog.launches.at(0).config.find("K split S ways") != std::string::npos);
    const std::string text = codegen::launch_text(prog, p);
    CHECK(text.find("split-K: K = 512 in") != std::string::npos);
    CHECK(text.find("K splits S") != std::string::npos);
    CHECK(text.find("split-K partial tiles of") != std::string::npos);
    CHECK(text.find("split-K arrival counters of") != std::string::npos);
    CHECK(prog.source.find("scheduler(shape, splits)") != std::string::npos);
  }
}

TEST_CASE("split-K: the workspace holds the partial tiles and counters of a split GEMM") {
  const plan::Plan p = linear_plan(512, 1024);
  const codegen::Program prog = codegen::generate(p, Target{"", Precision::FP32});
  const exec::Executable exe = build_executable(p, prog);
  rt::LaunchTable split(exe, 0), whole(exe, 1);
  // The 128 x 32 tile at 128 rows: 32 tiles x 4 splits of 128 x 32 floats, and 32 counters in
  // 256 bytes; from 1024 rows the 128 x 128 tile (64 tiles, split in 2).
  CHECK(split.workspace_bytes({{"N", 128}}, 132) == 32 * 4 * 128 * 32 * 4 + 256);
  CHECK(whole.workspace_bytes({{"N", 128}}, 132) == 0);  // the GEMM writes the output itself
  CHECK(split.workspace_bytes({{"N", 4096}}, 132) == 0); // 256 tiles: no split
  CHECK(split.workspace_bytes({{"N", 1024}}, 132) == 64 * 2 * 128 * 128 * 4 + 256);
  CHECK(split.may_split({{"N", 128}}));
  CHECK_FALSE(whole.may_split({{"N", 128}}));
  CHECK(split.prepare({{"N", 128}}, 132) == split.workspace_bytes({{"N", 128}}, 132));
  const std::string resolved = split.resolved_text();
  CHECK(resolved.find("k0_gemm: grid 128 x 1 x 1") != std::string::npos);
  CHECK(resolved.find("split-K S = 4") != std::string::npos);
}

TEST_CASE("split-K: units are numbered tile-major within one wave, split-major beyond it") {
  // The scheduler: S = 3 splits of 6 tiles (2 x 3 of 128 x 128, the last column partly past n),
  // in either order a bijection onto (tile, split); the split parameter -S asks for split-major.
  const kf::GemmShape shape{256, 300, 4096};
  for (int param : {3, -3}) {
    const kf::TileScheduler<128, 128, 8> tiles(shape, param);
    CHECK(tiles.splits == 3);
    CHECK(tiles.split_major == (param < 0));
    std::set<std::pair<int, int>> seen;
    for (int w = 0; w < tiles.units(); ++w) {
      const kf::WorkUnit u = tiles.unit(w, 256);
      CHECK(u.index == (param < 0 ? w % 6 : w / 3));
      CHECK(u.split == (param < 0 ? w / 6 : w % 3));
      seen.insert({u.index, u.split});
    }
    CHECK(seen.size() == 18);
  }
  // The launch: 32 narrow tiles split 4 ways fit the 132 SMs at once (tile-major); BERT-base's
  // 4096 x 768 x 768 splits its 192 wide tiles 2 ways, 384 units: split-major.
  const plan::Plan small = linear_plan(512, 1024), bert = linear_plan(768, 768);
  const codegen::Program small_prog = codegen::generate(small, Target{"", Precision::FP32}),
                         bert_prog = codegen::generate(bert, Target{"", Precision::FP32});
  const exec::Executable small_exe = build_executable(small, small_prog),
                         bert_exe = build_executable(bert, bert_prog);
  rt::LaunchTable one_wave(small_exe, 0), waves(bert_exe, 0);
  one_wave.prepare({{"N", 128}}, 132);
  waves.prepare({{"N", 4096}}, 132);
  CHECK(one_wave.resolved_text().find("split-K S = 4\n") != std::string::npos);
  CHECK(waves.resolved_text().find("split-K S = 2 (units split-major)") != std::string::npos);
}

TEST_CASE("split-K: a negative Options::max_split_k is refused") {
  Options o;
  o.arch = "sm_90a";
  o.max_split_k = -1;
  CHECK_THROWS_WITH_AS(Pipeline::from_string("pipeline t {\n  dim N\n  input x: f32[N, 4]\n"
                                             "  param w: f32[5, 4]\n  return linear(x, w)\n}\n",
                                             "t.kf", o),
                       doctest::Contains("Options::max_split_k is -1"), Error);
}

TEST_CASE("split-K: a last wave partly empty is filled where that saves more than the partial "
          "tiles cost") {
  // BERT's FFN output, 3072 -> 768 features, at 4096 rows: 32 x 6 = 192 SIMT tiles of 128 x 128
  // on 132 SMs leave 72 idle in the second wave; each tile is 192 k-blocks, a partial tile
  // costs 4.
  const codegen::Program fp32 =
      codegen::generate(linear_plan(3072, 768), Target{"", Precision::FP32});
  const exec::Geometry simt = simt_wide(fp32);
  CHECK(simt.split_cost_kblocks == 4);
  CHECK(splits(simt, 4096, 132) == 2);     // 3 waves of 96 + 4: 300 k-block times against 384
  CHECK(splits(simt, 4096, 132, 1) == 1);  // Options::max_split_k = 1
  CHECK(splits(simt, 22 * 128, 132) == 1); // 132 tiles: one whole wave
  CHECK(splits(simt, 16384, 132) == 1);    // 768 tiles: 5.8 waves
  // K = 512 (32 k-blocks): S = 2 would save 6% (3 waves of 16 + 4 against 2 of 32), less than
  // the rule's margin.
  const codegen::Program k512 =
      codegen::generate(linear_plan(512, 768), Target{"", Precision::FP32});
  const exec::Geometry shallow = simt_wide(k512);
  CHECK(splits(shallow, 4096, 132) == 1);
  // The sm90 tf32 GEMM's partial tile costs 16 of its k-blocks: its 384 tiles of 64 x 128 on 264
  // slots keep K whole; 3xTF32's 192 tiles of 128 x 128 on 132 SMs (a partial tile is 4 of its
  // slower k-blocks) split in 2: 3 waves of 48 + 4 against 2 of 96.
  const codegen::Program hopper =
      codegen::generate(linear_plan(3072, 768), Target{"sm_90a", Precision::TF32});
  const exec::Geometry tf32 = gemm_geometry(hopper);
  CHECK(tf32.split_cost_kblocks == 16);
  CHECK(splits(tf32, 4096, 132) == 1);
  const codegen::Program split3 =
      codegen::generate(linear_plan(3072, 768), Target{"sm_90a", Precision::FP32x3});
  const exec::Geometry x3 = gemm_geometry(split3);
  CHECK(x3.split_cost_kblocks == 4);
  CHECK(splits(x3, 4096, 132) == 2);
}
