// Batch statistics exchanged across ranks (Options::batch_stats_ranks), on one GPU: two
// pipelines, each on its own part of a batch in its own thread and stream, joined by an
// all-gather made here, normalize with the statistics of the whole batch and update their running
// statistics alike, as one pipeline run on the whole batch does; one rank with a copy for its
// all-gather computes exactly what a pipeline that exchanges nothing computes.
#include "kfuse/kfuse.h"
#include "runtime/device_buffer.h"
#include "runtime/driver.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace kfuse;

namespace {

constexpr int64_t kIn = 24, kOut = 100; // 100 features: no multiple of 8 or of a tile

const char *kChain = R"(pipeline sync_bn {
  dim N
  input  x: f32[N, 24]
  param  weight: f32[100, 24]
  param  bias: f32[100]
  param  bn_weight: f32[100]
  param  bn_bias: f32[100]
  state  running_mean: f32[100]
  state  running_var: f32[100]
  h = linear(x, weight, bias)
  h = batchnorm(h, bn_weight, bn_bias, running_mean, running_var, eps=1e-5, momentum=0.1)
  return relu(h)
}
)";

std::vector<float> random_floats(size_t n, std::mt19937 &gen, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(gen);
  return v;
}

rt::DeviceBuffer device(const std::vector<float> &host) {
  rt::DeviceBuffer b(host.size() * sizeof(float));
  b.upload(host.data(), host.size() * sizeof(float));
  return b;
}

std::vector<float> host(const rt::DeviceBuffer &b, size_t n) {
  std::vector<float> v(n);
  b.download(v.data(), n * sizeof(float));
  return v;
}

Tensor on(const rt::DeviceBuffer &b, std::vector<int64_t> shape) {
  return {reinterpret_cast<void *>(b.ptr()), std::move(shape)};
}

// One rank: its pipeline, its copies of the params and state, its rows of the batch.
struct Rank {
  Pipeline pipeline;
  rt::DeviceBuffer weight, bias, bn_weight, bn_bias, running_mean, running_var, x, out;
  int64_t rows;
};

struct Params {
  std::vector<float> weight, bias, bn_weight, bn_bias, running_mean, running_var;
};

Rank make_rank(const Options &o, const Params &p, const std::vector<float> &x, int64_t rows) {
  Rank r{Pipeline::from_string(kChain, "sync_bn.kf", o),
         device(p.weight),
         device(p.bias),
         device(p.bn_weight),
         device(p.bn_bias),
         device(p.running_mean),
         device(p.running_var),
         device(x),
         rt::DeviceBuffer(static_cast<size_t>(rows * kOut) * sizeof(float)),
         rows};
  r.out.fill_bytes(0xff); // NaN: every element must be written
  r.pipeline.bind("weight", on(r.weight, {kOut, kIn}));
  r.pipeline.bind("bias", on(r.bias, {kOut}));
  r.pipeline.bind("bn_weight", on(r.bn_weight, {kOut}));
  r.pipeline.bind("bn_bias", on(r.bn_bias, {kOut}));
  r.pipeline.bind("running_mean", on(r.running_mean, {kOut}));
  r.pipeline.bind("running_var", on(r.running_var, {kOut}));
  return r;
}

void run(Rank &r, CUstream stream) {
  r.pipeline.run({{"x", on(r.x, {r.rows, kIn})}}, {on(r.out, {r.rows, kOut})}, stream);
}

// An all-gather between threads of one process: each rank waits for its own summary, the ranks
// meet, each copies every rank's summary into its own receive buffer, and they meet again once
// the copies are done (so no rank's next run overwrites a summary another is still copying).
class ThreadAllGather {
public:
  explicit ThreadAllGather(int ranks) : sends_(static_cast<size_t>(ranks)) {}

  AllGather hook(int rank) {
    return [this, rank](const double *send, double *recv, size_t count, CUstream stream) {
      rt::Driver &d = rt::Driver::get();
      d.check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
      sends_[static_cast<size_t>(rank)] = send;
      meet();
      for (size_t r = 0; r < sends_.size(); ++r)
        d.check(d.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(recv + r * count),
                                    reinterpret_cast<CUdeviceptr>(sends_[r]),
                                    count * sizeof(double), stream),
                "cuMemcpyDtoDAsync");
      d.check(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
      meet();
    };
  }

private:
  void meet() {
    std::unique_lock<std::mutex> lock(mutex_);
    const int round = round_;
    if (++arrived_ == static_cast<int>(sends_.size())) {
      arrived_ = 0;
      ++round_;
      met_.notify_all();
      return;
    }
    met_.wait(lock, [&] { return round_ != round; });
  }

  std::vector<const double *> sends_;
  std::mutex mutex_;
  std::condition_variable met_;
  int arrived_ = 0, round_ = 0;
};

double relative_error(const std::vector<float> &got, const std::vector<float> &want) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]) /
                                std::max(1.0, std::abs(static_cast<double>(want[i]))));
  return worst;
}

} // namespace

