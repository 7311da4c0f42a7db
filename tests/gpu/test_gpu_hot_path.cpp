// The run hot path on the GPU: the positional run computes what the by-name run does, a changed
// tensor is checked again, a caller's workspace is used (and refused when too small), and a
// captured CUDA graph replays with new input data and updated parameters.
#include "kfuse/kfuse.h"
#include "runtime/device_buffer.h"
#include "runtime/driver.h"
#include "runtime/stream.h"

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

using namespace kfuse;

namespace {

// Three kernels in train mode (GEMM with column partials, finalize, softmax), one in eval (the
// softmax runs in the GEMM's epilogue).
const char *kChain = R"(pipeline chain {
  dim N
  input  x: f32[N, 12]
  param  weight: f32[10, 12]
  param  bias: f32[10]
  param  bn_weight: f32[10]
  param  bn_bias: f32[10]
  state  running_mean: f32[10]
  state  running_var: f32[10]
  param  scale: f32[1]
  h = linear(x, weight, bias)
  h = batchnorm(h, bn_weight, bn_bias, running_mean, running_var, eps=1e-5, momentum=0.1)
  h = mul(scale, h)
  return softmax(h, dim=1)
}
)";
constexpr int64_t kRows = 16;

Options in(Mode mode) {
  Options o;
  o.mode = mode;
  return o;
}

