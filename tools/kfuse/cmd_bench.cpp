// kfuse bench F.kf --dim N=... [--mode train|eval] [--precision fp32|3xtf32|tf32|bf16]
//                  [--json FILE] [--iters 100] [--warmup 10] [--seed S] [--arch sm_90a]
//                  [--max-split-k S (1: split-K off)] [--no-tuned]
//
// Times three contenders in one process, on one stream, over the same device tensors, the same
// way (runtime/gpu_timer.h): fused, the pipeline as planned; unfused (LowerOptions::fuse false:
// one kernel per op, each result stored in its own type, GEMMs by cuBLAS at the requested
// precision or on the bf16/f16 operands); cublas_gemm, the pipeline's GEMMs alone, the floor a
// fused chain chases. A contender that cannot run says why; no number is ever made up.
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

int cmd_bench(int argc, char **argv) {
  CommandLine cl = parse_command_line(
      argc, argv,
      {"mode", "precision", "arch", "json", "iters", "warmup", "seed", "dim", "max-split-k"},
      {"no-tuned"});
  Options options = pipeline_options(cl);
  const int iters = parse_count(cl, "iters", kRecommendedIters, 1);
  const int warmup = parse_count(cl, "warmup", 10, 0);
  const uint64_t seed = static_cast<uint64_t>(parse_count(cl, "seed", 1, 0));
  const std::string json_path = cl.option("json", "");
  const std::string &file = cl.file();

  // Everything that needs no GPU first, so a usage mistake is reported before device setup.
  // Each contender is lowered once: its plan is reported, its program compiled below.
  // The unfused kernels compute in fp32 (their GEMMs are cuBLAS's, at the precision asked);
  // precision bf16 keeps its roundings there, each a kernel of its own before a cuBLAS GEMM of
  // bf16 operands.
  Options unfused_options = options;
  if (options.precision != Precision::BF16)
    unfused_options.precision = Precision::FP32;
  const dsl::SourceFile src = dsl::SourceFile::read(file);
  Lowered fused_lowered = lower(src, lower_options(rt::PipelineAccess::request(options, true)));
  const ir::Graph g = fused_lowered.graph;
  const ir::DimBindings dims = cl.dims_of(g, /*all=*/true);
  const std::vector<GemmShape> gemms = gemm_shapes(g, dims);
  const GemmArithmetic arithmetic = gemm_arithmetic(g, gemms, options.precision);
  const bool tf32 = !arithmetic.half() && options.precision == Precision::TF32;
  Lowered unfused_lowered =
      lower(src, lower_options(rt::PipelineAccess::request(unfused_options, false)));
  const ir::Mode mode = ir_mode(options.mode);
  const std::string mode_text(ir::mode_name(mode));
  const plan::Plan fused_plan = fused_lowered.plan;
  const plan::Plan unfused_plan = unfused_lowered.plan;
  const int64_t min_bytes = minimum_bytes(g, fused_plan, dims);
  double flop = 0;
  int64_t cublas_bytes = 0;
  for (const GemmShape &s : gemms) {
    flop += s.flop();
    cublas_bytes += s.bytes();
  }

  rt::Driver &driver = rt::Driver::get();
  if (!driver.available())
    throw Error("kfuse bench needs a GPU: CUDA driver unavailable: " + driver.why_unavailable());
  driver.make_current();
  const std::string device = driver.device_name();
  const Peak peak = assumed_peak(device, arithmetic);

  // Device tensors, shared by every contender: inputs, params, state, and each contender's
  // own outputs (compared afterwards).
  const exec::Executable fused_executable = build_executable(fused_lowered);
  const PipelineData data(fused_executable.interface, dims, seed);
  const std::map<std::string, DeviceTensor> &declared = data.declared;
  const std::map<std::string, Tensor> &inputs = data.inputs;
  auto make_outputs = [&]() { return data.make_outputs(); };
  auto bind_all = [&](Pipeline &p) { data.bind_all(p); };

  rt::Stream stream;
  GemmMath math = tf32 ? GemmMath::TF32 : GemmMath::FP32;
  std::optional<Cublas> cublas;
  std::string cublas_error, cublas_version;
  try {
    cublas.emplace();
    cublas_version = cublas->version();
  } catch (const Error &e) {
    cublas_error = e.what();
  }

  BenchReport r;
  r.date = utc_now();
  r.pipeline = g.name;
  r.file = file;
  r.mode = mode_text;
  r.arithmetic = arithmetic;
  r.dims = dims;
  r.device = device;
  r.cublas_version = cublas_version;
  r.compute_capability = driver.compute_capability();
  r.driver_version = driver.driver_version();
  r.warmup = warmup;
  r.iters = iters;
  r.gemms = gemms;
  r.flop = flop;
  r.peak = peak;
  r.min_bytes = min_bytes;
  Contender &c_fused = r.fused, &c_unfused = r.unfused, &c_cublas = r.cublas;
  c_cublas.label = fmt::format("cuBLAS GEMM alone ({})",
                               arithmetic.half() ? std::string(ir::dtype_name(arithmetic.operands))
                               : tf32            ? "tf32"
                                                 : "fp32");
  c_unfused.kernels = static_cast<int64_t>(unfused_plan.kernels.size());
  c_unfused.bytes_moved = plan::bytes_moved(unfused_plan, dims);
  c_fused.kernels = static_cast<int64_t>(fused_plan.kernels.size());
  c_fused.bytes_moved = plan::bytes_moved(fused_plan, dims);
  c_cublas.bytes_moved = cublas_bytes;
  if (tf32)
    c_unfused.note = "kfuse's own kernels compute in fp32; only the GEMM (cuBLAS) runs at tf32";
  if (options.precision == Precision::BF16)
    c_unfused.note = "each op one kernel, as PyTorch eager runs it under torch.autocast: every "
                     "rounding to bf16 a kernel of its own (weights too, every run), the GEMM "
                     "cuBLAS's on bf16 operands with a bf16 product, the other ops in fp32";
  else if (arithmetic.half())
    c_unfused.note = fmt::format(
        "each op one kernel, as PyTorch eager runs it: every result stored in its own type ({} "
        "between ops) and read back, kfuse's kernels computing in fp32, the GEMM cuBLAS's on {} "
        "operands; unlike PyTorch, linear's bias is a kernel of its own rather than cuBLAS's "
        "epilogue",
        ir::dtype_name(arithmetic.operands), ir::dtype_name(arithmetic.operands));

  // --- cuBLAS GEMM alone: operands that are not declared tensors (a GEMM fed by another op)
  // get random scratch data of their shape.
  std::map<ir::ValueId, DeviceTensor> scratch;
  std::vector<DeviceTensor> gemm_outputs;
  auto operand = [&](ir::ValueId id) -> const void * {
    if (!g[id].is_op())
      return declared.at(g[id].name).data();
    auto it = scratch.find(id);
    if (it == scratch.end())
      it = scratch
               .emplace(id, random_tensor({g[id].name, exec::DeclaredTensor::Kind::Input,
                                           type_of(g[id].type)},
                                          dims, seed * 7919u + static_cast<uint64_t>(id)))
               .first;
    return it->second.data();
  };
  // Each GEMM as the pipeline declares it: its operand type in, its product's type out.
  std::function<void(CUstream)> run_cublas;
  if (gemms.empty()) {
    c_cublas.supported = false;
    c_cublas.reason = "the pipeline has no GEMM (linear or matmul)";
  } else if (!cublas) {
    c_cublas.error = cublas_error;
  } else {
    for (const GemmShape &s : gemms)
      gemm_outputs.push_back(make_tensor({s.m, s.n}, api_dtype(s.result)));
    std::vector<const void *> as, bs;
    for (const GemmShape &s : gemms) {
      as.push_back(operand(s.a));
      bs.push_back(operand(s.b));
    }
    run_cublas = [&, as, bs](CUstream st) {
      for (size_t i = 0; i < gemms.size(); ++i) {
        const GemmShape &s = gemms[i];
        cublas->gemm(math, {s.operands, s.result}, s.trans_b, s.m, s.n, s.k, as[i], s.k, bs[i],
                     s.trans_b ? s.k : s.n, gemm_outputs[i].data(), s.n, st);
      }
    };
  }

  // --- unfused: kfuse's per-op kernels in fp32 storing each result in its type, GEMMs through
  // cuBLAS at the precision asked (on the pipeline's bf16/f16 operands where it has them).
  std::optional<Pipeline> unfused;
  std::vector<DeviceTensor> unfused_out = make_outputs();
  if (!gemms.empty() && !cublas) {
    c_unfused.error = "its GEMMs need cuBLAS: " + cublas_error;
  } else {
    try {
      unfused.emplace(rt::PipelineAccess::compile(build_executable(unfused_lowered)));
      if (cublas)
        rt::PipelineAccess::set_gemm_hook(*unfused, [&](const rt::GemmCall &c, CUstream st) {
          cublas->gemm(math, {ir_dtype(c.operands), ir_dtype(c.result)}, c.trans_b, c.m, c.n, c.k,
                       c.a, c.lda, c.b, c.ldb, c.c, c.ldc, st);
        });
      bind_all(*unfused);
      c_unfused.compile_ms = unfused->report().milliseconds;
      c_unfused.cache_hit = unfused->report().cache_hit;
    } catch (const Error &e) {
      c_unfused.error = e.what();
      unfused.reset();
    }
  }

  // --- fused: only where kfuse implements the precision; otherwise say why, time nothing.
  std::optional<Pipeline> fused;
  std::vector<DeviceTensor> fused_out = make_outputs();
  try {
    require_supported(options.precision);
  } catch (const Error &e) {
    c_fused.supported = false;
    c_fused.reason = e.what();
  }
  if (c_fused.supported) {
    try {
      fused.emplace(rt::PipelineAccess::compile(fused_executable));
      bind_all(*fused);
      c_fused.compile_ms = fused->report().milliseconds;
      c_fused.cache_hit = fused->report().cache_hit;
    } catch (const Error &e) {
      c_fused.error = e.what();
      fused.reset();
    }
  }

  // --- timing: the contenders' runs interleaved on the same stream and data (time_interleaved).
  // A trial run of each first, so a contender that fails is dropped with its own error.
  L2Flush flush;
  r.l2_bytes = flush.l2_bytes();
  r.flush_bytes = flush.bytes();
  std::vector<Contender *> timed;
  std::vector<std::function<void(CUstream)>> works;
  auto enter = [&](Contender &c, std::function<void(CUstream)> work) {
    if (!c.supported || !c.error.empty() || !work)
      return;
    try {
      work(stream.handle());
      stream.synchronize();
      timed.push_back(&c);
      works.push_back(std::move(work));
    } catch (const Error &e) {
      c.error = e.what();
    }
  };
  const std::vector<Tensor> unfused_tensors = tensors_of(unfused_out),
                            fused_tensors = tensors_of(fused_out);
  enter(c_cublas, run_cublas);
  if (unfused)
    enter(c_unfused, [&](CUstream st) { unfused->run(inputs, unfused_tensors, st); });
  if (fused)
    enter(c_fused, [&](CUstream st) { fused->run(inputs, fused_tensors, st); });
  if (!works.empty()) {
    try {
      std::vector<rt::TimingStats> stats =
          time_interleaved(stream.handle(), works, warmup, iters, flush);
      for (size_t i = 0; i < timed.size(); ++i)
        timed[i]->timing = std::move(stats[i]);
    } catch (const Error &e) {
      for (Contender *c : timed)
        c->error = std::string("timing the contenders together failed: ") + e.what();
    }
  }
  if (c_fused.timing)
    c_fused.gemm_launches = rt::PipelineAccess::gemm_launches(*fused);

  // Fused and unfused compute the same function of the same inputs (train-mode outputs do not
  // read the running stats both update), so their last outputs must agree: a fast wrong
  // kernel shows here.
  if (c_fused.timing && c_unfused.timing) {
    Agreement a;
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < fused_out.size(); ++i) {
      std::vector<double> f = download(fused_out[i]), u = download(unfused_out[i]);
      for (size_t j = 0; j < f.size(); ++j) {
        double d = static_cast<double>(f[j]) - static_cast<double>(u[j]);
        a.max_abs = std::max(a.max_abs, std::fabs(d));
        diff2 += d * d;
        ref2 += static_cast<double>(u[j]) * static_cast<double>(u[j]);
      }
    }
    a.rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    a.bound = 2 * rt::error_bound(options.precision, g);
    r.agreement = a;
  }

  std::fputs(report_text(r).c_str(), stdout);
  std::fflush(stdout);
  if (!json_path.empty()) {
    std::ofstream f(json_path, std::ios::binary);
    f << report_json(r);
    f.close();
    if (!f)
      throw Error("cannot write '" + json_path + "'");
  }

  // Unsupported is an answer; a failure, or outputs that disagree, is not.
  for (const Contender *c : r.contenders())
    if (c->supported && !c->timing)
      return 1;
  return r.agreement && !r.agreement->agrees() ? 1 : 0;
}

} // namespace kfuse::tool
