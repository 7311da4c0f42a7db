// Runs a pipeline on the GPU on random inputs (or the user's, from .npy files) and compares it
// with the fp64 reference interpreter: what `kfuse run` prints and what the GPU tests assert.
#pragma once

#include "compiler/ir/interpreter.h"
#include "kfuse/kfuse.h"

#include <string>
#include <vector>

namespace kfuse::rt {

struct CheckEntry {
  std::string name; // "out0", or a state's name
  double max_abs = 0;
  double relative = 0; // ||gpu - ref|| / ||ref||
  bool finite = true;  // no NaN or Inf in the GPU result (outputs are poisoned first)
  // Elements zero in one of the GPU result and the reference but not in the other: a dropout
  // whose mask differs from the interpreter's shows here.
  int64_t zero_mismatches = 0;
  // A gradient's (--backward), negative where not measured. `relative` is end to end: the
  // reference's backward reads the reference forward's saved values. `given_saved_relative` is
  // against the reference's backward on the values the GPU's forward saved: the backward alone,
  // on its own inputs. On those, the relative errors of the GPU result and of the reference
  // against the interpreter's exact values (ir::Rounding::None), the latter being what the
  // graph's own casts to bf16 or f16 cost.
  double given_saved_relative = -1, exact_relative = -1, reference_relative = -1;
  // A gradient that sums over the batch: its distance from the reference given the GPU's saved
  // values, relative to the sum of its terms' magnitudes (negative where not measured).
  double summed_relative = -1;

  // Finite, and within `bound` of the reference end to end or given the GPU's saved values (a
  // gradient that cancels, such as a softmax's scale's, amplifies the forward's rounding in what
  // it reads, which the forward's own check judges), or no more than 1.5x as far from the
  // exact values as the reference, or a sum over the batch within `bound` of its terms'
  // magnitudes: a gradient that is a sum of rounded terms cancelling to almost nothing (a bias
  // before train-mode batchnorm) is that rounding's noise, the GPU's and the reference's alike.
  bool within(double bound) const {
    return finite && (relative <= bound || within_given_saved(bound) ||
                      (reference_relative >= 0 && exact_relative <= 1.5 * reference_relative) ||
                      within_summed(bound));
  }
  bool within_summed(double bound) const {
    return summed_relative >= 0 && summed_relative <= bound;
  }
  bool within_given_saved(double bound) const {
    return given_saved_relative >= 0 && given_saved_relative <= bound;
  }
};

struct CheckResult {
  std::vector<CheckEntry> entries;
  std::vector<std::string> files; // the .npy files written (save_dir, or inputs_dir alone)
};

struct CheckRequest {
  std::string kf_text;
  std::string file_name;
  Options options;
  ir::DimBindings dims;
  uint64_t seed = 1;
  int steps = 1; // runs back to back; state carries over (train-mode running stats)
  // The dropout stream of the first step (Pipeline::set_rng); each step advances its offset.
  RngState rng = {};
  std::string save_dir; // non-empty: write every tensor there as .npy (see docs/PERF.md)
  // Non-empty: every input, param and state from <inputs_dir>/<name>.npy instead of random
  // data (dims bound by them; `dims` must agree); the outputs (out0.npy, ...) and the updated
  // state (<name>.out.npy) are written there too unless save_dir is given.
  std::string inputs_dir;
  // false: skip the CPU interpreter (too slow at the founding sizes; an external reference
  // such as PyTorch in float64 judges the saved tensors). Results are then only checked to be
  // finite, and their `relative` is 0.
  bool reference = true;
  // Set for a pipeline compiled with Options::backward (checked as its forward that saves, the
  // graph passed with the pipeline): after the last step, its backward() on random output
  // gradients, every gradient ("grad <name>") checked against the fp64 interpreter's run of
  // `backward`, the backward graph as lowered, on the reference's saved values and on those the
  // GPU's run saved (CheckEntry::within), the declared tensors as that step read them and its
  // dropout stream. Its inputs `grad_inputs` and `saved` are the gradients of the outputs and the
  // forward's further outputs (TrainingSources).
  struct Backward {
    const ir::Graph *graph = nullptr;
    std::vector<std::string> grad_inputs, saved;
  } backward;
};

// Throws kfuse::Error when the GPU is unavailable or the pipeline is rejected.
CheckResult check_against_reference(const CheckRequest &req);
// The same for `pipeline`, compiled from req.kf_text with req.options already, against
// `reference`, its graph as lowered (Lowered::graph: kfuse run lowers the file once, and takes
// its dims from the same graph).
CheckResult check_against_reference(Pipeline &pipeline, const ir::Graph &reference,
                                    const CheckRequest &req);

// The error bound of a precision (DESIGN.md: fp32 and 3xtf32 1e-5, tf32 5e-3, bf16 2e-2).
double error_bound(Precision p);
// The bound of pipeline `g` at precision p: the precision's, or bf16's 2e-2 (for f16 too)
// where a declaration or an output is bf16 or f16.
double error_bound(Precision p, const ir::Graph &g);

} // namespace kfuse::rt
