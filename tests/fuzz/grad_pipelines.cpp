// Reverse mode on generated pipelines (tests/support/random_pipelines.h): for each seed, in
// train and eval mode, the backward graph's gradients against central finite differences of the
// forward in float64 (tests/support/grad_check.h), for a given time.
//
//   kfuse_grad_pipelines SECONDS [--first-seed S]
//   kfuse_grad_pipelines --replay SEED [FILE]
//
// --replay checks the pipeline of seed SEED, or the one in FILE (a finding cut down) with the
// tensors of that seed.
//
// Pipelines are f32 throughout (a rounding to bf16/f16/tf32 is a step a difference quotient
// cannot follow: a pipeline with a cast to one or a round_tf32 is skipped) without special
// literals. Every op the generator draws has a rule (compiler/ir/vjp.h), the pools and groupnorm
// included; a pipeline whose backward graph grad refuses (a GradError: a saved value no declaration
// can hold, an op without a rule) or that the interpreter refuses at the chosen size is counted as
// skipped, by reason. max_pool1d's rule gives a tied window's gradient to its first maximum as
// PyTorch does, where a difference quotient splits it; random inputs tie only where one value is
// broadcast (it moves as one) or an op saturates (relu's zeros: its own derivative is 0 there), and
// there the two agree. Rounding can also make a tie the exact function does not have (a logsumexp
// of huge values equal to its largest element, compared with it by maximum: seed 94364025); there
// the rule's half-and-half split and the difference quotient differ by the other elements' tiny
// weights, which is no rule's error. Exit status 1 when any check failed; each failure prints
// its seed, the pipeline and the command that replays it.
#include "compiler/dsl/parser.h"
#include "compiler/ir/views.h"
#include "tests/support/grad_check.h"
#include "tests/support/random_pipelines.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

namespace {

// A message by kind, not by value: "grad: 'v8' (%8, sum) of type ..." reads "grad: sum of type
// ...", and a gradient input 'grad_3' reads p.
std::string by_kind(const std::string &what) {
  std::string out;
  for (size_t i = 0; i < what.size();) {
    const size_t close = what[i] == '\'' ? what.find('\'', i + 1) : std::string::npos;
    if (close != std::string::npos && what.compare(close + 1, 3, " (%") == 0) {
      const size_t comma = what.find(", ", close), end = what.find(')', close);
      if (comma != std::string::npos && end != std::string::npos && comma < end) {
        out += what.substr(comma + 2, end - comma - 2);
        i = end + 1;
        continue;
      }
    }
    if (close != std::string::npos && what.compare(i, 6, "'grad_") == 0) {
      out += "p";
      i = close + 1;
      continue;
    }
    out += what[i++];
  }
  return out;
}

using namespace kfuse;

// The bound on gradient_error (tests/support/grad_check.cpp): central differences with step
// 1e-6 carry a truncation error near 1e-12 and a rounding error near 1e-16 |L| / 1e-6 relative
// to gradients of order 1; chains of a few normalizations, softmaxes and divisions amplify both
// by their condition number, which on these sizes stays below 1e3.
constexpr double kBound = 1e-6;

std::string pipeline_text(uint64_t seed) {
  testing::SeededChoices choices(seed);
  testing::PipelineShape shape;
  shape.min_ops = 2;
  shape.max_ops = 7;
  shape.mixed_types = false;
  shape.special_literals = false;
  return testing::random_pipeline(choices, shape, fmt::format("grad_{}", seed));
}

// Whether two checks' finite differences agree tensor by tensor within kBound.
bool differences_agree(const testing::GradReport &a, const testing::GradReport &b) {
  for (size_t t = 0; t < a.differences.size(); ++t)
    if (!(testing::gradient_error(a.differences[t], b.differences.at(t), 0) <= kBound))
      return false;
  return true;
}

// Whether a std of the forward run that the check makes is 0 somewhere (a constant slice):
// sqrt is not differentiable at 0, where PyTorch's gradient is inf or NaN and a difference
// quotient sees |x|.
bool std_at_zero(const ir::Graph &g, ir::Mode mode, const ir::DimBindings &dims, uint64_t seed) {
  const ir::TensorMap tensors = ir::random_tensors(g, dims, seed);
  ir::Interpreter in(g, mode, dims, tensors, testing::kGradCheckRng);
  in.eval_all();
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].is_op() && g.values[i].op == ir::OpKind::Std)
      for (double x : in.value(static_cast<ir::ValueId>(i)).data)
        if (x <= 1e-6)
          return true;
  return false;
}

enum class Outcome { Ok, Skipped, Failed };

