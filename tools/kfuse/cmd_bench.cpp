// kfuse bench F.kf --dim N=... [--mode train|eval] [--precision fp32|3xtf32|tf32|bf16]
//                  [--json FILE] [--iters 100] [--warmup 10] [--seed S] [--arch sm_90a]
//                  [--max-split-k S (1: split-K off)] [--no-tuned] [--backward [--frozen NAME,...]]
//
// Times three contenders in one process, on one stream, over the same device tensors, the same
// way (runtime/gpu_timer.h): fused, the pipeline as planned; unfused (LowerOptions::fuse false:
// one kernel per op, each result stored in its own type, GEMMs by cuBLAS at the requested
// precision or on the bf16/f16 operands); cublas_gemm, the pipeline's GEMMs alone, the floor a
// fused chain chases. A contender that cannot run says why; no number is ever made up.
// --backward: every timed run is a training step, the forward that saves then the backward on
// random output gradients (Options::backward), fused and unfused alike; cuBLAS runs the GEMMs of
// both graphs (for a linear: the forward's, dX and dW); the agreement covers the gradients too,
// the unfused backward's taken again on the values the fused forward saved.
// docs/FORMATS.md describes the printed table and the --json schema.
#include "compiler/build_executable.h"
#include "compiler/dsl/parser.h"
#include "compiler/ir/interpreter.h"
#include "compiler/lower.h"
#include "compiler/plan/plan_printer.h"
#include "compiler/plan/planner.h"
#include "kfuse/kfuse.h"
#include "runtime/device_buffer.h"
#include "runtime/driver.h"
#include "runtime/error.h"
#include "runtime/gpu_timer.h"
#include "runtime/host_elements.h"
#include "runtime/pipeline.h"
#include "runtime/random_tensors.h"
#include "runtime/stream.h"
#include "runtime/tensor_checks.h"
#include "runtime/utc_time.h"
#include "tools/check/reference_check.h"
#include "tools/kfuse/bench_figures.h"
#include "tools/kfuse/bench_report.h"
#include "tools/kfuse/command_line.h"
#include "tools/kfuse/commands.h"
#include "tools/kfuse/cublas.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kfuse::tool {
using rt::DeviceTensor;
using rt::download;
using rt::L2Flush;
using rt::make_tensor;
using rt::PipelineData;
using rt::random_tensor;
using rt::time_interleaved;
using rt::utc_now;

