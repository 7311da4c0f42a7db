#include "compiler/select/select.h"

#include "compiler/codegen/gpu_support.h"
#include "compiler/codegen/kernel_writer.h"
#include "compiler/ir/printer.h"
#include "compiler/select/geometry.h"
#include "compiler/select/padded_rows.h"
#include "templates/col_stats.cuh"
#include "templates/elementwise.cuh"
#include "templates/row_kernel.cuh"
#include "templates/row_partials.cuh"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <set>

namespace kfuse::select {

using namespace ir;
using codegen::CodegenError;
using codegen::GemmMath;
using codegen::Sm90Tile;
using plan::Kernel;
using plan::KernelKind;

std::string tile_text(const GemmTile &t) {
  return fmt::format("{}x{}x{}", t.bm, t.bn, t.min_blocks);
}

namespace {

// Output features from which a tf32 GEMM takes the Hopper mainloop's widest tile (128 x 256).
constexpr int64_t kWideLayer = 4096;
// The least K at which a narrow layer's GEMM carries the 128 x 256 variant.
constexpr int64_t kDeepInner = 2048;
// The transcendental calls per element (ir::OpInfo::transcendental_calls) from which a Hopper
// GEMM's epilogue applies its functor in a rolled loop: inlined once per accumulator, two
// calls' code already misses the instruction cache, while one gelu or silu does not.
constexpr int kRolledEpilogueCalls = 2;

GemmTile sm90_tile(Operand op, Sm90Tile t) {
  switch (t) {
  case Sm90Tile::M128N256:
    return {Mainloop::Sm90, op, 128, 256, 1, false, {}, {}};
  case Sm90Tile::M128N128:
    return {Mainloop::Sm90, op, 128, 128, 1, false, {}, {}};
  case Sm90Tile::M64N256:
    return {Mainloop::Sm90, op, 64, 256, 1, false, {}, {}};
  case Sm90Tile::M64N128x2:
    return {Mainloop::Sm90, op, 64, 128, 2, false, {}, {}};
  }
  throw CodegenError("internal error: no such sm90 tile");
}

class Selector {
public:
  Selector(const plan::Plan &p, GemmMath math, const std::string &arch,
           const codegen::GemmTunings &tunings)
      : p_(p), g_(p.graph), names_(printed_names(p.graph)), math_(math), arch_(arch),
        tunings_(tunings) {
    padded_ = padded_rows(p_, [this](const Value &mm) { return hopper_candidate(mm); });
  }

  Selection run() {
    Selection s;
    for (const Kernel &k : p_.kernels) {
      switch (k.kind) {
      case KernelKind::Gemm: {
        GemmSpec spec = gemm(k);
        if (k.stats_of >= 0)
          s.partial_rows[k.stats_of] = spec.tile.bm;
        if (k.row_partials)
          partial_tiles_[k.rows_of] = spec.rows.partial_tiles;
        s.kernels.emplace_back(std::move(spec));
        break;
      }
      case KernelKind::Row:
        s.kernels.emplace_back(row(k));
        break;
      case KernelKind::Elementwise:
        if (k.stats_of >= 0)
          s.partial_rows[k.stats_of] = kf::COL_STATS_TILE_ROWS;
        s.kernels.emplace_back(elementwise(k));
        break;
      case KernelKind::ColPartials:
        s.partial_rows[k.stats_of] = kf::COL_STATS_TILE_ROWS;
        s.kernels.emplace_back(ColPartialsSpec{});
        break;
      case KernelKind::Column:
        s.kernels.emplace_back(
            ColumnSpec{k.stats_of >= 0, false, k.exchanged ? p_.stats_ranks : 0});
        break;
      case KernelKind::Summary:
        s.kernels.emplace_back(ColumnSpec{true, true, 0});
        break;
      case KernelKind::Transpose:
        s.kernels.emplace_back(TransposeSpec{});
        break;
      }
    }
    for (ValueId v : padded_)
      s.row_multiples[v] = 16 / static_cast<int>(dtype_bytes(g_[v].type.dtype));
    for (size_t i = 0; i < p_.kernels.size(); ++i)
      if (p_.kernels[i].kind == KernelKind::Transpose)
        round_tf32(s, i);
    return s;
  }

private:
  const codegen::GemmTuning *tuning(const Kernel &k) const {
    auto it = tunings_.find(k.name);
    return it == tunings_.end() ? nullptr : &it->second;
  }