// One pipeline, both modes; prints what failed.
Outcome check(uint64_t seed, const std::string &text, const char *self,
              std::map<std::string, int> &skips) {
  dsl::SourceFile src("generated.kf", text);
  dsl::Diagnostics diags(src);
  ir::Graph g = dsl::parse_kf(src, diags);
  for (const ir::Value &v : g.values)
    if ((v.type.rank() > 0 && v.type.dtype != ir::DType::F32) || // a cast to bf16 / f16
        (v.is_op() && v.op == ir::OpKind::RoundTf32)) {
      ++skips["a rounding to bf16, f16 or tf32: a step function to finite differences"];
      return Outcome::Skipped;
    }
  ir::DimBindings dims = ir::view_consistent_dims(g, 3);
  Outcome outcome = Outcome::Ok;
  for (ir::Mode mode : {ir::Mode::Train, ir::Mode::Eval}) {
    std::string failure;
    try {
      if (std_at_zero(g, mode, dims, seed)) {
        ++skips["a std of a constant slice: sqrt is not differentiable at 0"];
        return Outcome::Skipped;
      }
      testing::GradReport r = testing::check_gradients(g, mode, dims, seed, 8);
      // A kink (relu at 0, maximum at a tie) within a step, or a function so ill-conditioned
      // there that rounding dominates its differences (train-mode batchnorm of a column that is
      // constant up to rounding), is no rule's error: the check fails only where a step ten
      // times smaller fails too and both steps' differences agree with each other.
      if (!(r.error <= kBound)) {
        testing::GradReport smaller =
            testing::check_gradients(g, mode, dims, seed, 8, testing::kStep / 10);
        if (smaller.error <= kBound)
          continue;
        if (!differences_agree(smaller, r)) {
          ++skips["finite differences that change with the step (a kink or ill-conditioning)"];
          continue;
        }
      }
      if (!(r.error <= kBound))
        failure =
            fmt::format("gradient of '{}' off by {:.3g} (bound {:.0e})", r.worst, r.error, kBound);
    } catch (const ir::GradError &e) {
      const std::string kind = by_kind(e.what());
      ++skips[e.op ? fmt::format("no rule for {}", ir::op_info(*e.op).name)
                   : kind.substr(0, kind.find(" of type")) +
                         kind.substr(kind.find(": a decl") == std::string::npos
                                         ? kind.size()
                                         : kind.find(": a decl"))];
      return Outcome::Skipped;
    } catch (const ir::InterpretError &e) {
      ++skips[fmt::format("interpreter: {}", e.what())];
      return Outcome::Skipped;
    } catch (const std::exception &e) {
      failure = e.what();
    }
    if (!failure.empty()) {
      std::printf("seed %llu, %s mode: %s\n%s  replay: %s --replay %llu\n\n",
                  static_cast<unsigned long long>(seed), std::string(ir::mode_name(mode)).c_str(),
                  failure.c_str(), text.c_str(), self, static_cast<unsigned long long>(seed));
      outcome = Outcome::Failed;
    }
  }
  return outcome;
}

} // namespace

int main(int argc, char **argv) {
  std::map<std::string, int> skips;
  if ((argc == 3 && std::string(argv[1]) == "--replay") ||
      (argc == 4 && std::string(argv[1]) == "--replay")) {
    uint64_t seed = std::strtoull(argv[2], nullptr, 10);
    std::string text = pipeline_text(seed);
    if (argc == 4) { // a finding cut down by hand
      std::ifstream in(argv[3]);
      text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    std::printf("%s", text.c_str());
    Outcome o = check(seed, text, argv[0], skips);
    for (const auto &[why, n] : skips)
      std::printf("skipped: %s\n", why.c_str());
    std::printf("%s\n", o == Outcome::Failed ? "failed" : o == Outcome::Skipped ? "skipped" : "ok");
    return o == Outcome::Failed ? 1 : 0;
  }
  if (argc != 2 && !(argc == 4 && std::string(argv[2]) == "--first-seed")) {
    std::fprintf(stderr, "usage: %s SECONDS [--first-seed S] | --replay SEED [FILE]\n", argv[0]);
    return 2;
  }
  const double seconds = std::atof(argv[1]);
  uint64_t seed = argc == 4 ? std::strtoull(argv[3], nullptr, 10) : 1;
  const auto start = std::chrono::steady_clock::now();
  int ok = 0, skipped = 0, failed = 0;
  for (; std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds;
       ++seed) {
    Outcome o = check(seed, pipeline_text(seed), argv[0], skips);
    (o == Outcome::Ok ? ok : o == Outcome::Skipped ? skipped : failed)++;
  }
  std::printf("%d pipelines: %d ok, %d skipped, %d failed\n", ok + skipped + failed, ok, skipped,
              failed);
  for (const auto &[why, n] : skips)
    std::printf("  skipped %d: %s\n", n, why.substr(0, why.find('\n')).c_str());
  return failed ? 1 : 0;
}