namespace {

// What bench knows before the GPU: the options asked, each contender lowered once (its plan is
// reported, its program compiled on the GPU), the dims and the pipeline's GEMMs.
struct BenchSetup {
  Options options;
  int iters = 0, warmup = 0;
  uint64_t seed = 0;
  std::string json_path, file;
  Lowered fused, unfused;
  // --backward: fused and unfused are the forwards that save; these are their backwards.
  std::optional<TrainingSources> training;
  Lowered fused_backward, unfused_backward;
  ir::DimBindings dims;
  std::vector<GemmShape> gemms, backward_gemms;
  GemmArithmetic arithmetic;
  bool tf32 = false;
};

BenchSetup bench_setup(int argc, char **argv) {
  CommandLine cl = parse_command_line(argc, argv,
                                      {"mode", "precision", "arch", "json", "iters", "warmup",
                                       "seed", "dim", "max-split-k", "frozen"},
                                      {"no-tuned", "backward"});
  BenchSetup s;
  s.options = pipeline_options(cl);
  s.iters = parse_count(cl, "iters", kRecommendedIters, 1);
  s.warmup = parse_count(cl, "warmup", 10, 0);
  s.seed = static_cast<uint64_t>(parse_count(cl, "seed", 1, 0));
  s.json_path = cl.option("json", "");
  s.file = cl.file();

  // Everything that needs no GPU first, so a usage mistake is reported before device setup.
  // The unfused kernels compute in fp32 (their GEMMs are cuBLAS's, at the precision asked);
  // precision bf16 keeps its roundings there, each a kernel of its own before a cuBLAS GEMM of
  // bf16 operands.
  Options unfused_options = s.options;
  if (s.options.precision != Precision::BF16)
    unfused_options.precision = Precision::FP32;
  const dsl::SourceFile src = dsl::SourceFile::read(s.file);
  const LowerOptions fused = lower_options(rt::PipelineAccess::request(s.options, true));
  const LowerOptions unfused = lower_options(rt::PipelineAccess::request(unfused_options, false));
  if (s.options.backward) {
    LoweredTraining f = lower_training(src, fused), u = lower_training(src, unfused);
    s.training.emplace(std::move(f.sources));
    s.fused = std::move(f.forward);
    s.fused_backward = std::move(f.backward);
    s.unfused = std::move(u.forward);
    s.unfused_backward = std::move(u.backward);
  } else {
    s.fused = lower(src, fused);
    s.unfused = lower(src, unfused);
  }
  const ir::Graph &g = s.fused.graph;
  s.dims = cl.dims_of(g, /*all=*/true);
  s.gemms = gemm_shapes(g, s.dims);
  if (s.training)
    s.backward_gemms = gemm_shapes(s.fused_backward.graph, s.dims);
  std::vector<GemmShape> all = s.gemms;
  all.insert(all.end(), s.backward_gemms.begin(), s.backward_gemms.end());
  s.arithmetic = gemm_arithmetic(g, all, s.options.precision);
  s.tf32 = !s.arithmetic.half() && s.options.precision == Precision::TF32;
  return s;
}

// The report's account of the pipeline and its contenders, before anything runs.
BenchReport describe_bench(const BenchSetup &s) {
  const ir::Graph &g = s.fused.graph;
  BenchReport r;
  r.pipeline = s.training ? g.name + " (forward + backward)" : g.name;
  r.file = s.file;
  r.mode = std::string(ir::mode_name(ir_mode(s.options.mode)));
  r.arithmetic = s.arithmetic;
  r.dims = s.dims;
  r.warmup = s.warmup;
  r.iters = s.iters;
  r.gemms = s.gemms;
  r.gemms.insert(r.gemms.end(), s.backward_gemms.begin(), s.backward_gemms.end());
  r.min_bytes = minimum_bytes(g, s.fused.plan, s.dims);
  int64_t cublas_bytes = 0;
  for (const GemmShape &gemm : r.gemms) {
    r.flop += gemm.flop();
    cublas_bytes += gemm.bytes();
  }
  r.cublas.label =
      fmt::format("cuBLAS GEMM alone ({})", s.arithmetic.half()
                                                ? std::string(ir::dtype_name(s.arithmetic.operands))
                                            : s.tf32 ? "tf32"
                                                     : "fp32");
  r.unfused.kernels = static_cast<int64_t>(s.unfused.plan.kernels.size());
  r.unfused.bytes_moved = plan::bytes_moved(s.unfused.plan, s.dims);
  r.fused.kernels = static_cast<int64_t>(s.fused.plan.kernels.size());
  r.fused.bytes_moved = plan::bytes_moved(s.fused.plan, s.dims);
  r.cublas.bytes_moved = cublas_bytes;
  if (s.training) { // the backward's too: a step is both
    const ir::Graph &bg = s.fused_backward.graph;
    r.min_bytes += minimum_bytes(bg, s.fused_backward.plan, s.dims);
    *r.unfused.kernels += static_cast<int64_t>(s.unfused_backward.plan.kernels.size());
    *r.unfused.bytes_moved += plan::bytes_moved(s.unfused_backward.plan, s.dims);
    *r.fused.kernels += static_cast<int64_t>(s.fused_backward.plan.kernels.size());
    *r.fused.bytes_moved += plan::bytes_moved(s.fused_backward.plan, s.dims);
  }
  if (s.tf32)
    r.unfused.note = "kfuse's own kernels compute in fp32; only the GEMM (cuBLAS) runs at tf32";
  if (s.options.precision == Precision::BF16)
    r.unfused.note = "each op one kernel, as PyTorch eager runs it under torch.autocast: every "
                     "rounding to bf16 a kernel of its own (weights too, every run), the GEMM "
                     "cuBLAS's on bf16 operands with a bf16 product, the other ops in fp32";
  else if (s.arithmetic.half())
    r.unfused.note = fmt::format(
        "each op one kernel, as PyTorch eager runs it: every result stored in its own type ({} "
        "between ops) and read back, kfuse's kernels computing in fp32, the GEMM cuBLAS's on {} "
        "operands; unlike PyTorch, linear's bias is a kernel of its own rather than cuBLAS's "
        "epilogue",
        ir::dtype_name(s.arithmetic.operands), ir::dtype_name(s.arithmetic.operands));
  return r;
}

// The contenders on the GPU over the same device tensors (inputs, params, state; each
// contender's own outputs, compared afterwards) and one stream.
class BenchRun {
public:
  explicit BenchRun(const BenchSetup &s)
      : s_(s), g_(s.fused.graph), fused_executable_(build_executable(s.fused)),
        data_(fused_executable_.interface, s.dims, s.seed),
        math_(s.tf32 ? GemmMath::TF32 : GemmMath::FP32) {
    try {
      cublas_.emplace();
      cublas_version_ = cublas_->version();
    } catch (const Error &e) {
      cublas_error_ = e.what();
    }
    for (size_t i = 0; s.training && i < s.training->outputs; ++i)
      grad_outputs_.push_back(
          random_tensor({s.training->grad_inputs[i], exec::DeclaredTensor::Kind::Input,
                         fused_executable_.interface.outputs[i]},
                        s.dims, s.seed * 7919u + 104729u + i));
  }

