// Writes the CUDA of one planned kernel: its parameter list, the C++ statements of the
// values it computes, and the loads of the values it reads.
#pragma once

#include "compiler/codegen/program.h"

#include <set>
#include <string>
#include <vector>

namespace kfuse::codegen {

class KernelWriter {
public:
  KernelWriter(const plan::Plan &p, const plan::Kernel &k, const std::vector<std::string> &names);

  // Identifiers: the register value of v, the buffer of v, a dim.
  std::string var(ir::ValueId v) const;
  std::string ptr(ir::ValueId v) const;
  // The element type of v's buffer in CUDA (dtype.cuh): float, kf::bf16 or kf::f16.
  std::string element_type(ir::ValueId v) const;
  // v's element `index` (a C++ expression) loaded as float, or `value` stored into it.
  std::string load(ir::ValueId v, const std::string &index) const;
  std::string store(ir::ValueId v, const std::string &index, const std::string &value) const;
  static std::string dim_var(const std::string &dim) { return "d_" + dim; }
  // A dim as a C++ expression (its parameter, or the constant).
  static std::string extent(const ir::Dim &d);

  // Statements computing the kernel's column values (plan::is_column_value) for feature `col`
  // (C++ int), or only those in `only`, reading `given` values from registers. Column
  // statistics must already be in their registers.
  std::string column_statements(const std::string &indent,
                                const std::set<ir::ValueId> *only = nullptr,
                                const std::set<ir::ValueId> &given = {}) const;
  // Statements computing the kernel's matrix values at (row, col), skipping `given`
  // (values already in registers: the GEMM accumulator, the row kernel's loaded value).
  std::string element_statements(const std::string &indent,
                                 const std::set<ir::ValueId> &given) const;
  // Statements computing `root` and the inline values of this kernel it reads (any rank, in
  // graph order), stopping at `given` values (in registers already).
  std::string tree_statements(const std::string &indent, ir::ValueId root,
                              const std::set<ir::ValueId> &given) const;
  // Column values a functor carries as members (used by matrix values).
  std::vector<ir::ValueId> column_values() const;
  // Buffers, partials and dims in entry-point order, and the C++ parameter list for them.
  const std::vector<LaunchParam> &params() const { return params_; }
  std::string param_list() const;
  // The functor members forwarding the parameters (`float *p_x;` lines) and the braced
  // initializer that fills them from the entry point's parameters.
  std::string member_declarations(const std::string &indent) const;
  // `extra` initializes members declared after those (a row kernel's row and per-row results).
  std::string member_initializer(const std::vector<std::string> &extra = {}) const;

  // A register or a load (a per-feature vector at `col`, a matrix element at (row, col) where
  // `element`); `given` values are in registers although not computed here.
  std::string operand(ir::ValueId v, bool element, const std::set<ir::ValueId> &given) const;

private:
  std::string statement(ir::ValueId v, bool element, const std::set<ir::ValueId> &given) const;
  bool computed_here(ir::ValueId v) const;
  bool writes(ir::ValueId v) const;

  const plan::Plan &p_;
  const plan::Kernel &k_;
  const ir::Graph &g_;
  const std::vector<std::string> &names_;
  std::set<ir::ValueId> written_; // plan::written: what it writes, looked up per parameter
  std::vector<LaunchParam> params_;
};

// Whether a row pass of `op` keeps its row resident in shared memory (softmax and the
// normalizations); reductions, pools and elementwise passes read each element where they use
// it and keep none.
bool keeps_resident_row(ir::OpKind op);

// A double as a C++ float expression.
std::string float_literal(double v);
// The CUDA type of an element type (dtype.cuh).
std::string cuda_type(ir::DType t);

} // namespace kfuse::codegen