  // Transpose kernel `transpose` rounds its copy to tf32 where only tf32 GEMMs read it; their
  // configs say so.
  void round_tf32(Selection &s, size_t transpose) const {
    const Kernel &t = p_.kernels[transpose];
    const ValueId v = t.anchor;
    if (!tf32_operand_only(s, v))
      return;
    std::get<TransposeSpec>(s.kernels[transpose]).round_tf32 = true;
    for (size_t i = 0; i < p_.kernels.size(); ++i)
      if (std::count(p_.kernels[i].reads.begin(), p_.kernels[i].reads.end(), v))
        std::get<GemmSpec>(s.kernels[i]).tile.config +=
            fmt::format("; {} rounds its operand {} to tf32 (nearest), which the tensor cores "
                        "would truncate",
                        t.name, names_.at(static_cast<size_t>(v)));
  }

  // Whether only GEMMs on tf32 operands read `v`, each as an operand only, and the caller does
  // not: then its writer may round it to tf32 (TransposeSpec::round_tf32).
  bool tf32_operand_only(const Selection &s, ValueId v) const {
    if (std::find(g_.outputs.begin(), g_.outputs.end(), v) != g_.outputs.end())
      return false;
    bool read = false;
    for (size_t i = 0; i < p_.kernels.size(); ++i) {
      const Kernel &k = p_.kernels[i];
      if (std::find(k.reads.begin(), k.reads.end(), v) == k.reads.end())
        continue;
      if (!reads_as_operand_only(g_, k, v))
        return false;
      const GemmSpec &spec = std::get<GemmSpec>(s.kernels[i]);
      auto tf32 = [](const GemmTile &t) {
        return t.mainloop != Mainloop::Simt && t.operand == Operand::Tf32;
      };
      if (!tf32(spec.tile) || !std::all_of(spec.by_rows.begin(), spec.by_rows.end(), tf32))
        return false;
      read = true;
    }
    return read;
  }

  // A GEMM the Hopper mainloop would take if its operands' rows allow TMA: a linear of bf16/f16
  // operands, or of f32 ones at tf32 or 3xtf32 on sm_90a.
  bool hopper_candidate(const Value &mm) const {
    if (mm.op != OpKind::Linear)
      return false;
    return g_[mm.args[0]].type.dtype != ir::DType::F32 ||
           (arch_ == "sm_90a" && (math_ == GemmMath::Tf32 || math_ == GemmMath::Tf32x3));
  }

  // The Hopper mainloop takes the Hopper candidates whose operands' rows are 16-byte multiples
  // for TMA: an inner extent that is a constant multiple of 4 (tf32) or 8 (bf16/f16), or padded
  // rows (padded_). GEMMs of bf16/f16 operands run on it only: gpu_unsupported reports those it
  // cannot take at their location before planning, and UnsupportedGemm those that the planner's
  // rewrites left reading a declared tensor.
  bool use_sm90(ValueId id) const {
    const Value &mm = g_[id];
    const bool padded = padded_.count(mm.args[0]) && padded_.count(mm.args[1]);
    if (g_[mm.args[0]].type.dtype != ir::DType::F32) {
      if (mm.op != OpKind::Linear)
        throw CodegenError(fmt::format(
            "internal error: pipeline '{}': line {}: a {} of {} operands reached the code "
            "generator, but the Hopper GEMM reads K-major operands only (lower() makes every "
            "such GEMM a linear: passes::k_major_operands)",
            g_.name, mm.loc.line, op_info(mm.op).name, dtype_name(g_[mm.args[0]].type.dtype)));
      if (auto why = codegen::half_gemm_unsupported(g_, mm, arch_, padded))
        throw UnsupportedGemm(g_, id, *why);
      return true;
    }
    const Dim &inner = g_[mm.args[0]].type.shape[1];
    return hopper_candidate(mm) && (padded || (!inner.is_symbolic() && inner.value % 4 == 0));
  }

