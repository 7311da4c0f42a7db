// The op reference of docs/DSL.md, written from the op table: a test checks that DSL.md
// holds exactly this text, so the documentation cannot drift from the ops.
#pragma once

#include <string>

namespace kfuse::ir {

// The Markdown table of the user ops (`internal` false) or of the internal ops.
std::string op_reference_markdown(bool internal);

} // namespace kfuse::ir
