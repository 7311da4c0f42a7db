// The diagnostics engine: the parser, the verifier's callers and the planner report
// through it, clang-style, and it throws on the first error:
//
//   pipe.kf:12:7: error: unknown op 'softmx'; did you mean 'softmax'?
//     h = softmx(h, dim=1)
//         ^~~~~~
//   pipe.kf:3:3: note: previous definition is here
//     ...
//
// Tests assert this exact text, so the format changes only with the golden files.
#pragma once

#include "kfuse/error.h"

#include "compiler/dsl/source.h"
#include "compiler/ir/types.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace kfuse::dsl {

enum class Severity : uint8_t { Error, Note };

// A span of source text on one line. Length 0 means "the token at loc" (the identifier
// starting there, else one character): what a caller holding only a Value's location,
// which is its op name, needs.
struct SourceRange {
  SourceRange() = default;
  SourceRange(ir::SourceLoc at, uint32_t len = 0) : loc(at), length(len) {} // NOLINT: implicit
  ir::SourceLoc loc;
  uint32_t length = 0;
};

struct Note {
  SourceRange range;
  std::string message;
};

// The first error: what() is the full formatted text (the error, then its notes).
class DiagnosticError : public kfuse::Error {
public:
  DiagnosticError(const std::string &text, ir::SourceLoc at, std::string bare_message)
      : kfuse::Error(text), loc(at), message(std::move(bare_message)) {}
  ir::SourceLoc loc;   // of the error itself, not of its notes
  std::string message; // without location, source line or notes
};

class Diagnostics {
public:
  // Without a source, diagnostics carry no location (a missing file, a graph built in code).
  Diagnostics() = default;
  // `source` must outlive the engine.
  explicit Diagnostics(const SourceFile &source) : source_(&source) {}

  // Reports an error followed by its notes: throws DiagnosticError.
  [[noreturn]] void error(SourceRange at, const std::string &message,
                          const std::vector<Note> &notes = {}) const;

  // One diagnostic: "file:line:col: error: message", the source line and a caret line, each
  // ending in a newline. An unknown location (line 0) gives "file: error: message".
  std::string format(Severity severity, SourceRange at, const std::string &message) const;

private:
  const SourceFile *source_ = nullptr;
};

} // namespace kfuse::dsl
