// Training with kfuse::Pipeline (Options::backward): the forward that saves what the backward
// reads, run as the pipeline's own run(), and the backward, a second compiled pipeline that
// backward() feeds with the last run's saved values, inputs, params and dropout stream.
#include "runtime/driver.h"
#include "runtime/pipeline_impl.h"

#include <fmt/format.h>

#include <algorithm>
#include <future>

namespace kfuse {

using exec::DeclaredTensor;

namespace {

// cuMemAlloc's alignment, which every saved value and snapshot keeps.
constexpr size_t kSavedAlignment = 256;

size_t aligned(size_t bytes) {
  return (bytes + kSavedAlignment - 1) / kSavedAlignment * kSavedAlignment;
}

std::vector<int64_t> shape_at(const exec::TensorType &t, const rt::Dims &dims) {
  std::vector<int64_t> shape;
  for (const exec::Extent &e : t.shape)
    shape.push_back(e.evaluate(dims));
  return shape;
}

std::string dims_text(const rt::Dims &dims) {
  std::vector<std::string> parts;
  for (const auto &[name, value] : dims)
    parts.push_back(fmt::format("{}={}", name, value));
  return parts.empty() ? "no dims" : fmt::format("{}", fmt::join(parts, " "));
}

bool same_tensor(const Tensor &a, const Tensor &b) {
  return a.data == b.data && a.shape == b.shape && a.dtype == b.dtype &&
         a.row_stride == b.row_stride;
}

// `t` of `shape` and `dtype`: what the last run's dims make of the tensor it stands for.
bool matches(const Tensor &t, const std::vector<int64_t> &shape, DType dtype) {
  return t.shape == shape && t.dtype == dtype;
}

Error mismatch(const std::string &where, const std::string &what, const Tensor &t,
               const std::vector<int64_t> &shape, DType dtype, const rt::Dims &dims) {
  return Error(fmt::format("{}: backward(): {} must be {}{} (at the last run's {}), got {}{}",
                           where, what, exec::dtype_name(dtype), exec::shape_text(shape),
                           dims_text(dims), exec::dtype_name(t.dtype), exec::shape_text(t.shape)));
}

} // namespace

Pipeline rt::PipelineAccess::compile_training(exec::Training training) {
  const exec::Interface forward = training.forward.interface;
  // NVRTC compiles the backward's source on a second thread while the forward's compiles here:
  // the two programs are independent, and NVRTC compiles programs concurrently.
  std::future<CompiledModule> backward_module = std::async(
      std::launch::async, [&backward = training.backward] { return compile_source(backward); });
  Pipeline p = compile(std::move(training.forward));
  Pipeline::Impl &im = *p.impl_;
  im.own_outputs = training.outputs;
  for (size_t i = 0; i < training.saved.size(); ++i)
    im.output_names.at(im.own_outputs + i) = training.saved[i];
  im.all_outputs.resize(im.output_names.size());

  // The second thread reads training.backward until get() returns: only then is it moved from.
  CompiledModule compiled_backward = backward_module.get();
  auto t = std::make_unique<Pipeline::Impl::Training>(
      compile(std::move(training.backward), std::move(compiled_backward)));
  Pipeline::Impl &bw = *t->backward.impl_;
  t->gradients = training.gradients;
  for (const std::string &name : t->gradients)
    t->gradient_dtypes.push_back(
        forward.declared[static_cast<size_t>(forward.find(name))].type.dtype);
  for (size_t i = 0; i < t->gradients.size(); ++i)
    bw.output_names.at(i) = "grad " + t->gradients[i]; // as `kfuse run --backward` names them
  using Source = Pipeline::Impl::Training::Source;
  auto position = [](const std::vector<std::string> &names, const std::string &name) {
    return static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
  };
  for (const DeclaredTensor &d : bw.executable.interface.declared) {
    if (d.kind == DeclaredTensor::Kind::Input) {
      if (size_t k = position(training.grad_inputs, d.name); k < training.grad_inputs.size())
        t->inputs.emplace_back(Source::GradOutput, k);
      else if (size_t s = position(training.saved, d.name); s < training.saved.size())
        t->inputs.emplace_back(Source::Saved, s);
      else
        t->inputs.emplace_back(
            Source::ForwardInput,
            static_cast<size_t>(im.input_position.at(static_cast<size_t>(forward.find(d.name)))));
      continue;
    }
    t->params.push_back(d.name);
    t->param_declared.push_back(static_cast<size_t>(forward.find(d.name)));
    // A train-mode run updates state in place; the backward reads it as the run did, at entry.
    t->snapshot.push_back(d.kind == DeclaredTensor::Kind::State &&
                          im.executable.mode == Mode::Train);
  }
  t->backward_inputs.resize(t->inputs.size());
  t->backward_bound.resize(t->params.size());
  t->param_tensors.resize(t->params.size());
  t->snapshots.resize(t->params.size());
  im.training = std::move(t);
  return p;
}

const Pipeline &rt::PipelineAccess::backward(const Pipeline &p) {
  return p.impl().training_or_throw("its backward").backward;
}

std::vector<Tensor> rt::PipelineAccess::saved(const Pipeline &p) {
  const Pipeline::Impl &im = p.impl();
  if (!im.training_or_throw("its saved values").ran)
    throw Error(fmt::format("{}: no run has saved values yet", im.where));
  return {im.all_outputs.begin() + static_cast<std::ptrdiff_t>(im.own_outputs),
          im.all_outputs.end()};
}

Pipeline::Impl::Training &Pipeline::Impl::training_or_throw(const char *what) const {
  if (!training)
    throw Error(
        fmt::format("{}: {} needs a pipeline compiled with Options::backward = true", where, what));
  return *training;
}

const Tensor *Pipeline::Impl::with_saved(const Tensor *outputs) {
  std::copy(outputs, outputs + own_outputs, all_outputs.begin());
  return all_outputs.data();
}

// The saved values and the state snapshots at the run's dims, one allocation for all of them,
// and the shapes backward() will expect; the run's table points at the saved values.
void Pipeline::Impl::place_saved() {
  Training &t = *training;
  t.ran = false; // what the last run kept is being replaced: no backward until a run completes
  const exec::Interface &in = executable.interface;
  std::vector<size_t> offsets;
  size_t bytes = 0;
  for (size_t i = own_outputs; i < in.outputs.size(); ++i) {
    offsets.push_back(bytes);
    bytes += aligned(in.outputs[i].bytes(dims));
  }
  for (size_t p = 0; p < t.params.size(); ++p) {
    offsets.push_back(bytes);
    if (t.snapshot[p])
      bytes += aligned(in.declared[t.param_declared[p]].type.bytes(dims));
  }
  if (t.memory.size() < bytes) // grown, never shrunk, as the workspace
    t.memory = rt::DeviceBuffer(bytes);
  size_t next = 0;
  for (size_t i = own_outputs; i < in.outputs.size(); ++i) {
    void *data = reinterpret_cast<void *>(t.memory.ptr() + offsets[next++]);
    all_outputs[i] = Tensor{data, shape_at(in.outputs[i], dims), in.outputs[i].dtype};
    pointers[in.declared.size() + i] = reinterpret_cast<CUdeviceptr>(data);
  }
  for (size_t p = 0; p < t.params.size(); ++p, ++next) {
    const exec::TensorType &type = in.declared[t.param_declared[p]].type;
    t.snapshots[p] = t.snapshot[p]
                         ? Tensor{reinterpret_cast<void *>(t.memory.ptr() + offsets[next]),
                                  shape_at(type, dims), type.dtype}
                         : Tensor{};
  }
  t.grad_output_shapes.clear();
  for (size_t i = 0; i < own_outputs; ++i)
    t.grad_output_shapes.push_back(shape_at(in.outputs[i], dims));
  const Impl &bw = *t.backward.impl_;
  t.backward_input_shapes.clear();
  for (size_t id : bw.input_ids)
    t.backward_input_shapes.push_back(shape_at(bw.executable.interface.declared[id].type, dims));
  t.gradient_shapes.clear();
  for (const std::string &name : t.gradients)
    t.gradient_shapes.push_back(
        shape_at(in.declared[static_cast<size_t>(in.find(name))].type, dims));
}

void Pipeline::Impl::keep_layout() {
  Training &t = *training;
  t.dims = dims;
  for (size_t p = 0; p < t.params.size(); ++p)
    t.param_tensors[p] = t.snapshot[p]
                             ? t.snapshots[p]
                             : bound.at(executable.interface.declared[t.param_declared[p]].name);
}

void Pipeline::Impl::keep_for_backward(const Tensor *inputs, const RngState &drawn,
                                       CUstream stream) {
  Training &t = *training;
  rt::Driver &driver = rt::Driver::get();
  for (size_t p = 0; p < t.params.size(); ++p)
    if (t.snapshot[p]) {
      const exec::DeclaredTensor &d = executable.interface.declared[t.param_declared[p]];
      driver.check(driver.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(t.snapshots[p].data),
                                            pointers[t.param_declared[p]], d.type.bytes(dims),
                                            stream),
                   "cuMemcpyDtoDAsync (state kept for backward)");
    }
  t.forward_inputs.assign(inputs, inputs + input_ids.size());
  t.rng = drawn;
  t.ran = true;
}

