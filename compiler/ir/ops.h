// The op table: every op the DSL names, defined once.
//
// An entry holds the op's name, its operands, its attributes (kind, default, range), its
// class (which fixes its shape rule, its fp64 semantics and how it is planned: the class traits
// of compiler/ir/op_class.h), and for pointwise ops its
// fp64 reference semantics (compiler/ir/pointwise.h) and its CUDA expression (functions of
// templates/math.cuh). The parser, its "did you mean", the verifier, the interpreter,
// constant folding, the planner's classification, the code generator and the op reference
// of docs/DSL.md (checked by a test) all read this table.
//
// User ops are what a .kf file is written with. Internal ops are what the planner's
// passes rewrite user ops into; they are also valid .kf, so every IR the planner
// produces prints as a file that parses back.
#pragma once

#include "compiler/ir/types.h"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kfuse::ir {

// In table order (checked at compile time in ops.cpp).
enum class OpKind : uint8_t {
  // matrix
  Linear,
  Matmul,
  MatmulTN,
  // batch normalization
  BatchNorm,
  // pointwise binary
  Add,
  Sub,
  Mul,
  Div,
  Maximum,
  Minimum,
  Pow,
  // pointwise unary
  Relu,
  LeakyRelu,
  Gelu,
  Silu,
  Sigmoid,
  Tanh,
  Hardtanh,
  Clamp,
  Hardsigmoid,
  Hardswish,
  Mish,
  Softplus,
  Elu,
  Selu,
  LogSigmoid,
  Softsign,
  Exp,
  Log,
  Abs,
  Neg,
  Sqrt,
  Rsqrt,
  Square,
  Reciprocal,
  // row normalization
  Softmax,
  LogSoftmax,
  // feature normalization
  LayerNorm,
  RmsNorm,
  GroupNorm,
  InstanceNorm,
  // reduction
  Sum,
  Mean,
  Max,
  Min,
  Amax,
  Amin,
  Logsumexp,
  Var,
  Std,
  // pooling
  MaxPool1d,
  AvgPool1d,
  // loss
  CrossEntropy,
  // random
  Dropout,
  // view
  Reshape,
  Unsqueeze,
  Squeeze,
  // internal
  ColMean,
  ColVar,
  ColSum,
  ColAffine,
  BnUpdate,
  Cast,
  RoundTf32,
  Greater,
  GreaterEqual,
  Erf,
  Transpose,
  MaxPool1dBackward,
  AvgPool1dBackward,
  GroupNormBackward,
  CrossEntropyRows,
  CrossEntropyBackward,
  Constant,
};
inline constexpr size_t kOpCount = static_cast<size_t>(OpKind::Constant) + 1;

// What kind of computation an op is; it fixes the shape rule, and the planner and the
// code generator dispatch on it through its traits (compiler/ir/op_class.h,
// compiler/codegen/class_codegen.h).
enum class OpClass : uint8_t {
  Gemm,      // matrix: [N, K] x weight -> [N, M]
  Norm,      // batch normalization: per-column statistics over the rows
  Binary,    // pointwise, two operands, broadcast
  Unary,     // pointwise, one operand, same shape
  Row,       // row normalization along `dim` (softmax)
  RowNorm,   // normalization over the feature axis with a per-feature affine (layernorm)
  Reduce,    // reduction along `dim`: [N, F] -> [N, 1] / [N] (dim=1) or [1, F] / [F] (dim=0)
  Pool,      // windows along the feature axis: [N, F] -> [N, (F - kernel_size) / stride + 1]
  PoolGrad,  // a pool's gradient gathered back over its windows: [N, W] -> [N, F]
  NormGrad,  // a feature normalization's input gradient: [N, F] -> [N, F]
  Loss,      // a loss of each row's logits against its class index: [N, C], i64[N] -> [N] / [1]
  LossGrad,  // a loss's gradient for the logits: [N, C], i64[N], [N] / [1] -> [N, C]
  Random,    // pointwise, one operand, drawing from the run's RNG (seed, offset) per element
  View,      // the same elements under another shape with the same feature axis: no kernel
  ColReduce, // column statistics: [N, C] -> [C]
  ColAffine, // per-column affine map of a matrix
  Transpose, // a matrix's rows as columns: [N, M] -> [M, N] (backward GEMMs' operands)
  Effect,    // no value; updates states
  Constant,  // no operands
};
std::string_view op_class_name(OpClass c); // "pointwise binary", ...