  const std::string &cublas_version() const { return cublas_version_; }

  void run(BenchReport &r) {
    prepare_cublas(r.cublas);
    prepare_unfused(r.unfused);
    prepare_fused(r.fused);
    time_contenders(r);
    if (r.fused.timing)
      r.fused.gemm_launches = rt::PipelineAccess::gemm_launches(*fused_);
    if (r.fused.timing && r.unfused.timing) {
      const bool same_saved = s_.training && unfused_backward_on_fused_saved();
      r.agreement = agreement();
      r.agreement->gradients_given_saved = same_saved;
    }
  }

private:
  // A GEMM operand of `g` (the forward, or with --backward the backward): a declared tensor of
  // the pipeline, or random scratch data of its shape for one another op computes (a GEMM fed by
  // another op) or the backward reads (an output's gradient, a saved value).
  const void *operand(const ir::Graph &g, ir::ValueId id) {
    if (!g[id].is_op())
      if (auto declared = data_.declared.find(g[id].name); declared != data_.declared.end())
        return declared->second.data();
    const uint64_t graph = &g == &g_ ? 0 : 1;
    auto it = scratch_.find({graph, id});
    if (it == scratch_.end())
      it = scratch_
               .emplace(std::make_pair(graph, id),
                        random_tensor(
                            {g[id].name, exec::DeclaredTensor::Kind::Input, type_of(g[id].type)},
                            s_.dims, s_.seed * 7919u + graph * 104729u + static_cast<uint64_t>(id)))
               .first;
    return it->second.data();
  }

  // cuBLAS GEMM alone: each GEMM as the pipeline declares it, its operand type in, its
  // product's type out.
  void prepare_cublas(Contender &c) {
    if (s_.gemms.empty()) {
      c.supported = false;
      c.reason = "the pipeline has no GEMM (linear or matmul)";
      return;
    }
    if (!cublas_) {
      c.error = cublas_error_;
      return;
    }
    std::vector<GemmShape> gemms;
    std::vector<const void *> as, bs;
    for (const ir::Graph *g : {&g_, &s_.fused_backward.graph})
      for (const GemmShape &s : g == &g_ ? s_.gemms : s_.backward_gemms) {
        gemms.push_back(s);
        gemm_outputs_.push_back(make_tensor({s.m, s.n}, api_dtype(s.result)));
        as.push_back(operand(*g, s.a));
        bs.push_back(operand(*g, s.b));
      }
    run_cublas_ = [this, gemms, as, bs](CUstream st) {
      for (size_t i = 0; i < gemms.size(); ++i) {
        const GemmShape &s = gemms[i];
        cublas_->gemm(math_, {s.operands, s.result}, s.trans_b, s.m, s.n, s.k, as[i], s.k, bs[i],
                      s.trans_b ? s.k : s.n, gemm_outputs_[i].data(), s.n, st);
      }
    };
  }

  // unfused: kfuse's per-op kernels in fp32 storing each result in its type, GEMMs through
  // cuBLAS at the precision asked (on the pipeline's bf16/f16 operands where it has them).
  void prepare_unfused(Contender &c) {
    unfused_out_ = outputs();
    if (!s_.gemms.empty() && !cublas_) {
      c.error = "its GEMMs need cuBLAS: " + cublas_error_;
      return;
    }
    try {
      unfused_.emplace(s_.training ? rt::PipelineAccess::compile_training(build_training(
                                         *s_.training, s_.unfused, s_.unfused_backward))
                                   : rt::PipelineAccess::compile(build_executable(s_.unfused)));
      if (cublas_)
        rt::PipelineAccess::set_gemm_hook(*unfused_, [this](const rt::GemmCall &call, CUstream st) {
          cublas_->gemm(math_, {ir_dtype(call.operands), ir_dtype(call.result)}, call.trans_b,
                        call.m, call.n, call.k, call.a, call.lda, call.b, call.ldb, call.c,
                        call.ldc, st);
        });
      data_.bind_all(*unfused_);
      unfused_gradients_ = gradients(*unfused_);
      c.compile_ms = unfused_->report().milliseconds;
      c.cache_hit = unfused_->report().cache_hit;
    } catch (const Error &e) {
      c.error = e.what();
      unfused_.reset();
    }
  }

