// The launch descriptions of a program as text: what KFUSE_DUMP=launch prints.
#include "compiler/codegen/program.h"
#include "compiler/ir/printer.h"

#include <fmt/format.h>

namespace kfuse::codegen {

namespace {

std::string grid_text(const LaunchGeometry &g) {
  const std::string space =
      fmt::format("{} x {} in {} x {} tiles", g.rows.str(), g.cols.str(), g.tile_rows, g.tile_cols);
  switch (g.grid) {
  case LaunchGeometry::Grid::Tiles2D:
    return "2-D grid over " + space;
  case LaunchGeometry::Grid::Tiles:
    return "a block per tile of " + space;
  case LaunchGeometry::Grid::Persistent:
    return fmt::format("persistent, at most {} block(s) per SM, over {}", g.blocks_per_sm, space);
  case LaunchGeometry::Grid::Elements:
    return fmt::format("grid-stride, at most {} blocks per SM, over {} x {} elements, {} per block",
                       g.blocks_per_sm, g.rows.str(), g.cols.str(), g.tile_rows * g.tile_cols);
  }
  return {};
}

// The grid, block, shared memory and cluster of a launch.
std::string shape_text(const LaunchGeometry &g) {
  std::string s =
      fmt::format("{}; block {}; dynamic smem {} B", grid_text(g), g.block_threads, g.smem_bytes);
  if (g.row_bytes_cap > 0)
    s += fmt::format(" + a resident row of {} floats when it fits in {} B", g.row_length.str(),
                     g.row_bytes_cap);
  s += fmt::format("; cluster {}", g.cluster);
  if (g.waits_prior_grid)
    s += "; starts while the kernel before it finishes (programmatic launch), waiting for it first";
  return s;
}

std::string param_text(const LaunchParam &p, const std::vector<std::string> &names) {
  auto name = [&](ir::ValueId v) { return names.at(static_cast<size_t>(v)); };
  switch (p.kind) {
  case LaunchParam::Kind::Buffer:
    return name(p.value);
  case LaunchParam::Kind::PartialMean:
    return fmt::format("{}.partial_mean (per {} rows)", name(p.value), p.tile_rows);
  case LaunchParam::Kind::PartialM2:
    return fmt::format("{}.partial_m2 (per {} rows)", name(p.value), p.tile_rows);
  case LaunchParam::Kind::StatsSummary:
    return fmt::format("{}.summary (count, mean, M2 per feature: 3 x F doubles, all-gathered)",
                       name(p.value));
  case LaunchParam::Kind::GatheredSummaries:
    return fmt::format("{}.gathered (every rank's summary: ranks x 3 x F doubles)", name(p.value));
  case LaunchParam::Kind::Dim:
    return "dim " + p.dim;
  case LaunchParam::Kind::SmemFloats:
    return "resident row floats";
  case LaunchParam::Kind::TensorMap:
    return fmt::format("tensor map of {} ({} x {}, box {} x {}, {} elements, 128B swizzle)",
                       name(p.value), p.map.rows.str(), p.map.inner.str(), p.map.box_rows,
                       p.map.box_inner, ir::dtype_name(p.map.element));
  case LaunchParam::Kind::Splits:
    return "K splits S";
  case LaunchParam::Kind::RngSeed:
    return "RNG seed";
  case LaunchParam::Kind::RngOffset:
    return "RNG offset (advanced per train-mode run)";
  case LaunchParam::Kind::SplitPartials:
    return fmt::format("split-K partial tiles of {} (workspace: tiles x S tiles of floats)",
                       name(p.value));
  case LaunchParam::Kind::SplitCounters:
    return fmt::format("split-K arrival counters of {} (workspace: one per tile)", name(p.value));
  case LaunchParam::Kind::RowPartials:
    return fmt::format("{}.row_partials (workspace: {} floats per row, each column slice's "
                       "partials of its row reductions)",
                       name(p.value), p.row_floats);
  }
  return {};
}

} // namespace

std::string launch_text(const Program &program, const plan::Plan &plan) {
  const std::vector<std::string> names = ir::printed_names(plan.graph);
  std::string s;
  for (const KernelLaunch &l : program.launches) {
    const LaunchGeometry &g = l.geometry;
    s += fmt::format("{}: {}\n", l.entry, shape_text(g));
    if (g.tile_k > 0)
      s += fmt::format("  split-K: K = {} in {}-deep k-blocks split S ways, S from the tiles, the "
                       "SMs and K at the bound dims (1 where the tiles fill whole waves), a "
                       "work unit per tile and split\n",
                       g.inner.str(), g.tile_k);
    if (!l.config.empty())
      s += "  config: " + l.config + "\n";
    for (const LaunchParam &p : l.params)
      s += "  " + param_text(p, names) + "\n";
    for (size_t i = 0; i < l.by_rows.size(); ++i) {
      const KernelLaunch &v = l.by_rows[i];
      const KernelLaunch &before = i == 0 ? l : l.by_rows[i - 1];
      std::string when;
      if (v.geometry.kblock_time > 0 && g.kblock_time > 0)
        when = fmt::format("where its estimated time at the bound dims is the lowest (k-block "
                           "time {} against {}'s {})",
                           v.geometry.kblock_time, l.entry, g.kblock_time);
      else if (i > 0 && v.geometry.kblock_time > 0 && before.geometry.kblock_time > 0)
        when = fmt::format("instead of {} where its estimated time at the bound dims is lower "
                           "(k-block time {} against {})",
                           before.entry, v.geometry.kblock_time, before.geometry.kblock_time);
      else if (v.geometry.min_waves > 1)
        when =
            fmt::format("where the bound dims give every SM {} of its tiles", v.geometry.min_waves);
      else
        when = "where the bound dims give every SM one of its tiles";
      s += fmt::format("  variant {}, run {}: {}\n  variant config: {}\n", v.entry, when,
                       shape_text(v.geometry), v.config);
    }
  }
  return s;
}

} // namespace kfuse::codegen