// Number: a finite double. Int: an integer. Extent: a positive integer, a dim name or a
// product of them (`count=N`, `count=B*T`), held as the one Dim of `shape`. DType: a type name
// (`dtype=f32`). Choice: one of a fixed set of words, written as a string (`approximate="tanh"`).
// OptNumber: a finite double or absent (PyTorch's None), held as the spec's infinite `number`
// default. Bool: `true` or `false`, held as 1 or 0. Shape: a bracketed list of extents, each a
// product of dim names and positive integers, or -1 (`shape=[B*T, -1]`), held in `shape`.
enum class AttrKind : uint8_t { Number, Int, Extent, DType, Choice, OptNumber, Bool, Shape };

// An attribute value: a number (`eps=1e-5`, `dim=1`), a word: a type name (`dtype=f32`) or a
// choice (`approximate="tanh"`), held in `dim`, or extents: a Shape, or an Extent as its one
// Dim (`count=B*T`), the representation tensor types use, so that whoever binds dims
// evaluates it as it evaluates a view's rows (Dim::evaluate).
struct AttrValue {
  AttrValue() = default;
  AttrValue(double n, std::string word = {}, std::vector<Dim> extents = {})
      : number(n), dim(std::move(word)), shape(std::move(extents)) {}
  static AttrValue extent(Dim d) { return {0, {}, {std::move(d)}}; }
  double number = 0;
  std::string dim;        // the word; empty when the value is the number
  std::vector<Dim> shape; // a Shape (-1 is the constant -1), or an Extent's one Dim
  bool operator==(const AttrValue &o) const {
    return number == o.number && dim == o.dim && shape == o.shape;
  }
};
using AttrMap = std::map<std::string, AttrValue>;

inline constexpr double kInf = std::numeric_limits<double>::infinity();
// Dropout streams take 16 bits of the Philox counter (templates/dropout.cuh).
inline constexpr int kMaxDropoutStream = 65535;

// The largest value of an `int`: integer attributes (kernel_size, stride, groups, a dim, a
// stream) are emitted into `int` arguments and template parameters of the generated code.
inline constexpr double kMaxKernelInt = 2147483647;

// The interval a Number, Int or OptNumber (when given) attribute must lie in; an infinite end
// is no bound. `integer`: the value must be an integer, and then within [-kMaxKernelInt,
// kMaxKernelInt] whatever the interval says (Int attributes always are).
struct Range {
  double lo = -kInf, hi = kInf;
  bool lo_open = false, hi_open = false;
  bool integer = false;
};

struct AttrSpec {
  std::string_view name;
  AttrKind kind;
  bool required;
  double number;            // the default (Number, Int, OptNumber: +-inf for "none")
  std::string_view choices; // Choice: the words, '|'-separated, the default first
  Range range;              // Number, Int, OptNumber
  // False: printed only where the value differs from the default (a mark few ops of the kind
  // carry, such as a column statistic's `local`), so the ops without it print as they did.
  bool printed_at_default = true;
};

// A read-only view of a table's array (C++17 has no std::span).
template <class T> struct Span {
  const T *first = nullptr;
  size_t count = 0;
  constexpr Span() = default;
  template <size_t N> constexpr Span(const T (&a)[N]) : first(a), count(N) {}
  constexpr const T *begin() const { return first; }
  constexpr const T *end() const { return first + count; }
  constexpr size_t size() const { return count; }
  constexpr bool empty() const { return count == 0; }
  constexpr const T &operator[](size_t i) const { return first[i]; }
};

