// Where a test binary finds its data and the kfuse tool, decided at run time, so that a test
// binary carried to another machine with its source tree (the build folder where it was, or
// anywhere with the variables below) runs there:
// - the source tree: $KFUSE_SOURCE_DIR where set, else the tree the binary was built from,
//   found from the binary's own folder (the build records the path from that folder to the
//   tree, never the tree's absolute path);
// - the kfuse tool: $KFUSE_TOOL where set, else the kfuse built beside the binary.
#pragma once

#include <string>

namespace kfuse::testing {

std::string source_dir();
// `relative` (a repository path such as "examples/gemm_scale_bn.kf") inside source_dir().
std::string source_path(const std::string &relative);
std::string tool_path();

} // namespace kfuse::testing