  // What makes this kernel, the tile aside: the target, the operands and the kernel's ops,
  // reads and stores as the plan holds them. `kfuse tune` keys its results by it.
  std::string signature(const Kernel &k, const Value &mm) const {
    const std::vector<std::string> &names = names_;
    std::string s = fmt::format("{} math {} {} {} K={} N={}\n", arch_, static_cast<int>(math_),
                                dtype_name(g_[mm.args[0]].type.dtype), op_info(mm.op).name,
                                g_[mm.args[0]].type.shape[1].str(), mm.type.shape[1].str());
    for (ValueId id : k.computes)
      s += print_statement(g_, names, id) + "\n";
    for (ValueId r : k.reads)
      s += fmt::format("reads {} {}\n", names[static_cast<size_t>(r)], g_[r].type.str());
    for (ValueId w : k.stores)
      s += fmt::format("stores {}\n", names[static_cast<size_t>(w)]);
    for (ValueId st : k.row_stages)
      s += fmt::format("row {}\n", names[static_cast<size_t>(st)]);
    if (k.stats_of >= 0)
      s += fmt::format("stats {}\n", names[static_cast<size_t>(k.stats_of)]);
    return s;
  }

  GemmSpec gemm(const Kernel &k) const {
    const Value &mm = g_[k.anchor];
    GemmSpec spec;
    spec.a = mm.args[0];
    spec.b = mm.args[1];
    spec.trans_b = mm.op == OpKind::Linear;
    spec.trans_a = mm.op == OpKind::MatmulTN;
    const bool rows = !k.row_stages.empty();
    spec.out = rows ? k.rows_of : k.stores.at(0);
    spec.signature = signature(k, mm);
    if (const codegen::GemmTuning *t = tuning(k)) {
      spec.max_splits_by_class = t->max_splits;
      spec.split_whys = t->split_whys;
    }
    const bool sm90 = use_sm90(k.anchor);
    const ir::DType operands = g_[spec.a].type.dtype;
    const bool split_tf32 = math_ == GemmMath::Tf32x3 && operands == ir::DType::F32;
    // Row partials are folded from the accumulators: the GEMM keeps its own tile and stores.
    const bool staged_rows = rows && !k.row_partials;
    check_tuned_tile(k, sm90, staged_rows, split_tf32);
    if (sm90) {
      const Operand op = split_tf32                    ? Operand::Tf32x3
                         : operands == ir::DType::BF16 ? Operand::Bf16
                         : operands == ir::DType::F16  ? Operand::F16
                                                       : Operand::Tf32;
      if (staged_rows)
        spec.tile = staged(k, op);
      else if (split_tf32)
        spec.tile = {Mainloop::Sm90,
                     op,
                     128,
                     128,
                     1,
                     false,
                     k.name,
                     "3xtf32 128 x 128 tile, 1 block per SM: its small parts take the shared "
                     "memory of a second block"};
      else
        by_width(k, op, spec);
    } else if (math_ == GemmMath::Fp32 || spec.trans_a) {
      // The SIMT mainloop alone reads A column-major; it computes in fp32 at every precision.
      simt(k, spec, rows);
    } else {
      const Operand op = math_ == GemmMath::Tf32 ? Operand::Tf32 : Operand::Tf32x3;
      const GemmTraits traits = gemm_traits({Mainloop::MmaSync, op, 0, 0, 1, false, {}, {}}, 0);
      spec.tile = {Mainloop::MmaSync,
                   op,
                   traits.bm,
                   traits.bn,
                   1,
                   false,
                   k.name,
                   fmt::format("{} mma.sync {} x {} tile, the mma.sync GEMM's one configuration{}",
                               op == Operand::Tf32 ? "tf32" : "3xtf32", traits.bm, traits.bn,
                               arch_ == "sm_90a" ? " (the Hopper mainloop needs a Linear whose "
                                                   "inner extent is a constant multiple of 4)"
                                                 : "")};
    }
    if (rows)
      epilogue_rows(k, mm, spec);
    describe_split(spec);
    choose_epilogue_apply(k, spec);
    describe_padding(spec);
    return spec;
  }