TEST_CASE("gpu sync batchnorm: two ranks on parts of a batch compute what one run on the whole "
          "batch computes") {
  rt::Driver::get().make_current();
  std::mt19937 gen(20261127);
  Params p{random_floats(kOut * kIn, gen, -0.3f, 0.3f), random_floats(kOut, gen, -1.0f, 1.0f),
           random_floats(kOut, gen, 0.5f, 1.5f),        random_floats(kOut, gen, -0.5f, 0.5f),
           random_floats(kOut, gen, -0.2f, 0.2f),       random_floats(kOut, gen, 0.5f, 2.0f)};
  const int64_t rows0 = 37, rows1 = 150; // unequal, neither a multiple of a tile
  const std::vector<float> x =
      random_floats(static_cast<size_t>((rows0 + rows1) * kIn), gen, -2, 2);
  const std::vector<float> x0(x.begin(), x.begin() + rows0 * kIn),
      x1(x.begin() + rows0 * kIn, x.end());

  Rank whole = make_rank({}, p, x, rows0 + rows1);
  Options sync;
  sync.batch_stats_ranks = 2;
  Rank r0 = make_rank(sync, p, x0, rows0), r1 = make_rank(sync, p, x1, rows1);
  CHECK_THROWS_WITH_AS(run(r0, nullptr), doctest::Contains("no all-gather is set"), Error);
  CHECK(r0.pipeline.all_gathers_per_run() == 1);
  CHECK(whole.pipeline.all_gathers_per_run() == 0);
  CHECK_THROWS_WITH_AS(whole.pipeline.set_all_gather(ThreadAllGather(1).hook(0)),
                       doctest::Contains("exchanges no batch statistics"), Error);

  ThreadAllGather exchange(2);
  r0.pipeline.set_all_gather(exchange.hook(0));
  r1.pipeline.set_all_gather(exchange.hook(1));
  rt::Driver &d = rt::Driver::get();
  for (int step = 0; step < 3; ++step) { // running statistics move a step each run
    run(whole, nullptr);
    std::thread t0([&] {
      d.make_current();
      run(r0, nullptr);
    });
    std::thread t1([&] {
      d.make_current();
      run(r1, nullptr);
    });
    t0.join();
    t1.join();
    d.check(d.cuCtxSynchronize(), "cuCtxSynchronize");
  }
  const std::vector<float> want = host(whole.out, static_cast<size_t>((rows0 + rows1) * kOut));
  std::vector<float> got = host(r0.out, static_cast<size_t>(rows0 * kOut));
  const std::vector<float> got1 = host(r1.out, static_cast<size_t>(rows1 * kOut));
  got.insert(got.end(), got1.begin(), got1.end());
  CHECK(relative_error(got, want) < 1e-5);
  for (auto [state, initial] : {std::make_pair(&Rank::running_mean, &p.running_mean),
                                std::make_pair(&Rank::running_var, &p.running_var)}) {
    const std::vector<float> a = host(r0.*state, kOut), b = host(r1.*state, kOut);
    CHECK(a == b); // the same merge, in rank order, on every rank
    CHECK(relative_error(a, host(whole.*state, kOut)) < 1e-6);
    CHECK(relative_error(a, *initial) > 1e-3); // they moved
  }
}

TEST_CASE("gpu sync batchnorm: one rank whose all-gather is a copy computes what a pipeline "
          "exchanging nothing computes, bit for bit") {
  rt::Driver::get().make_current();
  std::mt19937 gen(7);
  Params p{random_floats(kOut * kIn, gen, -0.3f, 0.3f), random_floats(kOut, gen, -1.0f, 1.0f),
           random_floats(kOut, gen, 0.5f, 1.5f),        random_floats(kOut, gen, -0.5f, 0.5f),
           random_floats(kOut, gen, -0.2f, 0.2f),       random_floats(kOut, gen, 0.5f, 2.0f)};
  const int64_t rows = 301;
  const std::vector<float> x = random_floats(static_cast<size_t>(rows * kIn), gen, -2, 2);
  Rank plain = make_rank({}, p, x, rows);
  Options one;
  one.batch_stats_ranks = 1;
  Rank ranked = make_rank(one, p, x, rows);
  int calls = 0;
  ranked.pipeline.set_all_gather(
      [&](const double *send, double *recv, size_t count, CUstream stream) {
        ++calls;
        rt::Driver &d = rt::Driver::get();
        d.check(d.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(recv),
                                    reinterpret_cast<CUdeviceptr>(send), count * sizeof(double),
                                    stream),
                "cuMemcpyDtoDAsync");
        CHECK(count == 3 * kOut);
      });
  for (int step = 0; step < 2; ++step) {
    run(plain, nullptr);
    run(ranked, nullptr);
  }
  CHECK(calls == 2);
  CHECK(host(ranked.out, rows * kOut) == host(plain.out, rows * kOut));
  CHECK(host(ranked.running_mean, kOut) == host(plain.running_mean, kOut));
  CHECK(host(ranked.running_var, kOut) == host(plain.running_var, kOut));
}

