#include "compiler/dump.h"

#include "kfuse/error.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kfuse {

Dump::Dump(const std::string &pipeline, std::string_view mode)
    : prefix_(fmt::format("{}.{}", pipeline, mode)) {
  const char *env = std::getenv("KFUSE_DUMP");
  std::stringstream items(env ? env : "");
  for (std::string item; std::getline(items, item, ',');) {
    if (item != "ir" && item != "plan" && item != "cuda" && item != "launch" && item != "ptx" &&
        item != "sass")
      throw Error(
          fmt::format("KFUSE_DUMP: '{}' is not one of ir, plan, cuda, launch, ptx, sass", item));
    what_.insert(item);
  }
  const char *d = std::getenv("KFUSE_DUMP_DIR");
  dir_ = d ? d : "";
}

void Dump::emit(const std::string &step, const std::string &extension,
                const std::string &text) const {
  if (dir_.empty()) {
    std::fprintf(stderr, "// ---- KFUSE_DUMP %s.%s\n%s\n", prefix_.c_str(), step.c_str(),
                 text.c_str());
    return;
  }
  std::string path = fmt::format("{}/{}.{}{}", dir_, prefix_, step, extension);
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out)
    throw Error(fmt::format("KFUSE_DUMP_DIR: cannot write {}", path));
}

} // namespace kfuse
