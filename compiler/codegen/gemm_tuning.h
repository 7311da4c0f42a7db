// A GEMM kernel's configuration space and the tuned choices that replace the heuristic's
// (`kfuse tune` measures them; runtime/tuning_store.h keeps them per device).
//
// A tile is compile-time (it is a template argument of the kernel), so a tuned tile reaches the
// generated source. Split-K's cap is data in the launch description: tuned caps are kept per
// class of the batch (rows) and chosen when a run binds the dims, with no recompile.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kfuse::codegen {

// The tiles of the Hopper GEMM (templates/gemm_sm90.cuh) a tf32, bf16 or f16 GEMM may take:
// rows x columns of output per block, and blocks resident per SM. 3xtf32 and the cp.async
// mainloops have one tile each.
enum class Sm90Tile : uint8_t { M128N256, M128N128, M64N256, M64N128x2 };

inline constexpr Sm90Tile kSm90Tiles[] = {Sm90Tile::M128N256, Sm90Tile::M128N128, Sm90Tile::M64N256,
                                          Sm90Tile::M64N128x2};

// "128x256x1": rows x columns x blocks per SM.
const char *tile_name(Sm90Tile t);
// The tile named so; nullopt for any other text.
std::optional<Sm90Tile> parse_tile(const std::string &name);

// The split-K caps `kfuse tune` tries (0: the shape rule's own choice,
// runtime/launch_geometry.cpp).
inline constexpr int kSplitLimits[] = {0, 1, 2, 4, 8};

// The class of a batch of `rows` rows: c such that 2^(c-1) < rows <= 2^c (rows >= 1). Batches of
// one class fill the GPU alike, so a split-K cap tuned at one size serves the class.
int rows_class(int64_t rows);

// What replaces the heuristic's choice for one GEMM kernel.
struct GemmTuning {
  std::optional<Sm90Tile> tile;        // only for kernels that list candidate tiles
  std::string tile_why;                // "tuned on <device> at N=1024 (...)"
  std::map<int, int> max_splits;       // rows_class -> split-K cap (>= 1)
  std::vector<std::string> split_whys; // one line per class, for the config text
};

// By kernel entry name (k0_gemm, ...).
using GemmTunings = std::map<std::string, GemmTuning>;

} // namespace kfuse::codegen
