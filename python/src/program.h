// A .kf program as Python sees it: the user's pipeline as parsed and verified, before any of
// kfuse's passes, so that a front end (kfuse.torch.Program, the PyTorch reference of a .kf)
// can build the same computation from the compiler's own graph instead of parsing .kf again.
#pragma once

#include "compiler/ir/graph.h"

#include <nanobind/nanobind.h>

namespace kfuse::python {

// {"name", "dims", "values", "outputs"}: `values` in definition order (a topological order),
// each {"id", "name", "kind" ("input" | "param" | "state" | "op"), "dtype", "shape", "line"}
// and, for ops, {"op", "class", "args" (ids), "operands" (the operand name each arg binds),
// "attrs" (every attribute, defaults filled in), "torch" (the op's PyTorch spelling)};
// `outputs` the returned ids. Shapes hold dim names (str) and extents (int); attributes are
// float, int, bool, str (a choice, dtype or dim name) or None (an absent optional number).
nanobind::dict program_dict(const ir::Graph &g);

// The op table (compiler/ir/ops.h), one dict per op in table order: {"name", "class",
// "operands" (as documented, "weight?" where optional), "attrs" ([{"name", "kind"}] in
// canonical order), "internal", "torch" (PyTorch's spelling: a Python expression of the
// operands and attributes by name)}.
nanobind::list op_table();

} // namespace kfuse::python
