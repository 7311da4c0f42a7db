// The operator set: every op the DSL names, with its arity and attributes.
//
// User ops are what a .kf file is written with. Internal ops are what the planner's
// passes rewrite user ops into; they are also valid .kf, so every IR the planner
// produces prints as a file that parses back (and `--dump-after-each-pass` output can
// be fed to `kfuse check`).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace kfuse::ir {

enum class OpKind : uint8_t {
  // user ops
  Linear,     // linear(x[N,K], weight[M,K], bias[M]?) = x @ weight^T (+ bias)
  Matmul,     // matmul(a[N,K], b[K,M]) = a @ b
  BatchNorm,  // batchnorm(x[N,C], weight?, bias?, running_mean, running_var; eps, momentum)
  Add,        // elementwise with broadcasting of [1] and per-feature [C]
  Sub,
  Mul,
  Div,
  Relu,
  Gelu,       // exact (erf) form, PyTorch's default
  Sigmoid,
  Tanh,
  Silu,
  Softmax,    // softmax(x; dim)
  LogSoftmax, // log_softmax(x; dim)
  // internal ops
  ColMean,    // col_mean(y[N,C]) -> [C]: mean over rows
  ColVar,     // col_var(y[N,C]) -> [C]: biased variance over rows
  Rsqrt,      // rsqrt(x) elementwise
  ColAffine,  // col_affine(y[N,C], alpha, beta) = y * alpha[j] + beta[j]; alpha/beta are [C] or [1]
  BnUpdate,   // bn_update(running_mean, running_var, mean, var; momentum, count): effect, no value
  Constant,   // constant(; value, dtype) -> dtype[1]
};

// What kind of computation an op is; the planner and the code generator dispatch on it.
enum class OpClass : uint8_t { Gemm, Norm, Binary, Unary, Row, ColReduce, ColAffine, Effect, Constant };

// Extent: a dim name or a positive integer (`count=N`, `count=64`). DType: a type name
// (`dtype=f32`), held in AttrValue::dim.
enum class AttrKind : uint8_t { Number, Int, Extent, DType };

struct AttrSpec {
  std::string_view name;
  AttrKind kind;
  std::optional<double> default_value; // nullopt: required
};

struct OpInfo {
  OpKind kind;
  std::string_view name; // as written in .kf
  OpClass cls;
  int min_args;
  int max_args;
  std::vector<AttrSpec> attrs; // in canonical (printed) order
  bool internal;
};

const OpInfo &op_info(OpKind k);
std::optional<OpKind> op_by_name(std::string_view name);
const std::vector<OpInfo> &all_ops();

} // namespace kfuse::ir
