// KFUSE_DUMP / KFUSE_DUMP_DIR: what every pipeline a program compiles becomes, as text. lower()
// dumps ir, plan, cuda and launch; the runtime, after NVRTC, ptx and sass.
#pragma once

#include <set>
#include <string>
#include <string_view>

namespace kfuse {

// What KFUSE_DUMP asks for, and where it goes. Read at every construction: pipelines are
// compiled at program start, and tests set the variable around one compile.
class Dump {
public:
  // Throws kfuse::Error for an item KFUSE_DUMP names that is none of ir, plan, cuda, launch,
  // ptx, sass.
  Dump(const std::string &pipeline, std::string_view mode); // mode: "train" or "eval"

  bool wants(const char *item) const { return what_.count(item) != 0; }

  // `text` to stderr under a "// ---- KFUSE_DUMP <pipeline>.<mode>.<step>" line, or to
  // KFUSE_DUMP_DIR/<pipeline>.<mode>.<step><extension>. Throws kfuse::Error when the file
  // cannot be written.
  void emit(const std::string &step, const std::string &extension, const std::string &text) const;

private:
  std::set<std::string> what_;
  std::string dir_; // empty: stderr
  std::string prefix_;
};

} // namespace kfuse