// The fp64 semantics of a pointwise op: operands x and y (y unused by unary ops) and the
// attributes as numbers in table order (a Choice as the index of its word).
using ScalarFn = double (*)(double x, double y, const double *attr);
// The fp64 semantics of a reduction: the n values x[0], x[stride], ..., x[(n-1)*stride] and the
// attributes as numbers in table order.
using ReduceFn = double (*)(const double *x, int64_t n, int64_t stride, const double *attr);
// A constraint between attributes: nullopt when `a` satisfies it, else the problem.
using AttrRule = std::optional<std::string> (*)(const AttrMap &a);

struct OpInfo {
  OpKind kind;
  std::string_view name; // as written in .kf
  OpClass cls;
  int min_args;
  int max_args;
  std::string_view operands; // the positional operands as documented: "x, weight, bias?"
  Span<AttrSpec> attrs;      // in canonical (printed) order
  bool internal;
  ScalarFn fp64;              // pointwise ops; nullptr otherwise
  std::string_view cuda;      // ops computed inline: C++ float expression, {0} {1} the operands,
                              // {name} an attribute; empty for ops that are kernels of their own
  AttrRule rule;              // nullptr: no constraint between attributes
  std::string_view shapes;    // DSL.md: the shape rule, "" for the class's (ClassTraits::shapes)
  std::string_view semantics; // DSL.md: the meaning, PyTorch's spelling
  ReduceFn reduce = nullptr;  // reductions and pools (over each window); nullptr otherwise
  std::string_view reducer;   // reductions and pools: the template's kf::Reduce value ("Sum", ...)
  std::string_view torch;     // PyTorch's spelling: a Python expression of the operands and the
                              // attributes by name, `torch`, `F` (torch.nn.functional),
                              // `training`, `device` and `int`; the Python Reference evaluates it
  // Pointwise ops: the calls of accurate transcendental functions (expf, expm1f, logf, log1pf,
  // tanhf, erff; powf counts two) that `cuda` makes per element, those inside math.cuh's
  // functions included. Divisions and square roots count none: a few instructions each, their
  // rare slow path shared. The code generator weighs a GEMM epilogue's code by it
  // (compiler/select: its functor applied in a rolled loop).
  int transcendental_calls = 0;
  // The operand that is an i64 tensor of class indices (cross_entropy's target); -1: none. No
  // other operand of any op may be i64 (infer_type).
  int index_operand = -1;
};

const OpInfo &op_info(OpKind k);
std::optional<OpKind> op_by_name(std::string_view name);
Span<OpInfo> all_ops();
// The ops of one class (user ops, and internal ones when asked), in table order; `arity` -1
// for any, else only ops that take that many operands.
std::vector<OpKind> ops_of_class(OpClass cls, int arity = -1, bool internal = false);
bool is_pointwise(OpKind k); // of a class with a ScalarFn (ClassTraits::pointwise)

// The words of a Choice attribute, its default first.
std::vector<std::string_view> choice_words(const AttrSpec &spec);
// What an attribute value must be, as messages say it: "a number > 0", "a number in [0, 1]",
// "\"none\" or \"tanh\"".
std::string attr_expectation(const AttrSpec &spec);
// nullopt when `a` is a valid value of `spec`, else the problem ("must be > 0, got 0").
std::optional<std::string> check_attr(const AttrSpec &spec, const AttrValue &a);
// The default value of an optional attribute.
AttrValue default_attr(const AttrSpec &spec);
// The attributes of `op` as numbers in table order (ScalarFn's `attr`): a DType as its enum
// value, a Choice as the index of its word.
std::vector<double> attr_numbers(const OpInfo &op, const AttrMap &attrs);

} // namespace kfuse::ir
