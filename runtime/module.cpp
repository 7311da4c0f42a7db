#include "runtime/module.h"

#include "runtime/driver.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <atomic>
#include <mutex>

namespace kfuse::rt {

struct Module::Loaded {
  CUmodule module = nullptr;
  ~Loaded() {
    if (module == nullptr)
      return;
    // Errors are ignored: at process exit the context may already be gone.
    Driver &driver = Driver::get();
    try {
      driver.make_current();
    } catch (const Error &) {
      return;
    }
    driver.cuModuleUnload(module);
  }
};

struct Function::State {
  std::shared_ptr<Module::Loaded> module;
  std::mutex mutex;
  // The kernel's current CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES; only ever raised.
  std::atomic<int> dynamic_shared_limit{0};
};

Module::Module(const std::string &cubin) {
  Driver &driver = Driver::get();
  driver.make_current();
  auto loaded = std::make_shared<Loaded>();
  CUresult r = driver.cuModuleLoadData(&loaded->module, cubin.data());
  if (r != CUDA_SUCCESS) {
    loaded->module = nullptr; // nothing to unload
    driver.check(
        r, fmt::format("cuModuleLoadData (a {}-byte CUBIN; built for the current device's arch, "
                       "{}?)",
                       cubin.size(), driver.arch()));
  }
  loaded_ = std::move(loaded);
}

CUmodule Module::handle() const { return loaded_ ? loaded_->module : nullptr; }

Function Module::function(const std::string &name) const {
  if (!loaded_)
    throw Error(fmt::format("kernel '{}' requested from a moved-from module", name));
  Driver &driver = Driver::get();
  driver.make_current();
  Function fn;
  fn.name = name;
  CUresult r = driver.cuModuleGetFunction(&fn.f, loaded_->module, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND)
    throw Error(fmt::format("the module has no kernel named '{}' (C++ kernels have mangled "
                            "names; generated entry points are extern \"C\")",
                            name));
  driver.check(r, fmt::format("cuModuleGetFunction('{}')", name));
  fn.state = std::make_shared<Function::State>();
  fn.state->module = loaded_;
  fn.state->dynamic_shared_limit = fn.attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  return fn;
}

int Function::attribute(CUfunction_attribute attribute) const {
  Driver &driver = Driver::get();
  driver.make_current();
  int value = 0;
  driver.check(driver.cuFuncGetAttribute(&value, attribute, f),
               fmt::format("cuFuncGetAttribute({}, '{}')", static_cast<int>(attribute), name));
  return value;
}

int Function::registers() const { return attribute(CU_FUNC_ATTRIBUTE_NUM_REGS); }
int Function::static_shared_bytes() const { return attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES); }
int Function::local_bytes() const { return attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES); }
int Function::max_threads_per_block() const {
  return attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
}

void launch(const Function &fn, Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream stream,
            void **args, unsigned cluster, bool programmatic) {
  if (fn.f == nullptr || !fn.state)
    throw Error("launch of an empty Function (take it from Module::function)");
  Driver &driver = Driver::get();
  driver.make_current();
  Function::State &state = *fn.state;
  if (static_cast<long long>(shared_bytes) > state.dynamic_shared_limit.load()) {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (static_cast<long long>(shared_bytes) > state.dynamic_shared_limit.load()) {
      driver.check(driver.cuFuncSetAttribute(fn.f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                             static_cast<int>(shared_bytes)),
                   fmt::format("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES = {}) for '{}'",
                               shared_bytes, fn.name));
      state.dynamic_shared_limit.store(static_cast<int>(shared_bytes));
    }
  }
  CUlaunchConfig config{};
  config.gridDimX = grid.x;
  config.gridDimY = grid.y;
  config.gridDimZ = grid.z;
  config.blockDimX = block.x;
  config.blockDimY = block.y;
  config.blockDimZ = block.z;
  config.sharedMemBytes = shared_bytes;
  config.hStream = stream;
  CUlaunchAttribute attributes[2] = {};
  config.attrs = attributes;
  if (cluster > 1) {
    CUlaunchAttribute &a = attributes[config.numAttrs++];
    a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a.value.clusterDim.x = cluster;
    a.value.clusterDim.y = 1;
    a.value.clusterDim.z = 1;
  }
  if (programmatic) {
    CUlaunchAttribute &a = attributes[config.numAttrs++];
    a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    a.value.programmaticStreamSerializationAllowed = 1;
  }
  CUresult r = driver.cuLaunchKernelEx(&config, fn.f, args, nullptr);
  if (r != CUDA_SUCCESS)
    driver.check(r, fmt::format("cuLaunchKernelEx('{}', grid {}x{}x{}, block {}x{}x{}, cluster {}, "
                                "{} bytes of dynamic shared memory)",
                                fn.name, grid.x, grid.y, grid.z, block.x, block.y, block.z, cluster,
                                shared_bytes));
}

} // namespace kfuse::rt
