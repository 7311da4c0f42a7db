#include "compiler/dsl/source.h"

#include "compiler/dsl/diagnostics.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace kfuse::dsl {

SourceFile::SourceFile(std::string name, std::string text)
    : name_(std::move(name)), text_(std::move(text)) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < text_.size(); ++i)
    if (text_[i] == '\n')
      line_starts_.push_back(i + 1);
}

std::string_view SourceFile::line(uint32_t line) const {
  if (line == 0 || line > line_starts_.size())
    return {};
  size_t begin = line_starts_[line - 1];
  size_t end = line < line_starts_.size() ? line_starts_[line] - 1 : text_.size();
  std::string_view s(text_.data() + begin, end - begin);
  if (!s.empty() && s.back() == '\r')
    s.remove_suffix(1);
  return s;
}

[[noreturn]] static void cannot_read(const std::string &path, int err) {
  Diagnostics().error({}, "cannot read '" + path + "': " + std::strerror(err));
}

SourceFile SourceFile::read(const std::string &path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f)
    cannot_read(path, errno);
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) {
    if (text.size() + n > kMaxSourceBytes)
      Diagnostics().error({}, "cannot read '" + path + "': larger than " +
                                  std::to_string(kMaxSourceBytes >> 20) +
                                  " MiB, the limit for a .kf file");
    text.append(buf, n);
  }
  // Reading a directory opens fine and fails here (EISDIR).
  if (std::ferror(f.get()))
    cannot_read(path, errno ? errno : EIO);
  return SourceFile(path, std::move(text));
}

} // namespace kfuse::dsl