  // fused: only where kfuse implements the precision; otherwise say why, time nothing.
  void prepare_fused(Contender &c) {
    fused_out_ = outputs();
    try {
      require_supported(s_.options.precision);
    } catch (const Error &e) {
      c.supported = false;
      c.reason = e.what();
    }
    if (!c.supported)
      return;
    try {
      fused_.emplace(s_.training ? rt::PipelineAccess::compile_training(
                                       build_training(*s_.training, s_.fused, s_.fused_backward))
                                 : rt::PipelineAccess::compile(fused_executable_));
      data_.bind_all(*fused_);
      fused_gradients_ = gradients(*fused_);
      c.compile_ms = fused_->report().milliseconds;
      c.cache_hit = fused_->report().cache_hit;
    } catch (const Error &e) {
      c.error = e.what();
      fused_.reset();
    }
  }

  // The contenders' runs interleaved on the same stream and data (time_interleaved). A trial
  // run of each first, so a contender that fails is dropped with its own error.
  void time_contenders(BenchReport &r) {
    L2Flush flush;
    r.l2_bytes = flush.l2_bytes();
    r.flush_bytes = flush.bytes();
    std::vector<Contender *> timed;
    std::vector<std::function<void(CUstream)>> works;
    auto enter = [&](Contender &c, std::function<void(CUstream)> work) {
      if (!c.supported || !c.error.empty() || !work)
        return;
      try {
        work(stream_.handle());
        stream_.synchronize();
        timed.push_back(&c);
        works.push_back(std::move(work));
      } catch (const Error &e) {
        c.error = e.what();
      }
    };
    const std::vector<Tensor> unfused_tensors = tensors_of(unfused_out_),
                              fused_tensors = tensors_of(fused_out_),
                              grad_outputs = tensors_of(grad_outputs_),
                              unfused_gradients = tensors_of(unfused_gradients_),
                              fused_gradients = tensors_of(fused_gradients_);
    // --backward: a training step, the forward that saves then the backward.
    auto step = [&](Pipeline &p, const std::vector<Tensor> &outs,
                    const std::vector<Tensor> &gradients) {
      return [this, pipeline = &p, outs = &outs, gradients = &gradients,
              grads = &grad_outputs](CUstream st) {
        pipeline->run(data_.inputs, *outs, st);
        if (s_.training)
          pipeline->backward(grads->data(), grads->size(), gradients->data(), gradients->size(),
                             st);
      };
    };
    enter(r.cublas, run_cublas_);
    if (unfused_)
      enter(r.unfused, step(*unfused_, unfused_tensors, unfused_gradients));
    if (fused_)
      enter(r.fused, step(*fused_, fused_tensors, fused_gradients));
    if (works.empty())
      return;
    try {
      std::vector<rt::TimingStats> stats =
          time_interleaved(stream_.handle(), works, s_.warmup, s_.iters, flush);
      for (size_t i = 0; i < timed.size(); ++i)
        timed[i]->timing = std::move(stats[i]);
    } catch (const Error &e) {
      for (Contender *c : timed)
        c->error = std::string("timing the contenders together failed: ") + e.what();
    }
  }

  // --backward: the unfused backward once more, on the values the fused forward saved, so that
  // the gradients compared are the two backwards' on the same inputs. The forwards' own
  // rounding (the outputs' comparison judges it) can otherwise move a gradient past the bound
  // where a relu's mask flips or a sum cancels. False where the two saved no such values.
  bool unfused_backward_on_fused_saved() {
    const std::vector<Tensor> from = rt::PipelineAccess::saved(*fused_),
                              to = rt::PipelineAccess::saved(*unfused_);
    if (from.size() != to.size())
      return false;
    for (size_t i = 0; i < from.size(); ++i)
      if (from[i].shape != to[i].shape || from[i].dtype != to[i].dtype)
        return false;
    rt::Driver &driver = rt::Driver::get();
    for (size_t i = 0; i < from.size(); ++i) {
      int64_t elements = 1; // saved values are contiguous (Pipeline::Impl::place_saved)
      for (int64_t d : from[i].shape)
        elements *= d;
      driver.check(
          driver.cuMemcpyDtoDAsync(reinterpret_cast<CUdeviceptr>(to[i].data),
                                   reinterpret_cast<CUdeviceptr>(from[i].data),
                                   static_cast<size_t>(elements) * exec::dtype_bytes(from[i].dtype),
                                   stream_.handle()),
          "cuMemcpyDtoDAsync (the fused forward's saved values)");
    }
    const std::vector<Tensor> grads = tensors_of(grad_outputs_),
                              gradients = tensors_of(unfused_gradients_);
    unfused_->backward(grads.data(), grads.size(), gradients.data(), gradients.size(),
                       stream_.handle());
    stream_.synchronize();
    return true;
  }