// Deterministic values in [-1, 1), different for every seed.
std::vector<float> values(size_t n, unsigned seed) {
  std::vector<float> v(n);
  unsigned s = seed * 2654435761u + 1;
  for (float &x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return v;
}

size_t elements(const std::vector<int64_t> &shape) {
  size_t n = 1;
  for (int64_t e : shape)
    n *= static_cast<size_t>(e);
  return n;
}

// Device tensors of a pipeline's declarations and outputs, filled from `seed`.
struct Tensors {
  std::map<std::string, rt::DeviceBuffer> memory;
  std::map<std::string, std::vector<int64_t>> shapes;

  Tensor add(const std::string &name, std::vector<int64_t> shape, unsigned seed) {
    std::vector<float> host = values(elements(shape), seed);
    if (name == "running_var")
      for (float &x : host)
        x = std::fabs(x) + 0.5f;
    rt::DeviceBuffer b(host.size() * sizeof(float));
    b.upload(host.data(), host.size() * sizeof(float));
    memory[name] = std::move(b);
    shapes[name] = shape;
    return get(name);
  }
  Tensor get(const std::string &name) const {
    return {reinterpret_cast<void *>(memory.at(name).ptr()), shapes.at(name)};
  }
  void upload(const std::string &name, const std::vector<float> &host) {
    memory.at(name).upload(host.data(), host.size() * sizeof(float));
  }
  std::vector<float> download(const std::string &name) const {
    std::vector<float> host(elements(shapes.at(name)));
    memory.at(name).download(host.data(), host.size() * sizeof(float));
    return host;
  }
};

// Binds every param and state of `p` to new tensors of `t`, and adds x and the output.
void set_up(Pipeline &p, Tensors &t) {
  const std::map<std::string, int64_t> dims = {{"N", kRows}};
  unsigned seed = 1;
  for (const std::string &name : p.params())
    p.bind(name, t.add(name, p.shape(name, dims), seed++));
  t.add("x", p.shape("x", dims), 100);
  t.add("out", p.output_shape(0, dims), 200);
}

double max_difference(const std::vector<float> &a, const std::vector<float> &b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::fmax(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

} // namespace

TEST_CASE("gpu hot path: the positional run computes what the by-name run does, step by step") {
  rt::Driver::get().make_current();
  Pipeline by_name = Pipeline::from_string(kChain, "chain.kf", in(Mode::Train));
  Pipeline positional = Pipeline::from_string(kChain, "chain.kf", in(Mode::Train));
  REQUIRE(positional.plan_text().rfind("plan chain (mode train): 3 kernels", 0) == 0);
  Tensors a, b;
  set_up(by_name, a);
  set_up(positional, b);
  rt::Stream stream;
  const Tensor x = b.get("x"), out = b.get("out");
  for (int step = 0; step < 3; ++step) { // the running statistics carry over
    by_name.run({{"x", a.get("x")}}, {a.get("out")}, stream.handle());
    positional.run(&x, 1, &out, 1, stream.handle());
  }
  // Only the output's pointer moves: the moved tensor is checked, the rest is reused.
  const std::vector<int64_t> out_shape = b.shapes["out"];
  a.add("out2", out_shape, 300);
  const Tensor out2 = b.add("out2", out_shape, 300);
  by_name.run({{"x", a.get("x")}}, {a.get("out2")}, stream.handle());
  positional.run(&x, 1, &out2, 1, stream.handle());
  stream.synchronize();
  for (const char *name : {"out", "out2", "running_mean", "running_var"}) {
    INFO(name);
    CHECK(max_difference(a.download(name), b.download(name)) == 0.0);
  }
}

TEST_CASE("gpu hot path: steady runs replay one graph and compute what launches one by one do") {
  // `steady` runs on the same tensors every step (from its second steady run, one captured
  // graph); `moving` alternates its output buffer, so every run of it launches kernel by kernel.
  // New input data in place each step and a rebind in between: bitwise the same results.
  rt::Driver::get().make_current();
  for (Mode mode : {Mode::Train, Mode::Eval}) {
    INFO((mode == Mode::Train ? "train" : "eval"));
    Pipeline steady = Pipeline::from_string(kChain, "chain.kf", in(mode));
    Pipeline moving = Pipeline::from_string(kChain, "chain.kf", in(mode));
    Tensors a, b;
    set_up(steady, a);
    set_up(moving, b);
    b.add("out_b", b.shapes["out"], 200);
    rt::Stream stream;
    const Tensor x_a = a.get("x"), out_a = a.get("out"), x_b = b.get("x");
    for (int step = 0; step < 8; ++step) {
      INFO("step ", step);
      const std::vector<float> x = values(elements(x_a.shape), 500 + step);
      a.upload("x", x);
      b.upload("x", x);
      if (step == 4) { // a new scale: the graph holding the old pointer is dropped
        steady.bind("scale", a.add("scale2", {1}, 77));
        moving.bind("scale", b.add("scale2", {1}, 77));
      }
      const char *out_name = step % 2 ? "out_b" : "out";
      const Tensor out_b = b.get(out_name);
      steady.run(&x_a, 1, &out_a, 1, stream.handle());
      moving.run(&x_b, 1, &out_b, 1, stream.handle());
      stream.synchronize();
      CHECK(max_difference(a.download("out"), b.download(out_name)) == 0.0);
    }
    for (const char *name : {"running_mean", "running_var"}) {
      INFO(name);
      CHECK(max_difference(a.download(name), b.download(name)) == 0.0);
    }
  }
}

TEST_CASE("gpu hot path: a tensor that changed since the last run is checked again") {
  rt::Driver::get().make_current();
  Pipeline p = Pipeline::from_string(kChain, "chain.kf", in(Mode::Eval));
  Tensors t;
  set_up(p, t);
  const Tensor x = t.get("x"), out = t.get("out");
  p.run(&x, 1, &out, 1);
  // The output moved onto the input: refused, although the run before passed every check.
  Tensor on_x = x;
  on_x.shape = out.shape;
  CHECK_THROWS_WITH_AS(p.run(&x, 1, &on_x, 1), doctest::Contains("overlaps input 'x'"), Error);
  // Host memory where device memory was.
  std::vector<float> host(elements(x.shape));
  Tensor x_host = x;
  x_host.data = host.data();
  CHECK_THROWS_WITH_AS(p.run(&x_host, 1, &out, 1), doctest::Contains("host memory"), Error);
  // Another row count: new dims, checked and run.
  Tensor fewer = x, fewer_out = out;
  fewer.shape[0] = fewer_out.shape[0] = 5;
  p.run(&fewer, 1, &fewer_out, 1);
  Tensor mismatched = out;
  mismatched.shape[0] = 6;
  CHECK_THROWS_WITH_AS(p.run(&fewer, 1, &mismatched, 1),
                       doctest::Contains("dim N is 5 from tensor 'x' but 6 from tensor 'output 0'"),
                       Error);
  p.run(&x, 1, &out, 1);
  rt::Driver &d = rt::Driver::get();
  d.check(d.cuCtxSynchronize(), "cuCtxSynchronize");
}

TEST_CASE("gpu hot path: a caller's workspace is used, and refused when too small") {
  rt::Driver::get().make_current();
  Pipeline own = Pipeline::from_string(kChain, "chain.kf", in(Mode::Train));
  Pipeline given = Pipeline::from_string(kChain, "chain.kf", in(Mode::Train));
  Tensors a, b;
  set_up(own, a);
  set_up(given, b);
  const size_t bytes = given.workspace_size({{"N", kRows}});
  REQUIRE(bytes > 0); // the GEMM's product and column partials, which later kernels read
  rt::DeviceBuffer workspace(bytes);
  given.set_workspace(reinterpret_cast<void *>(workspace.ptr()), bytes);
  const Tensor x = b.get("x"), out = b.get("out");
  given.run(&x, 1, &out, 1);
  own.run({{"x", a.get("x")}}, {a.get("out")});
  rt::Driver &d = rt::Driver::get();
  d.check(d.cuCtxSynchronize(), "cuCtxSynchronize");
  CHECK(max_difference(a.download("out"), b.download("out")) == 0.0);

  given.set_workspace(reinterpret_cast<void *>(workspace.ptr()), bytes - 256);
  CHECK_THROWS_WITH_AS(given.run(&x, 1, &out, 1),
                       doctest::Contains("is too small: a run at N=16 needs"), Error);
  // The workspace overlapping a tensor the run writes.
  Tensor on_workspace = out;
  on_workspace.data = reinterpret_cast<void *>(workspace.ptr());
  given.set_workspace(reinterpret_cast<void *>(workspace.ptr()), bytes);
  CHECK_THROWS_WITH_AS(given.run(&x, 1, &on_workspace, 1), doctest::Contains("workspace"), Error);
}

TEST_CASE("gpu hot path: a captured positional run replays with new inputs and parameters") {
  rt::Driver &d = rt::Driver::get();
  d.make_current();
  Pipeline captured = Pipeline::from_string(kChain, "chain.kf", in(Mode::Eval));
  Pipeline eager = Pipeline::from_string(kChain, "chain.kf", in(Mode::Eval));
  Tensors a, b;
  set_up(captured, a);
  set_up(eager, b);
  rt::Stream stream;
  const Tensor x = a.get("x"), out = a.get("out");
  captured.run(&x, 1, &out, 1, stream.handle()); // checks and workspace before the capture
  stream.synchronize();

  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  d.check(d.cuStreamBeginCapture(stream.handle(), CU_STREAM_CAPTURE_MODE_GLOBAL),
          "cuStreamBeginCapture");
  captured.run(&x, 1, &out, 1, stream.handle());
  d.check(d.cuStreamEndCapture(stream.handle(), &graph), "cuStreamEndCapture");
  d.check(d.cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");

  for (unsigned step = 0; step < 3; ++step) {
    INFO("replay ", step);
    const std::vector<float> x_new = values(elements(a.shapes["x"]), 300 + step);
    const std::vector<float> w_new = values(elements(a.shapes["weight"]), 400 + step);
    const std::vector<float> scale_new = {0.5f + static_cast<float>(step)};
    for (Tensors *t : {&a, &b}) {
      t->upload("x", x_new);
      t->upload("weight", w_new);
      t->upload("scale", scale_new);
    }
    d.check(d.cuGraphLaunch(exec, stream.handle()), "cuGraphLaunch");
    eager.run({{"x", b.get("x")}}, {b.get("out")}, stream.handle());
    stream.synchronize();
    CHECK(max_difference(a.download("out"), b.download("out")) == 0.0);
  }
  d.cuGraphExecDestroy(exec);
  d.cuGraphDestroy(graph);
}
