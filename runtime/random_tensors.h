// Device tensors for running a pipeline on made-up data (`kfuse bench`, tuning): every declared
// tensor filled with deterministic values shaped like a trained layer's.
#pragma once

#include "compiler/executable.h"
#include "kfuse/kfuse.h"
#include "runtime/device_buffer.h"
#include "runtime/tensor_checks.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kfuse::rt {

struct DeviceTensor {
  std::vector<int64_t> shape;
  DeviceBuffer buffer;
  DType dtype = DType::F32;

  size_t numel() const {
    size_t n = 1;
    for (int64_t e : shape)
      n *= static_cast<size_t>(e);
    return n;
  }
  Tensor tensor() const { return Tensor{reinterpret_cast<void *>(buffer.ptr()), shape, dtype}; }
  void *data() const { return reinterpret_cast<void *>(buffer.ptr()); }
};

DeviceTensor make_tensor(std::vector<int64_t> shape, DType dtype = DType::F32);

// Values shaped like a trained layer's, so no contender sees zeros or overflow: weights
// scaled by 1/sqrt(fan_in) as PyTorch's Linear init, states (running variances among them)
// positive. The timing of fp32/tf32 arithmetic does not depend on the values.
DeviceTensor random_tensor(const exec::DeclaredTensor &t, const exec::Dims &dims, uint64_t seed);

std::vector<double> download(const DeviceTensor &t);

std::vector<Tensor> tensors_of(const std::vector<DeviceTensor> &ts);

// Every declared tensor of a pipeline (inputs, params, state) at `dims`, random from `seed`.
struct PipelineData {
  PipelineData(const exec::Interface &interface, const exec::Dims &dims, uint64_t seed);
  // Fresh outputs of the declared shapes and types.
  std::vector<DeviceTensor> make_outputs() const;
  // Binds every param and state of `p` to its tensor here.
  void bind_all(Pipeline &p) const;

  const exec::Interface &interface;
  const exec::Dims dims;
  std::map<std::string, DeviceTensor> declared;
  std::map<std::string, Tensor> inputs;
};

} // namespace kfuse::rt
