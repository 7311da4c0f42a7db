// The CUDA template headers of templates/, embedded into the library at build time.
#pragma once

#include <map>
#include <string>

namespace kfuse::codegen {
// File name (e.g. "gemm_simt.cuh") -> contents.
const std::map<std::string, std::string> &embedded_templates();
} // namespace kfuse::codegen
