// Test kernels that run every row template with a lane team (kf::LaneTeam<Lanes>: Lanes lanes of a
// warp per row, 32 / Lanes rows per warp) over rows staged in shared memory (In = kf::Staged), as
// a GEMM epilogue runs a row operation over its tile: the unit tests compile them with NVRTC, the
// GPU tests launch them.
#pragma once

#include "runtime/nvrtc_compiler.h"

#include <string>
#include <vector>

namespace kfuse::testing {

// The team widths the kernels take: no shuffle, one, three and five shuffle stages.
inline constexpr int kRowTeamLanes[] = {1, 2, 8, 32};
// A row holds at most kRowTeamMaxN elements.
inline constexpr int kRowTeamMaxN = 257;
// A team's staged row starts kRowTeamStage floats after the previous team's: not a multiple of
// four, so every other team reads a row that is not 16-byte aligned and both the float4 and the
// scalar kf::Staged loads run.
inline constexpr int kRowTeamStage = 261;

// The dynamic shared memory of a block of `threads` threads in teams of `lanes`: each team's
// staged row (the lane team itself needs none). A block runs threads / lanes consecutive rows.
inline unsigned row_team_smem_bytes(int threads, int lanes) {
  return static_cast<unsigned>(threads / lanes * kRowTeamStage * 4);
}

// Every kernel of the program, extern "C". Arguments (x [rows, n] fp32 in global memory, y the
// output; lanes one of kRowTeamLanes; a flag is an int, 0 or 1):
//   team_softmax (x, y, rows, n, lanes, log)
//   team_norm (x, y, rows, n, lanes, eps, rms): layernorm, or rmsnorm when rms
//   team_group_norm (x, y, rows, n, lanes, groups, eps)
//   team_map (x, y, rows, n, lanes): y = 2x + 1
//   team_reduce (x, y, rows, n, lanes, correction, kind): kind the index of kf::Reduce (Sum,
//     Mean, Max, Min, LogSumExp, Var, Std); y [rows, 32], member i's result at column i
//   team_pool (x, y, rows, n, lanes, width, kernel, stride, max): max or average pooling,
//     y [rows, width]
std::vector<std::string> row_team_kernel_names();

// The program, for `arch`, its headers the embedded templates.
rt::CompileRequest row_team_request(const std::string &arch);

} // namespace kfuse::testing
