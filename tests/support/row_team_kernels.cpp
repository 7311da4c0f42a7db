#include "tests/support/row_team_kernels.h"

#include "compiler/codegen/embedded_templates.h"

#include <string>

namespace kfuse::testing {

namespace {

// Each warp stages its row with plain loads into a tile of kWarps rows of kStage floats, then runs
// the template on the staged copy.
const char *const kSource = R"(#include "row_group_norm.cuh"
#include "row_map.cuh"
#include "row_norm.cuh"
#include "row_pool.cuh"
#include "row_reduce.cuh"
#include "row_softmax.cuh"

namespace {

struct Identity {
  __device__ float operator()(int, float x) const { return x; }
};
struct TwiceAddOne {
  __device__ float operator()(int, float x) const { return 2.0f * x + 1.0f; }
};

// One tile for every kernel: a __shared__ array in per_warp would be one per instantiation.
__device__ float *staging_tile() {
  __shared__ __align__(16) float tile[kWarps * kStage];
  return tile;
}

// body(warp, staged rows of the block, first row of the block, team); a warp past the last row
// returns as a whole.
template <class Body> __device__ void per_warp(const float *x, int rows, int n, Body body) {
  float *tile = staging_tile();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int first = blockIdx.x * kWarps;
  if (first + warp >= rows)
    return;
  for (int c = lane; c < n; c += 32)
    tile[warp * kStage + c] = x[static_cast<long long>(first + warp) * n + c];
  __syncwarp();
  body(warp, reinterpret_cast<const kf::Staged *>(tile), first, kf::WarpTeam{lane});
}

template <bool Log> __device__ void softmax(const float *x, float *y, int rows, int n) {
  per_warp(x, rows, n, [&](int w, const kf::Staged *s, int first, kf::WarpTeam team) {
    kf::row_softmax<32, Log>(w, n, s, kStage, y + static_cast<long long>(first) * n, n,
                             Identity{}, nullptr, 0, team);
  });
}

template <bool Rms> __device__ void norm(const float *x, float *y, int rows, int n, float eps) {
  per_warp(x, rows, n, [&](int w, const kf::Staged *s, int first, kf::WarpTeam team) {
    kf::row_norm<32, Rms>(w, n, s, kStage, y + static_cast<long long>(first) * n, n, eps,
                          Identity{}, Identity{}, nullptr, 0, team);
  });
}

template <kf::Reduce R>
__device__ void reduce(const float *x, float *y, int rows, int n, float correction) {
  per_warp(x, rows, n, [&](int w, const kf::Staged *s, int first, kf::WarpTeam team) {
    y[static_cast<long long>(first + w) * 32 + team.lane] =
        kf::row_reduce<32, R>(w, n, s, kStage, correction, Identity{}, team);
  });
}

template <kf::Reduce R>
__device__ void pool(const float *x, float *y, int rows, int n, int width, int kernel,
                     int stride) {
  per_warp(x, rows, n, [&](int w, const kf::Staged *s, int first, kf::WarpTeam team) {
    kf::row_pool<32, R>(w, s, kStage, y + static_cast<long long>(first) * width, width, kernel,
                        stride, Identity{}, team);
  });
}

} // namespace

extern "C" __global__ void warp_softmax(const float *x, float *y, int rows, int n, int log) {
  if (log)
    softmax<true>(x, y, rows, n);
  else
    softmax<false>(x, y, rows, n);
}
extern "C" __global__ void warp_norm(const float *x, float *y, int rows, int n, float eps,
                                     int rms) {
  if (rms)
    norm<true>(x, y, rows, n, eps);
  else
    norm<false>(x, y, rows, n, eps);
}
extern "C" __global__ void warp_group_norm(const float *x, float *y, int rows, int n, int groups,
                                           float eps) {
  per_warp(x, rows, n, [&](int w, const kf::Staged *s, int first, kf::WarpTeam team) {
    kf::row_group_norm<32>(w, n, groups, s, kStage, y + static_cast<long long>(first) * n, n, eps,
                           Identity{}, Identity{}, nullptr, 0, team);
  });
}
extern "C" __global__ void warp_map(const float *x, float *y, int rows, int n) {
  per_warp(x, rows, n, [&](int w, const kf::Staged *s, int first, kf::WarpTeam team) {
    kf::row_map<32>(w, n, s, kStage, y + static_cast<long long>(first) * n, n, TwiceAddOne{},
                    team);
  });
}
extern "C" __global__ void warp_reduce(const float *x, float *y, int rows, int n,
                                       float correction, int kind) {
  switch (static_cast<kf::Reduce>(kind)) {
  case kf::Reduce::Sum:
    return reduce<kf::Reduce::Sum>(x, y, rows, n, correction);
  case kf::Reduce::Mean:
    return reduce<kf::Reduce::Mean>(x, y, rows, n, correction);
  case kf::Reduce::Max:
    return reduce<kf::Reduce::Max>(x, y, rows, n, correction);
  case kf::Reduce::Min:
    return reduce<kf::Reduce::Min>(x, y, rows, n, correction);
  case kf::Reduce::LogSumExp:
    return reduce<kf::Reduce::LogSumExp>(x, y, rows, n, correction);
  case kf::Reduce::Var:
    return reduce<kf::Reduce::Var>(x, y, rows, n, correction);
  case kf::Reduce::Std:
    return reduce<kf::Reduce::Std>(x, y, rows, n, correction);
  }
}
extern "C" __global__ void warp_pool(const float *x, float *y, int rows, int n, int width,
                                     int kernel, int stride, int max) {
  if (max)
    pool<kf::Reduce::Max>(x, y, rows, n, width, kernel, stride);
  else
    pool<kf::Reduce::Mean>(x, y, rows, n, width, kernel, stride);
}
)";

} // namespace

std::vector<std::string> row_team_kernel_names() {
  return {"warp_softmax", "warp_norm", "warp_group_norm", "warp_map", "warp_reduce", "warp_pool"};
}

rt::CompileRequest row_team_request(const std::string &arch) {
  rt::CompileRequest req;
  req.source = "constexpr int kWarps = " + std::to_string(kRowTeamWarps) +
               ", kStage = " + std::to_string(kRowTeamStage) + ";\n" + kSource;
  req.file_name = "row_teams.cu";
  req.arch = arch;
  for (const auto &[name, text] : codegen::embedded_templates())
    req.headers[name] = text;
  return req;
}

} // namespace kfuse::testing
