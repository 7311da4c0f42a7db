// What CI proves of a generated pipeline (tests/support/random_pipelines.h): in both modes it
// plans (fused and unfused, the validator inside), agrees with the reference interpreter after
// every pass and as a plan, and generates CUDA source. Shared by the unit test and the
// on-demand run of tests/fuzz/run.sh, so both check the same things.
#pragma once

#include <cstdint>
#include <string>

namespace kfuse::testing {

enum class Verdict {
  Ok,
  InternalError, // a message that says "internal error": the compiler's own bug
  Disagreement,  // a pass or the plan changed what the pipeline computes
  // A disagreement only on inputs with special values (compiler/plan/agreement.h), where a
  // per-feature vector computed from them (a column mean used as a scale) is infinite or huge,
  // or a product near the type's range overflows in one order only: folds distribute vectors
  // over sums and reassociate products, exact in real arithmetic but not there
  // (inf * (y - mean(y)) at y = mean(y)). Kept apart from the disagreements on random data.
  SpecialValues,
  Rejected, // any other error on a pipeline the language accepts
};

struct CheckResult {
  Verdict verdict = Verdict::Ok;
  std::string detail; // the mode, size and stage or message of the first failure
};

// Rows N = `rows`, every other dim 3; the proof's tensors drawn from `seed`.
CheckResult check_generated(const std::string &text, int64_t rows, uint64_t seed);

} // namespace kfuse::testing
