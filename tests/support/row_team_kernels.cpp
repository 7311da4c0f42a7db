#include "tests/support/row_team_kernels.h"

#include "compiler/codegen/embedded_templates.h"

#include <string>

namespace kfuse::testing {

namespace {

// Each team stages its row with plain loads into the block's tile (dynamic shared memory) of
// kStage floats per row, then runs the template on the staged copy.
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

// Team t of the block (lanes t * Lanes ..) stages row first + t with plain loads at
// tile + t * kStage, then runs body(t, staged rows of the block, first, team); a team past the
// last row returns as a whole while the others of its warp go on.
template <int Lanes, class Body>
__device__ void per_team(const float *x, int rows, int n, Body body) {
  extern __shared__ __align__(16) float tile[];
  const kf::LaneTeam<Lanes> team{static_cast<int>(threadIdx.x & 31)};
  const int t = threadIdx.x / Lanes, first = blockIdx.x * (blockDim.x / Lanes);
  if (first + t >= rows)
    return;
  for (int c = team.rank(); c < n; c += Lanes)
    tile[t * kStage + c] = x[static_cast<long long>(first + t) * n + c];
  team.sync();
  body(t, reinterpret_cast<const kf::Staged *>(tile), first, team);
}

// Runs op.run<Lanes>() with Lanes = lanes (1, 2, 8, else 32).
template <class Op> __device__ void with_lanes(int lanes, const Op &op) {
  switch (lanes) {
  case 1:
    return op.template run<1>();
  case 2:
    return op.template run<2>();
  case 8:
    return op.template run<8>();
  default:
    return op.template run<32>();
  }
}

struct Softmax {
  const float *x;
  float *y;
  int rows, n, log;
  template <int L> __device__ void run() const {
    per_team<L>(x, rows, n, [&](int t, const kf::Staged *s, int first, kf::LaneTeam<L> team) {
      float *out = y + static_cast<long long>(first) * n;
      if (log)
        kf::row_softmax<L, true>(t, n, s, kStage, out, n, Identity{}, Identity{}, nullptr, 0,
                                 team);
      else
        kf::row_softmax<L, false>(t, n, s, kStage, out, n, Identity{}, Identity{}, nullptr, 0,
                                  team);
    });
  }
};

struct Norm {
  const float *x;
  float *y;
  int rows, n;
  float eps;
  int rms;
  template <int L> __device__ void run() const {
    per_team<L>(x, rows, n, [&](int t, const kf::Staged *s, int first, kf::LaneTeam<L> team) {
      float *out = y + static_cast<long long>(first) * n;
      if (rms)
        kf::row_norm<L, true>(t, n, s, kStage, out, n, eps, Identity{}, Identity{}, nullptr, 0,
                              team);
      else
        kf::row_norm<L, false>(t, n, s, kStage, out, n, eps, Identity{}, Identity{}, nullptr, 0,
                               team);
    });
  }
};

struct GroupNorm {
  const float *x;
  float *y;
  int rows, n, groups;
  float eps;
  template <int L> __device__ void run() const {
    per_team<L>(x, rows, n, [&](int t, const kf::Staged *s, int first, kf::LaneTeam<L> team) {
      kf::row_group_norm<L>(t, n, groups, s, kStage, y + static_cast<long long>(first) * n, n,
                            eps, Identity{}, Identity{}, nullptr, 0, team);
    });
  }
};

struct Map {
  const float *x;
  float *y;
  int rows, n;
  template <int L> __device__ void run() const {
    per_team<L>(x, rows, n, [&](int t, const kf::Staged *s, int first, kf::LaneTeam<L> team) {
      kf::row_map<L>(t, n, s, kStage, y + static_cast<long long>(first) * n, n, TwiceAddOne{},
                     team);
    });
  }
};

template <kf::Reduce R> struct Reduction {
  const float *x;
  float *y;
  int rows, n;
  float correction;
  template <int L> __device__ void run() const {
    per_team<L>(x, rows, n, [&](int t, const kf::Staged *s, int first, kf::LaneTeam<L> team) {
      y[static_cast<long long>(first + t) * 32 + team.rank()] =
          kf::row_reduce<L, R>(t, n, s, kStage, correction, Identity{}, team);
    });
  }
};

template <kf::Reduce R> struct Pool {
  const float *x;
  float *y;
  int rows, n, width, kernel, stride;
  template <int L> __device__ void run() const {
    per_team<L>(x, rows, n, [&](int t, const kf::Staged *s, int first, kf::LaneTeam<L> team) {
      kf::row_pool<L, R>(t, s, kStage, y + static_cast<long long>(first) * width, width, kernel,
                         stride, Identity{}, team);
    });
  }
};

template <kf::Reduce R>
__device__ void reduce(const float *x, float *y, int rows, int n, int lanes, float correction) {
  with_lanes(lanes, Reduction<R>{x, y, rows, n, correction});
}

} // namespace

extern "C" __global__ void team_softmax(const float *x, float *y, int rows, int n, int lanes,
                                        int log) {
  with_lanes(lanes, Softmax{x, y, rows, n, log});
}
extern "C" __global__ void team_norm(const float *x, float *y, int rows, int n, int lanes,
                                     float eps, int rms) {
  with_lanes(lanes, Norm{x, y, rows, n, eps, rms});
}
extern "C" __global__ void team_group_norm(const float *x, float *y, int rows, int n, int lanes,
                                           int groups, float eps) {
  with_lanes(lanes, GroupNorm{x, y, rows, n, groups, eps});
}
extern "C" __global__ void team_map(const float *x, float *y, int rows, int n, int lanes) {
  with_lanes(lanes, Map{x, y, rows, n});
}
extern "C" __global__ void team_reduce(const float *x, float *y, int rows, int n, int lanes,
                                       float correction, int kind) {
  switch (static_cast<kf::Reduce>(kind)) {
  case kf::Reduce::Sum:
    return reduce<kf::Reduce::Sum>(x, y, rows, n, lanes, correction);
  case kf::Reduce::Mean:
    return reduce<kf::Reduce::Mean>(x, y, rows, n, lanes, correction);
  case kf::Reduce::Max:
    return reduce<kf::Reduce::Max>(x, y, rows, n, lanes, correction);
  case kf::Reduce::Min:
    return reduce<kf::Reduce::Min>(x, y, rows, n, lanes, correction);
  case kf::Reduce::LogSumExp:
    return reduce<kf::Reduce::LogSumExp>(x, y, rows, n, lanes, correction);
  case kf::Reduce::Var:
    return reduce<kf::Reduce::Var>(x, y, rows, n, lanes, correction);
  case kf::Reduce::Std:
    return reduce<kf::Reduce::Std>(x, y, rows, n, lanes, correction);
  }
}
extern "C" __global__ void team_pool(const float *x, float *y, int rows, int n, int lanes,
                                     int width, int kernel, int stride, int max) {
  if (max)
    with_lanes(lanes, Pool<kf::Reduce::Max>{x, y, rows, n, width, kernel, stride});
  else
    with_lanes(lanes, Pool<kf::Reduce::Mean>{x, y, rows, n, width, kernel, stride});
}
)";

} // namespace

std::vector<std::string> row_team_kernel_names() {
  return {"team_softmax", "team_norm", "team_group_norm", "team_map", "team_reduce", "team_pool"};
}

rt::CompileRequest row_team_request(const std::string &arch) {
  rt::CompileRequest req;
  req.source = "constexpr int kStage = " + std::to_string(kRowTeamStage) + ";\n" + kSource;
  req.file_name = "row_teams.cu";
  req.arch = arch;
  for (const auto &[name, text] : codegen::embedded_templates())
    req.headers[name] = text;
  return req;
}

} // namespace kfuse::testing