  // The team of lanes per staged row that the epilogue runs row passes with, or the column
  // slices whose partials of its rows' reductions the epilogue writes (row_partials_epilogue).
  void epilogue_rows(const Kernel &k, const Value &mm, GemmSpec &spec) const {
    if (k.row_partials) {
      // Each thread folds its accumulators (row_partials_epilogue): no team of lanes.
      const Dim &cols = g_[k.rows_of].type.shape.back();
      if (cols.is_symbolic())
        throw CodegenError(fmt::format("internal error: {} writes row partials over {} columns, "
                                       "a symbolic count of tiles",
                                       k.name, cols.str()));
      spec.rows = {
          0, false,
          static_cast<int>((cols.value + kf::ROW_PARTIAL_COLS - 1) / kf::ROW_PARTIAL_COLS)};
      const std::string why = fmt::format(
          "; its epilogue writes the partials of {} row reduction{} per row of each {} columns "
          "({} slices)",
          k.row_stages.size(), k.row_stages.size() == 1 ? "" : "s", kf::ROW_PARTIAL_COLS,
          spec.rows.partial_tiles);
      spec.tile.config += why;
      for (GemmTile &v : spec.by_rows)
        v.config += why;
    } else {
      const Dim &cols = mm.type.shape[1];
      if (cols.is_symbolic() || cols.value > spec.tile.bn)
        throw CodegenError(fmt::format("internal error: {} runs row passes over {} columns, its "
                                       "tiles have {}",
                                       k.name, cols.str(), spec.tile.bn));
      spec.rows = {kf::row_team_lanes(static_cast<int>(g_[k.rows_of].type.shape.back().value)),
                   false};
    }
  }

  // Where the operands' rows are padded (padded_), which kernels write them so, in the config.
  void describe_padding(GemmSpec &spec) const {
    const std::string why = padding_text(p_, names_, padded_, spec.a, spec.b);
    spec.tile.config += why;
    for (GemmTile &v : spec.by_rows)
      v.config += why;
  }

  // Split-K, the part of the configuration the bound dims decide, in each tile's config.
  static void describe_split(GemmSpec &spec) {
    auto with_split = [&](GemmTile &t) {
      t.config += fmt::format("; K split S ways in {}-deep k-blocks where the tiles leave SMs "
                              "idle (few rows, or a last wave partly empty), S chosen from the "
                              "tiles, SMs and K when the dims are bound",
                              gemm_traits(t, 0).bk);
      for (const std::string &why : spec.split_whys)
        t.config += "; " + why;
    };
    with_split(spec.tile);
    if (spec.tile.mainloop == Mainloop::Simt)
      for (GemmTile &v : spec.by_rows)
        with_split(v);
  }

  // The transcendental calls the epilogue of GEMM kernel `k` makes per element of `out`: its
  // per-element ops' (per-column ones run once per column).
  int epilogue_calls(const Kernel &k, ValueId out) const {
    int calls = 0;
    std::set<ValueId> seen;
    for (std::vector<ValueId> todo = {out}; !todo.empty();) {
      const ValueId id = todo.back();
      todo.pop_back();
      if (id == k.anchor || !plan::computes(k, id) || !seen.insert(id).second)
        continue;
      if (!plan::is_column_value(g_[id].type))
        calls += op_info(g_[id].op).transcendental_calls;
      todo.insert(todo.end(), g_[id].args.begin(), g_[id].args.end());
    }
    return calls;
  }

