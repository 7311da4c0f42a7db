#include "runtime/random_tensors.h"

#include "runtime/host_elements.h"

#include <cmath>

namespace kfuse::rt {

namespace {

// Deterministic uniform values in [lo, hi): splitmix64, one stream per tensor.
void fill_uniform(std::vector<float> &v, uint64_t seed, float lo, float hi) {
  uint64_t state = seed;
  for (float &x : v) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f); // 24 random bits
    x = lo + (hi - lo) * u;
  }
}

std::vector<int64_t> concrete_shape(const exec::TensorType &t, const exec::Dims &dims) {
  std::vector<int64_t> shape;
  for (const exec::Extent &e : t.shape)
    shape.push_back(e.evaluate(dims));
  return shape;
}

} // namespace

DeviceTensor make_tensor(std::vector<int64_t> shape, DType dtype) {
  DeviceTensor t;
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.buffer = DeviceBuffer(t.numel() * static_cast<size_t>(exec::dtype_bytes(dtype)));
  return t;
}

DeviceTensor random_tensor(const exec::DeclaredTensor &v, const exec::Dims &dims, uint64_t seed) {
  using Kind = exec::DeclaredTensor::Kind;
  DeviceTensor t = make_tensor(concrete_shape(v.type, dims), v.type.dtype);
  std::vector<float> host(t.numel());
  float lo = -1, hi = 1;
  if (v.kind == Kind::State) {
    lo = 0.5f;
    hi = 1.5f;
  } else if (v.kind == Kind::Param && t.shape.size() == 2) {
    hi = 1.0f / std::sqrt(static_cast<float>(t.shape[1]));
    lo = -hi;
  } else if (v.kind == Kind::Param) {
    lo = 0.5f;
    hi = 1.5f;
  }
  fill_uniform(host, seed, lo, hi);
  std::vector<uint8_t> bytes =
      encode_elements(std::vector<double>(host.begin(), host.end()), t.dtype);
  t.buffer.upload(bytes.data(), bytes.size());
  return t;
}

std::vector<double> download(const DeviceTensor &t) {
  std::vector<uint8_t> bytes(t.numel() * static_cast<size_t>(exec::dtype_bytes(t.dtype)));
  t.buffer.download(bytes.data(), bytes.size());
  return decode_elements(bytes.data(), t.numel(), t.dtype);
}

std::vector<Tensor> tensors_of(const std::vector<DeviceTensor> &ts) {
  std::vector<Tensor> out;
  for (const DeviceTensor &t : ts)
    out.push_back(t.tensor());
  return out;
}

PipelineData::PipelineData(const exec::Interface &interface_, const exec::Dims &dims_,
                           uint64_t seed)
    : interface(interface_), dims(dims_) {
  for (size_t i = 0; i < interface.declared.size(); ++i) {
    const exec::DeclaredTensor &d = interface.declared[i];
    DeviceTensor t = random_tensor(d, dims, seed * 1000003u + i);
    if (d.kind == exec::DeclaredTensor::Kind::Input)
      inputs[d.name] = t.tensor();
    declared.emplace(d.name, std::move(t));
  }
}

std::vector<DeviceTensor> PipelineData::make_outputs() const {
  std::vector<DeviceTensor> outs;
  for (const exec::TensorType &o : interface.outputs)
    outs.push_back(make_tensor(concrete_shape(o, dims), o.dtype));
  return outs;
}

void PipelineData::bind_all(Pipeline &p) const {
  for (const std::string &name : p.params())
    p.bind(name, declared.at(name).tensor());
}

} // namespace kfuse::rt
