// Host memory of interpreting a graph in fp64 (`kfuse run`'s reference, `kfuse plan --prove`),
// estimated before anything is allocated: a size the host cannot hold is refused with what it
// needs, instead of ending in std::bad_alloc or in swapping after minutes of work.
#pragma once

#include "compiler/ir/graph.h"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace kfuse::ir {

// The environment variable that sets the limit, in GB (1e9 bytes): KFUSE_HOST_MEMORY_GB=64.
inline constexpr const char *kHostMemoryVariable = "KFUSE_HOST_MEMORY_GB";

// Bytes of fp64 host tensors for `copies` copies of every declared tensor of `g` at `dims` and,
// with `values`, one of every value an interpretation computes (what the interpreter holds at
// its end). Every dim of `g` must be bound; saturates at INT64_MAX.
int64_t fp64_host_bytes(const Graph &g, const std::map<std::string, int64_t> &dims, int copies,
                        bool values);

// Throws kfuse::Error where `bytes` exceeds the host memory limit: KFUSE_HOST_MEMORY_GB where
// set, else the smaller of the machine's physical memory and the process's address-space and
// data limits (ulimit -v, -d). The message says what needs how many GB, the limit, where it
// comes from, and how to raise it: "kfuse plan --prove at N=10000 needs 24.0 GB ...", from
// `command` and `dims`.
void check_host_memory(std::string_view command, const std::map<std::string, int64_t> &dims,
                       int64_t bytes);

} // namespace kfuse::ir
