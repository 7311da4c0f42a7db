// Loaded CUBINs, their kernels, and kernel launches.
//
// A Function keeps its module loaded: the CUmodule is unloaded when the Module and every
// Function taken from it are gone, so a CUfunction handle is never left dangling.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>

namespace kfuse::rt {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct Function {
  CUfunction f = nullptr;
  std::string name;

  int attribute(CUfunction_attribute attribute) const; // cuFuncGetAttribute
  int registers() const;                               // per thread
  int static_shared_bytes() const;
  int local_bytes() const; // per thread (stack frame and spills)
  int max_threads_per_block() const;

  // Shared with every copy of this Function: the loaded module and the dynamic shared memory
  // limit launch() has raised the kernel to.
  struct State;
  std::shared_ptr<State> state;
};

class Module {
public:
  // Loads a CUBIN into the current context (rt::Driver::make_current). Throws kfuse::Error when the
  // driver is unavailable, CudaError when the driver rejects the image (e.g. built for another
  // arch).
  explicit Module(const std::string &cubin);
  Module(Module &&) noexcept = default;
  Module &operator=(Module &&) noexcept = default;
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;

  // Throws kfuse::Error naming the kernel when the module has none of that name.
  Function function(const std::string &name) const;
  CUmodule handle() const;

  struct Loaded;

private:
  std::shared_ptr<Loaded> loaded_;
};

// Launches `fn` with cuLaunchKernelEx and checks the launch (not the kernel's execution: that
// error surfaces at the next synchronising call). When `shared_bytes` of dynamic shared memory
// exceeds what the kernel is allowed by default (48 KiB minus its static shared memory), the
// kernel's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES is raised first, once per kernel and
// size. `cluster` > 1 launches clusters of that many blocks along x. `programmatic` lets the
// kernel start while the kernel before it on the stream finishes
// (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION): only for a kernel whose first
// statement waits for that grid (templates/grid_dependency.cuh). `args` points to one pointer per
// kernel parameter, as for cuLaunchKernel.
void launch(const Function &fn, Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream stream,
            void **args, unsigned cluster = 1, bool programmatic = false);

} // namespace kfuse::rt
