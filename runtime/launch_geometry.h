// A kernel's launch description (codegen::LaunchGeometry) evaluated for bound dims and a device:
// the grid, block and dynamic shared memory to launch with. The formulas are the ones
// compiler/codegen/program.h documents; nothing here knows a template.
#pragma once

#include "compiler/codegen/program.h"
#include "runtime/module.h"

#include <cstdint>
#include <map>
#include <string>

namespace kfuse::rt {

struct LaunchShape {
  Dim3 grid, block;
  unsigned shared_bytes = 0;
  int row_floats = 0; // the value of SmemFloats parameters
  unsigned cluster = 1;
};

LaunchShape resolve(const codegen::LaunchGeometry &g, const std::map<std::string, int64_t> &dims,
                    int multiprocessors);

} // namespace kfuse::rt
