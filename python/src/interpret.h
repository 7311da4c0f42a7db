// kfuse's fp64 reference interpreter (compiler/ir/interpreter.h) for Python: what a .kf
// computes, on the CPU, without a GPU; tests check PyTorch translations of a .kf against it.
#pragma once

#include "compiler/ir/graph.h"

#include <nanobind/nanobind.h>

#include <cstdint>
#include <map>
#include <string>

namespace kfuse::python {

// Runs `g` once in `mode` ("train" | "eval") on `tensors`: every input, param and state by
// name as (shape, bytes of little-endian float64, row-major). Returns {"outputs": [(shape,
// bytes)], "state": {name: (shape, bytes)}}: the outputs and the updated state, rounded to
// their declared types as a kernel stores them (the values stay float64).
nanobind::dict interpret(const ir::Graph &g, const std::string &mode,
                         const std::map<std::string, int64_t> &dims, nanobind::dict tensors,
                         uint64_t seed, uint64_t offset);

} // namespace kfuse::python
