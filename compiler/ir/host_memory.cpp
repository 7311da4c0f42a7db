#include "compiler/ir/host_memory.h"

#include "kfuse/error.h"

#include <fmt/format.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <limits>
#include <optional>

namespace kfuse::ir {
namespace {

constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();

int64_t saturating_add(int64_t a, int64_t b) { return checked_add(a, b).value_or(kSaturated); }

int64_t saturating_mul(int64_t a, int64_t b) { return checked_mul(a, b).value_or(kSaturated); }

struct Limit {
  int64_t bytes;
  std::string source;
};

// The smaller of physical memory and the soft rlimits that cap what malloc can get.
Limit machine_limit() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  Limit limit{pages > 0 && page > 0 ? saturating_mul(pages, page) : kSaturated,
              "the machine's physical memory"};
  for (auto [resource, name] : {std::pair{RLIMIT_AS, "the address-space limit (ulimit -v)"},
                                std::pair{RLIMIT_DATA, "the data limit (ulimit -d)"}}) {
    rlimit r{};
    if (getrlimit(resource, &r) == 0 && r.rlim_cur != RLIM_INFINITY &&
        r.rlim_cur < static_cast<rlim_t>(limit.bytes))
      limit = {static_cast<int64_t>(r.rlim_cur), name};
  }
  return limit;
}

Limit host_memory_limit() {
  const char *set = std::getenv(kHostMemoryVariable);
  if (!set)
    return machine_limit();
  char *end = nullptr;
  double gb = std::strtod(set, &end);
  // At most 2^63 bytes: a larger limit is no limit an int64 byte count can exceed.
  if (end == set || *end != '\0' || !(gb > 0) || gb > 9.2e9)
    throw Error(fmt::format("{} must be a positive number of GB (1e9 bytes), got '{}'",
                            kHostMemoryVariable, set));
  return {static_cast<int64_t>(gb * 1e9), kHostMemoryVariable};
}

} // namespace

int64_t fp64_host_bytes(const Graph &g, const std::map<std::string, int64_t> &dims, int copies,
                        bool values) {
  int64_t elements = 0;
  for (const Value &v : g.values) {
    if (v.is_effect() || (v.is_op() && !values))
      continue;
    std::optional<int64_t> n = element_count(v.type, dims);
    elements =
        saturating_add(elements, saturating_mul(n.value_or(kSaturated), v.is_op() ? 1 : copies));
  }
  return saturating_mul(elements, static_cast<int64_t>(sizeof(double)));
}

void check_host_memory(std::string_view command, const std::map<std::string, int64_t> &dims,
                       int64_t bytes) {
  const Limit limit = host_memory_limit();
  if (bytes <= limit.bytes)
    return;
  std::string at;
  for (const auto &[name, value] : dims)
    at += fmt::format("{}{}={}", at.empty() ? " at " : " ", name, value);
  throw Error(fmt::format("{}{} needs {:.1f} GB of host memory, more than the limit of {:.1f} GB "
                          "({}); set {}=<GB> to raise it",
                          command, at, static_cast<double>(bytes) / 1e9,
                          static_cast<double>(limit.bytes) / 1e9, limit.source,
                          kHostMemoryVariable));
}

} // namespace kfuse::ir
