// The emitters: one per kernel kind, each rendering a kernel's spec (compiler/select) as CUDA
// text and filling its launch description. They choose nothing: every tile, variant, thread
// count and vector width is the spec's, and geometry comes from compiler/select/geometry.h.
#pragma once

#include "compiler/codegen/kernel_writer.h"
#include "compiler/codegen/program.h"
#include "compiler/select/spec.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace kfuse::codegen {

// What every emitter of one translation unit shares.
struct EmitContext {
  const plan::Plan &plan; // every tensor seen as [rows, F]
  const ir::Graph &graph;
  std::vector<std::string> names;           // printed names of graph's values
  std::map<ir::ValueId, int> partial_rows;  // select::Selection::partial_rows
  std::map<ir::ValueId, int> row_multiples; // select::Selection::row_multiples
  std::set<std::string> includes;           // template headers the source needs
  const char *indent = "    ";              // of statements inside a functor's member

  const std::string &name(ir::ValueId v) const { return names.at(static_cast<size_t>(v)); }
  // The elements v's rows are padded to a multiple of (1: not padded).
  int row_multiple(ir::ValueId v) const;
  // The leading dimension of stored matrix v of `cols` columns as a C++ expression (a constant,
  // or a long long one where `cols` is symbolic): `cols`, rounded up to v's row multiple where
  // its rows are padded.
  std::string leading_dim(ir::ValueId v, const ir::Dim &cols) const;
  // `struct TYPE {` and the members that forward the kernel's parameters.
  std::string functor_head(const std::string &type, const KernelWriter &w) const;
  // Adds to `done` the inline values of kernel `k` that `root`'s tree computes (as
  // KernelWriter::tree_statements emits them), stopping at `given`.
  void collect_tree(const plan::Kernel &k, ir::ValueId root, const std::set<ir::ValueId> &given,
                    std::set<ir::ValueId> &done) const;
};

std::string emit_gemm(EmitContext &cx, const plan::Kernel &k, const KernelWriter &w,
                      const select::GemmSpec &spec, KernelLaunch &launch);
// A row kernel: a block per row of the stored matrix k.rows_of, its passes in order.
std::string emit_row(EmitContext &cx, const plan::Kernel &k, const KernelWriter &w,
                     const select::RowSpec &spec, KernelLaunch &launch);
// The row passes of a GEMM kernel's epilogue: the functor `type` the epilogue calls with a row
// of its staged tile and the lanes that run it (gemm_epilogue.cuh's Rows).
std::string emit_gemm_rows(EmitContext &cx, const plan::Kernel &k, const KernelWriter &w,
                           const select::RowSpec &spec, const std::string &type);
// Row partials (row_partials_epilogue): the offset of reduction `st` among the floats of one
// column slice's partials of kernel k's reductions, or with st = -1, how many floats those are.
int row_partial_floats(const ir::Graph &g, const plan::Kernel &k, ir::ValueId st);
std::string emit_elementwise(EmitContext &cx, const plan::Kernel &k, const KernelWriter &w,
                             const select::ElementwiseSpec &spec, KernelLaunch &launch);
std::string emit_col_partials(EmitContext &cx, const plan::Kernel &k, const KernelWriter &w,
                              KernelLaunch &launch);
std::string emit_column(EmitContext &cx, const plan::Kernel &k, const KernelWriter &w,
                        const select::ColumnSpec &spec, KernelLaunch &launch);
// A transpose kernel, its output's rows padded where Selection::row_multiples says, its
// elements rounded to tf32 where the spec says.
std::string emit_transpose(EmitContext &cx, const plan::Kernel &k, const KernelWriter &w,
                           const select::TransposeSpec &spec, KernelLaunch &launch);

} // namespace kfuse::codegen
