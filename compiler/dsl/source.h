// A source buffer: the text of one .kf file and its name, with line lookup for diagnostics.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kfuse::dsl {

class SourceFile {
public:
  SourceFile(std::string name, std::string text);

  // Files larger than this are refused before they are read whole (`kfuse check /dev/zero`):
  // a .kf file of 50,000 ops is under 1 MiB.
  static constexpr size_t kMaxSourceBytes = size_t{16} << 20;

  // Reads a file; throws DiagnosticError naming the path when it cannot be read or is larger
  // than kMaxSourceBytes.
  static SourceFile read(const std::string &path);

  const std::string &name() const { return name_; }
  const std::string &text() const { return text_; }
  uint32_t line_count() const { return static_cast<uint32_t>(line_starts_.size()); }
  // Line `line` (1-based) without its line terminator ("\n" or "\r\n"); empty when out of range.
  std::string_view line(uint32_t line) const;

private:
  std::string name_;
  std::string text_;
  std::vector<size_t> line_starts_; // byte offset of each line's first character
};

} // namespace kfuse::dsl
