// Test kernels that run every row template with a warp team (kf::WarpTeam) over rows staged in
// shared memory (In = kf::Staged), as a GEMM epilogue runs a row operation over its tile: the
// unit tests compile them with NVRTC, the GPU tests launch them.
#pragma once

#include "runtime/nvrtc_compiler.h"

#include <string>
#include <vector>

namespace kfuse::testing {

// A block of kRowTeamWarps warps handles kRowTeamWarps consecutive rows (blockDim.x =
// 32 * kRowTeamWarps); a row holds at most kRowTeamMaxN elements.
inline constexpr int kRowTeamWarps = 4;
inline constexpr int kRowTeamMaxN = 257;
// A warp's staged row starts kRowTeamStage floats after the previous warp's: not a multiple of
// four, so warps 1 to 3 read rows that are not 16-byte aligned and both the float4 and the
// scalar kf::Staged loads run.
inline constexpr int kRowTeamStage = 261;
// The floats of static shared memory each kernel declares (the staged rows): the warp team
// itself needs none.
inline constexpr int kRowTeamTileFloats = kRowTeamWarps * kRowTeamStage;

// Every kernel of the program, extern "C". Arguments (x [rows, n] fp32 in global memory, y the
// output; a flag is an int, 0 or 1):
//   warp_softmax (x, y, rows, n, log)
//   warp_norm (x, y, rows, n, eps, rms): layernorm, or rmsnorm when rms
//   warp_group_norm (x, y, rows, n, groups, eps)
//   warp_map (x, y, rows, n): y = 2x + 1
//   warp_reduce (x, y, rows, n, correction, kind): kind the index of kf::Reduce (Sum, Mean, Max,
//     Min, LogSumExp, Var, Std); y [rows, 32], every lane's result
//   warp_pool (x, y, rows, n, width, kernel, stride, max): max or average pooling, y [rows, width]
std::vector<std::string> row_team_kernel_names();

// The program, for `arch`, its headers the embedded templates.
rt::CompileRequest row_team_request(const std::string &arch);

} // namespace kfuse::testing
