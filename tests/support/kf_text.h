// .kf text in unit tests: the graph it parses to, or the diagnostic it is refused with.
#pragma once

#include "compiler/dsl/parser.h"

#include <doctest/doctest.h>

#include <string>

namespace kfuse::testing {

inline ir::Graph parse_kf_text(const std::string &text, const std::string &file) {
  dsl::SourceFile src(file, text);
  dsl::Diagnostics diags(src);
  return dsl::parse_kf(src, diags);
}

// The whole diagnostic parsing `text` throws: `file:line:col: error: ...`, the line, the caret.
inline std::string kf_error(const std::string &text, const std::string &file) {
  try {
    parse_kf_text(text, file);
  } catch (const dsl::DiagnosticError &e) {
    return e.what();
  }
  FAIL("parsed without an error: " << text);
  return {};
}

} // namespace kfuse::testing
