// The Executable (compiler/executable.h) of a lowered pipeline: its plan and generated program
// turned into data the runtime runs without the IR.
#pragma once

#include "compiler/executable.h"
#include "compiler/lower.h"

namespace kfuse {

// Reverse mode (compiler/ir/grad.h) as two .kf texts that lower() takes as any other: the
// forward of `src` that also returns what the backward reads (its further outputs, `saved` in
// order), and the backward (inputs: `grad_inputs`, one per forward output, `saved`, and the
// forward's declarations it reads; outputs: the gradients of `gradients`, in order), none for
// the inputs and params named in `frozen` (ir::grad). Throws
// dsl::DiagnosticError for a .kf error, ir::GradError for an op without a gradient rule.
struct TrainingSources {
  dsl::SourceFile forward, backward;
  size_t outputs = 0; // the forward's own
  std::vector<std::string> grad_inputs, saved, gradients;
};
TrainingSources training_sources(const dsl::SourceFile &src, ir::Mode mode,
                                 const std::set<std::string> &frozen);

// Both lowered with `options` (in its mode), and their executables (lowered to CUDA).
struct LoweredTraining {
  TrainingSources sources;
  Lowered forward, backward;
};
LoweredTraining lower_training(const dsl::SourceFile &src, const LowerOptions &options);
exec::Training build_training(const LoweredTraining &training);
exec::Training build_training(const TrainingSources &sources, const Lowered &forward,
                              const Lowered &backward);

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
