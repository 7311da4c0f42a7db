// The Executable (compiler/executable.h) of a lowered pipeline: its plan and generated program
// turned into data the runtime runs without the IR.
#pragma once

#include "compiler/executable.h"
#include "compiler/lower.h"

namespace kfuse {

// `lowered` must be lowered to CUDA (LowerOptions::Until::Cuda).
exec::Executable build_executable(const Lowered &lowered);
exec::Executable build_executable(const plan::Plan &plan, const codegen::Program &program,
                                  const Target &target = {});

// What lower() is asked for `request`. Throws kfuse::Error for a value that is no Mode or
// Precision.
LowerOptions lower_options(const exec::Request &request);

// A launch description in the Executable's terms (tests build geometries by hand).
exec::Geometry geometry_of(const codegen::LaunchGeometry &g);
exec::TensorType type_of(const ir::TensorType &t);
// The API's element types and the IR's, one to one (an invalid DType value throws).
DType api_dtype(ir::DType t);
ir::DType ir_dtype(DType t);

} // namespace kfuse
