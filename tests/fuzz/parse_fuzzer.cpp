// libFuzzer target: the .kf front end on arbitrary bytes. A DiagnosticError is the
// expected outcome for malformed input; a crash, a sanitizer report, any other exception
// (which escapes and aborts) or a hang is a bug. A graph that parses must also print and
// parse back to the same text, so the round trip is fuzzed along with the parser.
#include "compiler/dsl/parser.h"
#include "compiler/ir/printer.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kfuse::dsl::SourceFile source("fuzz.kf", std::string(reinterpret_cast<const char *>(data), size));
  kfuse::dsl::Diagnostics diags(source);
  kfuse::ir::Graph g;
  try {
    g = kfuse::dsl::parse_kf(source, diags);
  } catch (const kfuse::dsl::DiagnosticError &) {
    return 0;
  }
  std::string text = kfuse::ir::print_kf(g);
  kfuse::dsl::SourceFile printed("printed.kf", text);
  kfuse::dsl::Diagnostics printed_diags(printed);
  if (kfuse::ir::print_kf(kfuse::dsl::parse_kf(printed, printed_diags)) != text)
    std::abort();
  return 0;
}
