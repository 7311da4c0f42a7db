// DLPack capsules (what `__dlpack__()` returns, https://dmlc.github.io/dlpack) as kfuse tensors.
#pragma once

#include "kfuse/kfuse.h"

#include <Python.h>

#include <string>

namespace kfuse::python {

// A DLPack "dltensor" capsule's tensor, read into `t` (whose shape keeps its capacity, so a
// run that reuses its Tensors allocates nothing). The memory is used in place (the capsule keeps
// owning it: its destructor calls the producer's deleter, so the caller keeps the capsule alive
// while kfuse uses the memory). `device` receives the CUDA device ordinal. Throws kfuse::Error
// naming `where` (the pipeline), `name`, the tensor's dtype and shape: for a capsule that is not an
// unused "dltensor", a dtype kfuse has no name for (f32, f16 and bf16 reach the pipeline, which
// checks them against the declaration), elements of a row that are not contiguous, and memory not
// on a CUDA device.
void read_dlpack(PyObject *capsule, const std::string &where, const std::string &name, int *device,
                 Tensor &t);

} // namespace kfuse::python
