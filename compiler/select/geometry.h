// Launch geometry from a kernel spec's traits, in one place: each kernel kind's block, grid
// rule, tile and shared memory come from the template constants of the spec's configuration
// (CUTLASS 3's kernel-owns-geometry), never re-derived by whoever launches it.
#pragma once

#include "compiler/codegen/program.h"
#include "compiler/select/spec.h"

#include <string>

namespace kfuse::select {

// The constants of a GEMM tile's template instantiation.
struct GemmTraits {
  int bm = 0, bn = 0, bk = 0, group_m = 0;
  int threads = 0, min_blocks = 1;
  int split_cost_kblocks = 0, kblock_time = 0;
  int smem_bytes = 0; // for the epilogue's column_floats
};

// `column_floats`: the floats of the epilogue's per-column cache (Sm90 shared memory).
GemmTraits gemm_traits(const GemmTile &t, int column_floats);

// The geometry of a GEMM kernel of tile `t` over a rows x cols product of depth `inner`.
codegen::LaunchGeometry gemm_geometry(const GemmTile &t, const GemmSpec &spec, int column_floats,
                                      const ir::Dim &rows, const ir::Dim &cols,
                                      const ir::Dim &inner);
// A row kernel: a block of spec.threads per row of a rows x cols matrix.
codegen::LaunchGeometry row_geometry(const RowSpec &spec, const ir::Dim &rows, const ir::Dim &cols);
codegen::LaunchGeometry elementwise_geometry(const ElementwiseSpec &spec, const ir::Dim &rows,
                                             const ir::Dim &cols);
codegen::LaunchGeometry col_partials_geometry(const ir::Dim &rows, const ir::Dim &cols);
codegen::LaunchGeometry column_geometry(const ColumnSpec &spec, const ir::Dim &features);
// A transpose kernel over a rows x cols matrix: a block per tile.
codegen::LaunchGeometry transpose_geometry(const ir::Dim &rows, const ir::Dim &cols);

// Whether `arch` runs kf::wait_prior_grid() (sm_90 and later: "sm_90a", "sm_100", ...): its
// kernels may then be launched while the grid before them finishes.
bool waits_prior_grid(const std::string &arch);

} // namespace kfuse::select
