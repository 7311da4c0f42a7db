// The reference interpreter: executes an IR graph on the CPU in double precision.
//
// It is the definition of correctness for everything downstream: the planner's passes
// must preserve what it computes, and GPU results are compared against it.
//
// State semantics: every read of a state buffer sees its value at entry to the run;
// updates (train-mode batchnorm, bn_update) are written back to the caller's tensors when
// the run ends. This matches PyTorch, whose BatchNorm output never depends on the running
// statistics it updates in the same forward pass.
#pragma once

#include "kfuse/error.h"

#include "compiler/ir/graph.h"

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace kfuse::ir {

struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<double> data; // row-major

  int64_t numel() const;
};

using TensorMap = std::map<std::string, HostTensor>; // by declared name

// A concrete shape as text, "[1024, 8192]" (messages and JSON alike).
std::string shape_text(const std::vector<int64_t> &shape);
using DimBindings = std::map<std::string, int64_t>;

// Concrete extents of `t` under `dims`; throws kfuse::ir::InterpretError naming an unbound dim.
std::vector<int64_t> concrete_shape(const TensorType &t, const DimBindings &dims);
// One extent under `dims`; `where` names what it belongs to in the error of an unbound dim.
int64_t concrete_extent(const Dim &d, const DimBindings &dims, const std::string &where);

struct InterpretError : kfuse::Error {
  using kfuse::Error::Error;
};

struct OpRun;

// Declared: a cast rounds to its element type (round_tf32 to tf32), outputs and state updates to
// theirs, as a GPU run stores them. None: casts to a floating type, round_tf32, outputs and
// state updates keep every fp64 bit
// (the exact values, against which a check measures what the declared rounding costs).
enum class Rounding { Declared, None };

class Interpreter {
public:
  // `tensors` must hold every input, param and state of `g` with its concrete shape
  // (checked: a missing tensor or wrong shape throws InterpretError naming it).
  // They are read in place, not copied (a weight can be hundreds of MiB): like `g`, `tensors`
  // must outlive the interpreter and stay unchanged while it is used.
  // `rng`: where train-mode dropouts draw (templates/dropout.cuh).
  Interpreter(const Graph &g, Mode mode, DimBindings dims, const TensorMap &tensors,
              RngState rng = {}, Rounding rounding = Rounding::Declared);

  // Computes one value; its arguments must have been computed already.
  void eval(ValueId id);
  // Computes every value in order.
  void eval_all();
  bool computed(ValueId id) const;
  const HostTensor &value(ValueId id) const; // throws InterpretError if not computed
  // An output as a kernel stores it: value(id) rounded once to the output's element type.
  HostTensor output(ValueId id) const;
  // The state updates made so far, by state name, each rounded to the state's element type.
  const TensorMap &state_updates() const { return updates_; }

  // Batch statistics exchanged across ranks (plan::execute_plan_ranks): `every_rank` is matrix
  // `m` (a value no view is of: its matrix view's rows) of every rank, rows in rank order. A
  // batch statistic of m (is_batch_statistic) computed after this call is taken over those rows,
  // as every rank's is, and a bn_update of such statistics counts them; a `local` one stays
  // this run's own.
  void exchange(ValueId m, HostTensor every_rank);
  // The rows exchange() gave for `m`, or null.
  const HostTensor *exchanged(ValueId m) const;

private:
  // A temporary map would leave the interpreter reading freed tensors.
  Interpreter(const Graph &g, Mode mode, DimBindings dims, TensorMap &&tensors, RngState rng = {},
              Rounding rounding = Rounding::Declared) = delete;
  const HostTensor &tensor(ValueId id) const; // a declaration's or a computed op's value
  // Records `t` as the new value of `state`, written by `op`; a second op updating the same
  // state is an error, since every update is computed from entry values.
  void record_update(ValueId op, ValueId state, HostTensor t);
  friend struct OpRun; // the class semantics record state updates through it

  const Graph &g_;
  Mode mode_;
  RngState rng_;
  Rounding rounding_;
  DimBindings dims_;
  std::vector<const HostTensor *> declared_; // into the caller's map; null for ops
  std::vector<HostTensor> values_;           // op results; empty for declarations
  std::vector<bool> done_;
  TensorMap updates_;
  std::map<std::string, ValueId> updated_by_; // state name -> the op that updated it
  std::map<ValueId, HostTensor> exchanged_;   // matrix -> every rank's rows (exchange())
};

// Runs the whole graph: returns the outputs in order (Interpreter::output) and writes state
// updates into `tensors`.
std::vector<HostTensor> interpret(const Graph &g, Mode mode, const DimBindings &dims,
                                  TensorMap &tensors, RngState rng = {},
                                  Rounding rounding = Rounding::Declared);

// Random tensors for every input, param and state of `g`: standard normal values, except
// running variances (states used as batchnorm's running_var), uniform in [0.5, 1.5], and
// GEMM weights, whose standard deviation is 1/sqrt(fan_in) as PyTorch initializes a Linear.
// Each value is rounded to its tensor's element type (round_to), as the data a GPU run gets.
// Deterministic in `seed`.
TensorMap random_tensors(const Graph &g, const DimBindings &dims, uint64_t seed);

// Norm-wise relative error (tests and `kfuse run`): ||a - b|| / ||b||; where b is zero up to
// fp64 rounding (a value zero in exact arithmetic), the root mean square of a - b instead.
double relative_error(const std::vector<double> &a, const std::vector<double> &b);

} // namespace kfuse::ir