  // A Hopper GEMM's epilogue of at least kRolledEpilogueCalls transcendental calls per element
  // applies its functor in a rolled loop (GemmSpec::rolled_epilogue). Epilogues writing column
  // statistics (which read the stored values back from the accumulators) or running row passes
  // (whose tile is staged whole already) keep theirs. Split-K, chosen at run time, sums the
  // accumulators before either applies.
  void choose_epilogue_apply(const Kernel &k, GemmSpec &spec) const {
    if (spec.tile.mainloop != Mainloop::Sm90 || k.stats_of >= 0 || !k.row_stages.empty())
      return;
    const int calls = epilogue_calls(k, spec.out);
    if (calls < kRolledEpilogueCalls)
      return;
    spec.rolled_epilogue = true;
    const std::string why =
        fmt::format("; epilogue applied in a rolled loop: {} transcendental calls per element "
                    "(>= {}), its code a few times instead of once per accumulator",
                    calls, kRolledEpilogueCalls);
    spec.tile.config += why;
    for (GemmTile &v : spec.by_rows)
      v.config += why;
  }

  // A tuned tile is for the Hopper mainloop's tf32, bf16 and f16 GEMMs without row passes: the
  // others have one tile each, or choose it by the batch.
  void check_tuned_tile(const Kernel &k, bool sm90, bool rows, bool split_tf32) const {
    const codegen::GemmTuning *t = tuning(k);
    if (!t || !t->tile || (sm90 && !rows && !split_tf32))
      return;
    throw CodegenError(fmt::format(
        "pipeline '{}': {}: tile {} was asked for, but this GEMM's tiles are not tuned ({})",
        g_.name, k.name, codegen::tile_name(*t->tile),
        !sm90  ? (math_ == GemmMath::Fp32 ? "the SIMT GEMM's are chosen by the batch"
                                          : "the mma.sync GEMM has one")
        : rows ? "it has one, 128x128x1, staged for its row passes"
               : "3xtf32 has one, 128x128x1"));
  }

  // A GEMM whose epilogue runs row passes: 128 x 128 tiles, one block per SM, the epilogue's
  // scratch holding a staged tile.
  GemmTile staged(const Kernel &k, Operand op) const {
    return {Mainloop::Sm90,
            op,
            128,
            128,
            1,
            true,
            k.name,
            fmt::format("{} 128 x 128 tile, 1 block per SM, each tile staged in shared memory for "
                        "the row passes its epilogue runs ({} features)",
                        math_name(op), g_[k.anchor].type.shape[1].str())};
  }

  std::string math_name(Operand op) const {
    switch (op) {
    case Operand::Tf32x3:
      return "3xtf32";
    case Operand::Tf32:
      return "tf32";
    case Operand::Bf16:
      return "bf16";
    case Operand::F16:
      return "f16";
    }
    return "?";
  }

  // A Hopper GEMM's tile, tuned (kfuse tune) or by the layer's width: the batch (rows) is bound
  // at run time. 128 x 256 tiles reach cuBLAS's speed once there are enough of them for every
  // SM, which below kWideLayer features takes thousands of rows, so narrower layers take
  // 64 x 128 tiles, two blocks per SM (one's epilogue overlaps the other's mainloop). Where the
  // kernel writes no column statistics (whose partials' tile height the column kernel is
  // compiled for), the same kernel with the 128 x 128 tile stands beside it for runs whose rows
  // give that tile a full wave, and where K is at least kDeepInner, the 128 x 256 tile for runs
  // whose waves of it take less time (Sm90Gemm's KBLOCK_TIME).
  void by_width(const Kernel &k, Operand op, GemmSpec &spec) const {
    const std::string type = math_name(op);
    const Dim &features = g_[k.anchor].type.shape[1];
    const Dim &inner = g_[spec.a].type.shape[1];
    spec.tiles.assign(std::begin(codegen::kSm90Tiles), std::end(codegen::kSm90Tiles));
    const codegen::GemmTuning *t = tuning(k);
    if (t && t->tile) {
      spec.tile = sm90_tile(op, *t->tile);
      spec.tile.config =
          fmt::format("{} {} tile: {}", type, codegen::tile_name(*t->tile), t->tile_why);
    } else if (!features.is_symbolic() && features.value < kWideLayer) {
      spec.tile = sm90_tile(op, Sm90Tile::M64N128x2);
      spec.tile.config = fmt::format("{} 64 x 128 tile, 2 blocks per SM: {} output features (< {}) "
                                     "give few 128 x 256 tiles at the batches such layers run",
                                     type, features.value, kWideLayer);
      if (k.stats_of < 0) {
        GemmTile wide = sm90_tile(op, Sm90Tile::M128N128);
        wide.entry = k.name + "_wide";
        spec.tile.config +=
            fmt::format("; {} where the rows give a 128 x 128 tile to every SM", wide.entry);
        wide.config = fmt::format("{} 128 x 128 tile, 1 block per SM, instead of {}'s where the "
                                  "rows give one of these tiles to every SM (K not split then)",
                                  type, k.name);
        spec.by_rows.push_back(wide);
        if (!inner.is_symbolic() && inner.value >= kDeepInner) {
          GemmTile wider = sm90_tile(op, Sm90Tile::M128N256);
          wider.entry = k.name + "_wider";
          spec.tile.config += fmt::format("; {} instead of {} where its estimated time is lower "
                                          "(K = {} >= {})",
                                          wider.entry, wide.entry, inner.value, kDeepInner);
          wider.config = fmt::format("{} 128 x 256 tile, 1 block per SM, instead of {}'s where "
                                     "its waves of tiles take less time at the bound rows",
                                     type, wide.entry);
          spec.by_rows.push_back(wider);
        }
      }
    } else {
      spec.tile = sm90_tile(op, Sm90Tile::M128N256);
      spec.tile.config =
          fmt::format("{} 128 x 256 tile, 1 block per SM: {} output features (>= {}) "
                      "fill the SMs from about 1000 rows",
                      type, features.str(), kWideLayer);
    }
    spec.tile.entry = k.name;
  }