namespace {

// The gradients a training pipeline of kChain writes, for `rows` rows.
struct Gradients {
  rt::DeviceBuffer x, weight, bias, bn_weight, bn_bias;
};

Gradients gradients_for(int64_t rows) {
  auto buffer = [](int64_t n) {
    rt::DeviceBuffer b(static_cast<size_t>(n) * sizeof(float));
    b.fill_bytes(0xff); // NaN: every element must be written
    return b;
  };
  return {buffer(rows * kIn), buffer(kOut * kIn), buffer(kOut), buffer(kOut), buffer(kOut)};
}

void backward(Rank &r, Gradients &g, const rt::DeviceBuffer &grad_out) {
  r.pipeline.backward({on(grad_out, {r.rows, kOut})},
                      {{"x", on(g.x, {r.rows, kIn})},
                       {"weight", on(g.weight, {kOut, kIn})},
                       {"bias", on(g.bias, {kOut})},
                       {"bn_weight", on(g.bn_weight, {kOut})},
                       {"bn_bias", on(g.bn_bias, {kOut})}},
                      nullptr);
}

} // namespace

TEST_CASE("gpu sync batchnorm: the backward of two ranks on parts of a batch gives one run's "
          "input gradient on the whole batch, and parameter gradients that add up to its") {
  rt::Driver::get().make_current();
  std::mt19937 gen(1127);
  Params p{random_floats(kOut * kIn, gen, -0.3f, 0.3f), random_floats(kOut, gen, -1.0f, 1.0f),
           random_floats(kOut, gen, 0.5f, 1.5f),        random_floats(kOut, gen, -0.5f, 0.5f),
           random_floats(kOut, gen, -0.2f, 0.2f),       random_floats(kOut, gen, 0.5f, 2.0f)};
  const int64_t rows0 = 37, rows1 = 150;
  const size_t split_x = static_cast<size_t>(rows0 * kIn),
               split_g = static_cast<size_t>(rows0 * kOut);
  const std::vector<float> x =
      random_floats(static_cast<size_t>((rows0 + rows1) * kIn), gen, -2, 2);
  const std::vector<float> g =
      random_floats(static_cast<size_t>((rows0 + rows1) * kOut), gen, -1, 1);
  Options train;
  train.backward = true;
  Options sync = train;
  sync.batch_stats_ranks = 2;
  Rank whole = make_rank(train, p, x, rows0 + rows1);
  Rank r0 =
      make_rank(sync, p, {x.begin(), x.begin() + static_cast<std::ptrdiff_t>(split_x)}, rows0);
  Rank r1 = make_rank(sync, p, {x.begin() + static_cast<std::ptrdiff_t>(split_x), x.end()}, rows1);
  const rt::DeviceBuffer g_whole = device(g),
                         g0 = device({g.begin(), g.begin() + static_cast<std::ptrdiff_t>(split_g)}),
                         g1 = device({g.begin() + static_cast<std::ptrdiff_t>(split_g), g.end()});
  Gradients d_whole = gradients_for(rows0 + rows1), d0 = gradients_for(rows0),
            d1 = gradients_for(rows1);
  ThreadAllGather exchange(2);
  r0.pipeline.set_all_gather(exchange.hook(0)); // the backward's too
  r1.pipeline.set_all_gather(exchange.hook(1));
  run(whole, nullptr);
  backward(whole, d_whole, g_whole);
  rt::Driver &d = rt::Driver::get();
  std::thread t0([&] {
    d.make_current();
    run(r0, nullptr);
    backward(r0, d0, g0);
  });
  std::thread t1([&] {
    d.make_current();
    run(r1, nullptr);
    backward(r1, d1, g1);
  });
  t0.join();
  t1.join();
  d.check(d.cuCtxSynchronize(), "cuCtxSynchronize");

  // The input gradient: each rank's rows of the whole batch's (the means it takes are the
  // whole batch's).
  std::vector<float> dx = host(d0.x, split_x);
  const std::vector<float> dx1 = host(d1.x, static_cast<size_t>(rows1 * kIn));
  dx.insert(dx.end(), dx1.begin(), dx1.end());
  CHECK(relative_error(dx, host(d_whole.x, static_cast<size_t>((rows0 + rows1) * kIn))) < 1e-4);
  // The parameter gradients: each rank's own sums, which DDP would add.
  for (auto [grad, size] :
       {std::make_pair(&Gradients::weight, kOut * kIn), std::make_pair(&Gradients::bias, kOut),
        std::make_pair(&Gradients::bn_weight, kOut), std::make_pair(&Gradients::bn_bias, kOut)}) {
    const auto n = static_cast<size_t>(size);
    std::vector<float> sum = host(d0.*grad, n);
    const std::vector<float> own1 = host(d1.*grad, n);
    for (size_t i = 0; i < n; ++i)
      sum[i] += own1[i];
    CHECK(relative_error(sum, host(d_whole.*grad, n)) < 1e-4);
  }
  CHECK(relative_error(host(d0.bn_bias, kOut), host(d_whole.bn_bias, kOut)) > 1e-2);
}
