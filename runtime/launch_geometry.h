// A kernel's launch description (exec::Geometry, from codegen::LaunchGeometry) evaluated for bound
// dims and a device: the grid, block and dynamic shared memory to launch with. The formulas are the
// ones compiler/codegen/program.h documents; nothing here knows a template.
#pragma once

#include "compiler/executable.h"
#include "runtime/module.h"

#include <cstdint>
#include <map>
#include <string>

namespace kfuse::rt {

struct LaunchShape {
  Dim3 grid, block;
  unsigned shared_bytes = 0;
  int row_floats = 0; // the value of SmemFloats parameters
  unsigned cluster = 1;
  bool programmatic = false; // launched while the grid before it finishes (waits_prior_grid)
  int splits = 1;            // GEMMs: K split this many ways
  // GEMMs: the work units (tiles x splits) take more than one wave of block slots, so they are
  // numbered split-major (templates/tile_scheduler.cuh)
  bool split_major = false;
  // The value of Splits parameters: S, or -S for split-major order.
  int split_param() const { return split_major ? -splits : splits; }
};

// `max_splits` caps split-K's count (Options::max_split_k; 0: no cap but the rule's own).
LaunchShape resolve(const exec::Geometry &g, const std::map<std::string, int64_t> &dims,
                    int multiprocessors, int max_splits);

// The K split count S a GEMM launch resolves to (1 for other kernels), by the rule in
// launch_geometry.cpp.
int split_count(const exec::Geometry &g, const std::map<std::string, int64_t> &dims,
                int multiprocessors, int max_splits);

// Which of a launch's compiled variants runs at `dims` on a device of `multiprocessors` SMs
// with split-K capped at `max_splits` (as split_count): 0 the launch itself, i > 0 its
// variants[i - 1]. Where every one knows its kblock_time, the one of lowest estimated time
// (waves of work units x (k-blocks per split + the partial tile's cost) x kblock_time);
// otherwise, in variants order, each variant replaces the one taken so far where its tiles at
// `dims` fill its min_waves full waves (blocks_per_sm x multiprocessors tiles each: the wider
// tile then needs no split of K), or, where both know their kblock_time and a variant was
// taken, where its estimated time is the lower.
// variant() is the launch of that index.
size_t variant_of(const exec::Kernel &l, const std::map<std::string, int64_t> &dims,
                  int multiprocessors, int max_splits);
const exec::Kernel &variant(const exec::Kernel &l, size_t index);

// Whether some device could split this launch's K at `dims` (K is deep enough): where not,
// split_count is 1 whatever the SM count.
bool may_split(const exec::Geometry &g, const std::map<std::string, int64_t> &dims, int max_splits);

} // namespace kfuse::rt
