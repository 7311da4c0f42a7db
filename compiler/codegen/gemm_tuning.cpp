#include "compiler/codegen/gemm_tuning.h"

namespace kfuse::codegen {

const char *tile_name(Sm90Tile t) {
  switch (t) {
  case Sm90Tile::M128N256:
    return "128x256x1";
  case Sm90Tile::M128N128:
    return "128x128x1";
  case Sm90Tile::M64N256:
    return "64x256x1";
  case Sm90Tile::M64N128x2:
    return "64x128x2";
  }
  return "?";
}

std::optional<Sm90Tile> parse_tile(const std::string &name) {
  for (Sm90Tile t : kSm90Tiles)
    if (name == tile_name(t))
      return t;
  return std::nullopt;
}

int rows_class(int64_t rows) {
  int c = 0;
  while ((int64_t{1} << c) < rows)
    ++c;
  return c;
}

} // namespace kfuse::codegen
