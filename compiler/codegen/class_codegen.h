// What each op class (ir::OpClass) means to the code generator, one entry per class: the
// emitter of its pass over a row, and what the GPU path runs of it. The class's meaning to the
// IR and the planner is its ir::ClassTraits (compiler/ir/op_class.h).
#pragma once

#include "compiler/ir/graph.h"

#include <string>

namespace kfuse::codegen {

class RowPasses;

// Emits the pass of row stage i (value st) over the row, with the pass's prologue functor `pre`.
using RowPass = void (RowPasses::*)(size_t i, ir::ValueId st, const std::string &pre,
                                    std::string &defs);

struct ClassCodegen {
  ir::OpClass cls;
  // The template call of a row pass over an op of the class; nullptr where the class is never
  // a row pass (views are read through; effects have no value).
  RowPass row_pass;
  // Its row template keeps the row resident in shared memory.
  bool keeps_resident_row;
  // Along `dim`, the GPU runs the last axis only (row kernels).
  bool last_axis_only;
  // An operand may be a view between a vector [F] and a matrix [1, F]: the kernels read either
  // as the same per-feature operand (pointwise ops), or read through it (views).
  bool reads_vector_views;
};

const ClassCodegen &class_codegen(ir::OpClass c);

} // namespace kfuse::codegen
