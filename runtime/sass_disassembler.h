// SASS, the GPU's machine code, of a CUBIN (KFUSE_DUMP=sass), by the CUDA toolkit's own
// disassembler: nvdisasm, else `cuobjdump -sass`. kfuse does not link either; it runs them.
#pragma once

#include <string>
#include <vector>

namespace kfuse::rt {

// Where the disassemblers are looked for: every directory of PATH, then /usr/local/cuda/bin
// (each once).
std::vector<std::string> sass_tool_dirs();

// The SASS of `cubin`, from the first of nvdisasm or cuobjdump found in `dirs` (nvdisasm in any
// of them first). Throws kfuse::Error when neither is there (naming the directories searched)
// or when the tool fails (with its output).
std::string disassemble_sass(const std::string &cubin, const std::vector<std::string> &dirs);

} // namespace kfuse::rt
