// Transposed copies rounded to tf32 (select::TransposeSpec::round_tf32): a copy that only GEMMs
// on tf32 operands read is stored rounded to nearest, where the Hopper tensor cores would
// truncate it; copies that fp32 or 3xtf32 GEMMs, other kernels or the caller read keep every bit.
#include "compiler/build_executable.h"
#include "compiler/dsl/diagnostics.h"
#include "compiler/lower.h"

#include <doctest/doctest.h>

#include <string>

using namespace kfuse;

namespace {

size_t count(const std::string &s, const std::string &part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1))
    ++n;
  return n;
}

LowerOptions train_on_hopper(Precision p) {
  LowerOptions o;
  o.mode = ir::Mode::Train;
  o.target.arch = "sm_90a";
  o.target.precision = p;
  return o;
}

// dX = g W reads W transposed; dW = g^T x reads g and x transposed.
const char *kLinearRelu = "pipeline lr {\n  dim N\n  input x: f32[N, 64]\n"
                          "  param w: f32[32, 64]\n  param b: f32[32]\n"
                          "  return relu(linear(x, w, b))\n}\n";

} // namespace

TEST_CASE("lower: at tf32, the backward's transposed GEMM operands are stored rounded to tf32, "
          "and the GEMM configs say so") {
  const LoweredTraining t =
      lower_training(dsl::SourceFile("lr.kf", kLinearRelu), train_on_hopper(Precision::TF32));
  const std::string &cu = t.backward.program.source;
  CHECK(count(cu, "kf::transpose_tile<true>(") == 3);
  CHECK(count(cu, "kf::transpose_tile(") == 0);
  bool said = false;
  for (const codegen::KernelLaunch &l : t.backward.program.launches)
    said = said || l.config.find("to tf32 (nearest), which the tensor cores would truncate") !=
                       std::string::npos;
  CHECK(said);
}

TEST_CASE("lower: 3xtf32 GEMMs read transposed copies with every bit, fp32 ones need none") {
  for (Precision p : {Precision::FP32, Precision::FP32x3}) {
    CAPTURE(static_cast<int>(p));
    const LoweredTraining t =
        lower_training(dsl::SourceFile("lr.kf", kLinearRelu), train_on_hopper(p));
    CHECK(count(t.backward.program.source, "kf::transpose_tile<true>(") == 0);
    CHECK(count(t.backward.program.source, "kf::transpose_tile(") ==
          (p == Precision::FP32x3 ? 3 : 0));
  }
}

TEST_CASE("lower: a transposed copy a tf32 GEMM reads is rounded unless the caller gets it too") {
  LowerOptions o = train_on_hopper(Precision::TF32);
  o.mode = ir::Mode::Eval;
  auto source = [](const char *returns) {
    return std::string("pipeline tr {\n  dim N\n  input a: f32[64, N]\n  param w: f32[32, 64]\n"
                       "  at = transpose(a)\n  return ") +
           returns + "\n}\n";
  };
  const Lowered read = lower(dsl::SourceFile("tr.kf", source("linear(at, w)")), o);
  CHECK(count(read.program.source, "kf::transpose_tile<true>(") == 1);
  const Lowered returned = lower(dsl::SourceFile("tr.kf", source("at, linear(at, w)")), o);
  CHECK(count(returned.program.source, "kf::transpose_tile<true>(") == 0);
  CHECK(count(returned.program.source, "kf::transpose_tile(") == 1);
}