  // The SIMT fp32 GEMM: both tiles compiled, a run taking the one of lower estimated time at its
  // dims (the narrow one where the wide tiles are few and would split K into short units); the
  // wide tile alone where the epilogue runs row passes over a staged tile or writes row partials
  // (per ROW_PARTIAL_COLS columns, wider than the narrow tile).
  void simt(const Kernel &k, GemmSpec &spec, bool rows) const {
    const GemmTile wide_tile{Mainloop::Simt, Operand::Tf32, 128, 128, 1, false, {}, {}};
    if (rows) {
      spec.tile = wide_tile;
      spec.tile.entry = k.name;
      spec.tile.config =
          k.row_partials
              ? "fp32 SIMT 128 x 128 tile alone: its 128 x 32 twin is narrower than a row "
                "partial's columns"
              : fmt::format("fp32 SIMT 128 x 128 tile, its rows ({} features) staged in shared "
                            "memory for the row passes its epilogue runs",
                            g_[k.anchor].type.shape[1].str());
      return;
    }
    GemmTile wide = wide_tile;
    wide.entry = k.name + "_wide";
    wide.config = fmt::format("fp32 SIMT 128 x 128 tile, instead of {}'s where its estimated time "
                              "at the bound dims is lower",
                              k.name);
    spec.tile = {Mainloop::Simt,
                 Operand::Tf32,
                 128,
                 32,
                 1,
                 false,
                 k.name,
                 fmt::format("fp32 SIMT 128 x 32 tile, 4 warps: four times the tiles of the "
                             "128 x 128 tile, for batches whose 128 x 128 tiles would leave SMs "
                             "idle or split K into short units; {} where its estimated time is "
                             "lower",
                             wide.entry)};
    spec.by_rows.push_back(wide);
    if (spec.trans_a)
      for (GemmTile *t : {&spec.tile, &spec.by_rows.back()})
        t->config += "; its first operand read column-major (matmul_tn), which the SIMT "
                     "mainloop alone does";
  }

  RowSpec row(const Kernel &k) const {
    const Dim &cols = g_[k.rows_of].type.shape.back();
    RowSpec spec;
    if (k.row_partials) { // a warp per row merges its column slices' partials
      auto it = partial_tiles_.find(k.rows_of);
      if (it == partial_tiles_.end())
        throw CodegenError(fmt::format("internal error: {} merges row partials of {} that no "
                                       "GEMM before it writes",
                                       k.name, g_[k.rows_of].name));
      spec.threads = 32;
      spec.partial_tiles = it->second;
      return spec;
    }
    spec.threads = cols.is_symbolic() ? 256 : kf::row_threads(static_cast<int>(cols.value));
    for (ValueId st : k.row_stages)
      spec.resident = spec.resident || codegen::keeps_resident_row(g_[st].op);
    return spec;
  }