  // Fused and unfused compute the same function of the same inputs (train-mode outputs do not
  // read the running stats both update), so their last outputs must agree: a fast wrong
  // kernel shows here.
  Agreement agreement() const {
    Agreement a;
    double diff2 = 0, ref2 = 0;
    std::vector<std::pair<const DeviceTensor *, const DeviceTensor *>> pairs;
    for (size_t i = 0; i < fused_out_.size(); ++i)
      pairs.emplace_back(&fused_out_[i], &unfused_out_[i]);
    for (size_t i = 0; i < fused_gradients_.size(); ++i)
      pairs.emplace_back(&fused_gradients_[i], &unfused_gradients_[i]);
    for (const auto &[fused, unfused] : pairs) {
      std::vector<double> f = download(*fused), u = download(*unfused);
      for (size_t j = 0; j < f.size(); ++j) {
        double d = static_cast<double>(f[j]) - static_cast<double>(u[j]);
        a.max_abs = std::max(a.max_abs, std::fabs(d));
        diff2 += d * d;
        ref2 += static_cast<double>(u[j]) * static_cast<double>(u[j]);
      }
    }
    a.rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    a.bound = 2 * rt::error_bound(s_.options.precision, g_);
    if (s_.training)
      a.bound =
          std::max(a.bound, 2 * rt::error_bound(s_.options.precision, s_.fused_backward.graph));
    return a;
  }

  // Fresh outputs of the pipeline's own (with --backward, not the saved values after them).
  std::vector<DeviceTensor> outputs() const {
    std::vector<DeviceTensor> out = data_.make_outputs();
    if (s_.training)
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(s_.training->outputs), out.end());
    return out;
  }

  // --backward: a buffer for every gradient `p` writes; none without.
  std::vector<DeviceTensor> gradients(const Pipeline &p) const {
    std::vector<DeviceTensor> out;
    for (size_t i = 0; s_.training && i < p.gradients().size(); ++i)
      out.push_back(make_tensor(p.gradient_shape(i, s_.dims), p.gradient_dtype(i)));
    return out;
  }

  const BenchSetup &s_;
  const ir::Graph &g_;
  const exec::Executable fused_executable_;
  const PipelineData data_;
  rt::Stream stream_;
  const GemmMath math_;
  std::optional<Cublas> cublas_;
  std::string cublas_error_, cublas_version_;
  // GEMM operands no declared tensor holds, by graph (0 the forward, 1 the backward) and value.
  std::map<std::pair<uint64_t, ir::ValueId>, DeviceTensor> scratch_;
  std::vector<DeviceTensor> gemm_outputs_; // cuBLAS's
  std::function<void(CUstream)> run_cublas_;
  std::vector<DeviceTensor> grad_outputs_; // --backward: random, of the outputs' shapes
  std::optional<Pipeline> unfused_;
  std::vector<DeviceTensor> unfused_out_, unfused_gradients_;
  std::optional<Pipeline> fused_;
  std::vector<DeviceTensor> fused_out_, fused_gradients_;
};

// The table on stdout and, with --json, the report in FILE.
void write_report(const BenchReport &r, const std::string &json_path) {
  std::fputs(report_text(r).c_str(), stdout);
  std::fflush(stdout);
  if (json_path.empty())
    return;
  std::ofstream f(json_path, std::ios::binary);
  f << report_json(r);
  f.close();
  if (!f)
    throw Error("cannot write '" + json_path + "'");
}

} // namespace

int cmd_bench(int argc, char **argv) {
  const BenchSetup s = bench_setup(argc, argv);
  BenchReport r = describe_bench(s);

  rt::Driver &driver = rt::Driver::get();
  if (!driver.available())
    throw Error("kfuse bench needs a GPU: CUDA driver unavailable: " + driver.why_unavailable());
  driver.make_current();
  r.device = driver.device_name();
  r.peak = assumed_peak(r.device, s.arithmetic);
  BenchRun bench(s);
  r.date = utc_now();
  r.cublas_version = bench.cublas_version();
  r.compute_capability = driver.compute_capability();
  r.driver_version = driver.driver_version();
  bench.run(r);
  write_report(r, s.json_path);

  // Unsupported is an answer; a failure, or outputs that disagree, is not.
  for (const Contender *c : r.contenders())
    if (c->supported && !c->timing)
      return 1;
  return r.agreement && !r.agreement->agrees() ? 1 : 0;
}

} // namespace kfuse::tool
