#include "compiler/dsl/diagnostics.h"

#include <fmt/format.h>

namespace kfuse::dsl {
namespace {

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

// The source line as shown, and the caret line under it. Control characters are shown as
// <U+XXXX> (so a stray byte is visible), tabs are kept in both lines (so the caret lines up
// whatever the terminal's tab width), and UTF-8 continuation bytes take no column.
std::string render(std::string_view line, size_t start, size_t length) {
  std::string shown, marks;
  size_t end = start + std::max<size_t>(length, 1);
  for (size_t i = 0; i < line.size(); ++i) {
    auto c = static_cast<unsigned char>(line[i]);
    std::string glyph = is_control(c) && c != '\t' ? fmt::format("<U+{:04X}>", c)
                                                   : std::string(1, static_cast<char>(c));
    size_t width = (c & 0xC0) == 0x80 ? 0 : glyph.size();
    shown += glyph;
    if (i < start)
      marks += c == '\t' ? std::string("\t") : std::string(width, ' ');
    else if (i < end && width > 0)
      marks += (i == start ? "^" : "~") + std::string(width - 1, '~');
  }
  if (start >= line.size()) // just past the end of the line: end of file, a missing token
    marks += '^';
  return shown + "\n" + marks + "\n";
}

} // namespace

std::string Diagnostics::format(Severity severity, SourceRange at,
                                const std::string &message) const {
  std::string_view label = severity == Severity::Error ? "error" : "note";
  if (!source_)
    return fmt::format("{}: {}\n", label, message);
  if (!at.loc.known())
    return fmt::format("{}: {}: {}\n", source_->name(), label, message);
  std::string text =
      fmt::format("{}:{}:{}: {}: {}\n", source_->name(), at.loc.line, at.loc.col, label, message);
  if (at.loc.line > source_->line_count())
    return text;
  std::string_view line = source_->line(at.loc.line);
  size_t start = std::min<size_t>(at.loc.col == 0 ? 0 : at.loc.col - 1, line.size());
  size_t length = at.length;
  if (length == 0)
    while (start + length < line.size() && is_word_char(line[start + length]))
      ++length;
  return text + render(line, start, length);
}

void Diagnostics::error(SourceRange at, const std::string &message,
                        const std::vector<Note> &notes) const {
  std::string text = format(Severity::Error, at, message);
  for (const Note &n : notes)
    text += format(Severity::Note, n.range, n.message);
  throw DiagnosticError(text, at.loc, message);
}

} // namespace kfuse::dsl