  // A thread moves `vec` columns of each matrix as 16-byte accesses where a row holds whole
  // vectors (checked again at run time with the pointers' alignment).
  ElementwiseSpec elementwise(const Kernel &k) const {
    if (k.stats_of >= 0)
      return {1, true};
    const ValueId out = k.anchor;
    int64_t narrowest = dtype_bytes(g_[out].type.dtype);
    for (ValueId m : elementwise_matrices(g_, k))
      narrowest = std::min(narrowest, dtype_bytes(g_[m].type.dtype));
    int vec = static_cast<int>(kf::ELEMENTWISE_VECTOR_BYTES / narrowest);
    const Dim &cols = g_[out].type.shape.back();
    if (!cols.is_symbolic() && cols.value % vec != 0)
      vec = 1;
    return {vec};
  }

  const plan::Plan &p_;
  const Graph &g_;
  const std::vector<std::string> names_; // printed names: the signature's spelling
  GemmMath math_;
  std::string arch_;
  const codegen::GemmTunings &tunings_;
  std::set<ValueId> padded_;             // padded_rows
  std::map<ValueId, int> partial_tiles_; // row partials' matrix -> column slices of its GEMM
};

} // namespace

std::vector<ValueId> elementwise_matrices(const Graph &g, const Kernel &k) {
  const ValueId out = k.anchor;
  const Dim &cols = g[out].type.shape.back();
  std::vector<ValueId> matrices;
  for (ValueId id : k.computes)
    for (ValueId m : g[id].args) {
      const TensorType &mt = g[m].type;
      if (std::count(matrices.begin(), matrices.end(), m) ||
          std::count(k.computes.begin(), k.computes.end(), m) ||
          mt.shape.back() == Dim::constant(1))
        continue;
      if (mt.shape.back() != cols)
        throw CodegenError(fmt::format("internal error: elementwise kernel {} reads {} of other "
                                       "columns than its output's",
                                       k.name, g[m].name));
      matrices.push_back(m);
    }
  return matrices;
}

plan::Plan kernel_view(const plan::Plan &p) {
  plan::Plan view = p;
  view.graph = ir::matrix_view(p.graph);
  for (plan::Intermediate &i : view.intermediates)
    i.type = i.type.matrix_view();
  return view;
}

// How the GEMMs of f32 operands multiply at precision p (bf16 leaves none: autocast rounded
// their operands).
GemmMath gemm_math(Precision p) {
  return p == Precision::TF32     ? GemmMath::Tf32
         : p == Precision::FP32x3 ? GemmMath::Tf32x3
                                  : GemmMath::Fp32;
}

Selection select_kernels(const plan::Plan &p, const Target &target,
                         const codegen::GemmTunings &tunings) {
  for (const auto &entry : tunings) {
    const std::string &name = entry.first; // a lambda may not capture a structured binding
    if (std::none_of(p.kernels.begin(), p.kernels.end(),
                     [&](const Kernel &k) { return k.name == name && k.kind == KernelKind::Gemm; }))
      throw CodegenError(fmt::format("pipeline '{}': a tuned configuration names '{}', which is "
                                     "no GEMM kernel of the plan",
                                     p.graph.name, name));
  }
  return Selector(p, gemm_math(target.precision), target.arch, tunings).run();
}

std::vector<exec::TunableGemm> gemm_keys(const plan::Plan &p, const Selection &s) {
  std::vector<exec::TunableGemm> keys;
  for (size_t i = 0; i < p.kernels.size(); ++i)
    if (const auto *g = std::get_if<GemmSpec>(&s.kernels[i]))
      keys.push_back({g->tile.entry, g->signature, tile_text(g->tile), g->tiles});
  return keys;
}

} // namespace kfuse::select
