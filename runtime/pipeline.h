// Internals of kfuse::Pipeline (include/kfuse/kfuse.h) that tools share.
#pragma once

#include "compiler/codegen/program.h"
#include "kfuse/kfuse.h"

namespace kfuse::rt {

// Throws kfuse::Error for a precision the GEMM templates do not implement (bf16).
void require_supported(Precision p);
// The GEMM template a precision runs on (after require_supported).
codegen::GemmMath gemm_math(Precision p);

// The NVRTC target: `requested`, else the GPU's, else sm_90a (compiling needs no GPU).
std::string target_arch(const std::string &requested);

} // namespace kfuse::rt