std::vector<std::string> Pipeline::gradients() const {
  return impl().training_or_throw("gradients()").gradients;
}

std::vector<int64_t> Pipeline::gradient_shape(size_t i,
                                              const std::map<std::string, int64_t> &dims) const {
  const Impl::Training &t = impl().training_or_throw("gradient_shape()");
  if (i >= t.gradients.size())
    throw Error(fmt::format("{}: no gradient {} (it has {})", impl_->where, i, t.gradients.size()));
  return shape(t.gradients[i], dims);
}

DType Pipeline::gradient_dtype(size_t i) const {
  const Impl::Training &t = impl().training_or_throw("gradient_dtype()");
  if (i >= t.gradients.size())
    throw Error(fmt::format("{}: no gradient {} (it has {})", impl_->where, i, t.gradients.size()));
  return t.gradient_dtypes[i];
}

void Pipeline::backward(const std::vector<Tensor> &grad_outputs,
                        const std::map<std::string, Tensor> &gradients, CUstream stream) {
  const Impl &im = impl();
  const std::vector<std::string> &names = im.training_or_throw("backward()").gradients;
  for (const auto &[name, t] : gradients)
    if (std::find(names.begin(), names.end(), name) == names.end())
      throw Error(fmt::format("{}: backward(): '{}' has no gradient (the gradients: {})", im.where,
                              name, fmt::join(names, ", ")));
  std::vector<Tensor> ordered;
  for (const std::string &name : names) {
    auto it = gradients.find(name);
    if (it == gradients.end())
      throw Error(fmt::format("{}: backward(): the gradient of '{}' is missing", im.where, name));
    ordered.push_back(it->second);
  }
  backward(grad_outputs.data(), grad_outputs.size(), ordered.data(), ordered.size(), stream);
}

void Pipeline::backward(const Tensor *grad_outputs, size_t grad_output_count,
                        const Tensor *gradients, size_t gradient_count, CUstream stream) {
  Impl &im = impl();
  std::lock_guard<std::mutex> lock(im.mutex);
  Impl::Training &t = im.training_or_throw("backward()");
  if (!t.ran)
    throw Error(fmt::format("{}: backward() before a run: run() computes and keeps what the "
                            "backward reads",
                            im.where));
  if (grad_output_count != im.own_outputs || (grad_output_count > 0 && !grad_outputs))
    throw Error(fmt::format("{}: backward(): expected {} output gradient(s), got {}", im.where,
                            im.own_outputs, grad_outputs ? grad_output_count : 0));
  if (gradient_count != t.gradients.size() || (gradient_count > 0 && !gradients))
    throw Error(fmt::format("{}: backward(): expected {} gradient tensor(s) ({}), got {}", im.where,
                            t.gradients.size(), fmt::join(t.gradients, ", "),
                            gradients ? gradient_count : 0));
  for (size_t i = 0; i < grad_output_count; ++i)
    if (const DType dtype = im.executable.interface.outputs[i].dtype;
        !matches(grad_outputs[i], t.grad_output_shapes[i], dtype))
      throw mismatch(im.where, fmt::format("the gradient of output {}", i), grad_outputs[i],
                     t.grad_output_shapes[i], dtype, t.dims);
  for (size_t i = 0; i < gradient_count; ++i)
    if (!matches(gradients[i], t.gradient_shapes[i], t.gradient_dtypes[i]))
      throw mismatch(im.where, fmt::format("the gradient of '{}'", t.gradients[i]), gradients[i],
                     t.gradient_shapes[i], t.gradient_dtypes[i], t.dims);
  using Source = Impl::Training::Source;
  for (size_t i = 0; i < t.inputs.size(); ++i) {
    const auto &[source, index] = t.inputs[i];
    t.backward_inputs[i] = source == Source::GradOutput ? grad_outputs[index]
                           : source == Source::Saved    ? im.all_outputs[im.own_outputs + index]
                                                        : t.forward_inputs[index];
    t.backward_inputs[i].shape = t.backward_input_shapes[i];
  }
  for (size_t p = 0; p < t.params.size(); ++p)
    if (!same_tensor(t.backward_bound[p], t.param_tensors[p])) {
      t.backward.bind(t.params[p], t.param_tensors[p]);
      t.backward_bound[p] = t.param_tensors[p];
    }
  t.backward.set_rng(t.rng.seed, t.rng.offset); // the run's masks
  t.backward.run(t.backward_inputs.data(), t.backward_inputs.size(), gradients, gradient_count,
                 stream);
}

} // namespace kfuse
