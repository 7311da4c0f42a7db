#include "compiler/ir/infer.h"

#include "compiler/ir/op_class.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/views.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kfuse::ir {
namespace {

void expect_rank(const OpInfo &op, const std::vector<TensorType> &args, int i, int rank,
                 std::string_view what) {
  if (args[i].rank() != rank)
    throw TypeError(
        i, fmt::format("{} expects {} of rank {}, got {}", op.name, what, rank, args[i].str()));
}

// Ops whose PyTorch meaning for a rank-3/4 input is not "each row along the last axis", which
// is all the kernels compute: refused rather than computed differently.
void expect_matrix(const OpInfo &op, const std::vector<TensorType> &args, std::string_view why) {
  if (args[0].rank() > 2)
    throw TypeError(0, fmt::format("{} of {} (rank {}) is not supported: {}", op.name,
                                   args[0].str(), args[0].rank(), why));
}

// On a rank-3/4 tensor, only the last axis: softmax, the reductions.
void expect_last_axis(const OpInfo &op, const TensorType &x, size_t axis) {
  if (x.rank() > 2 && axis + 1 != static_cast<size_t>(x.rank()))
    throw TypeError(-1, fmt::format("{}: dim={} of {} (rank {}) is not supported: on a tensor of "
                                    "rank 3 or 4 only the last (feature) axis, dim=-1 or dim={}",
                                    op.name, axis, x.str(), x.rank(), x.rank() - 1));
}

// A binary op with a rank-3/4 result runs on its matrix view, so each operand must be one
// there: the whole tensor, or 1 along every leading axis (per feature, scalar), with a last
// extent of 1 or the result's (per row: [B, T, 1]).
void expect_row_broadcast(const OpInfo &op, const std::vector<TensorType> &args,
                          const std::vector<Dim> &out) {
  if (out.size() <= 2)
    return;
  for (int i = 0; i < 2; ++i) {
    const std::vector<Dim> &s = args[i].shape;
    bool all_rows = s.size() == out.size(), no_rows = true;
    for (size_t a = 0; a + 1 < s.size(); ++a) {
      all_rows = all_rows && s[a] == out[a];
      no_rows = no_rows && s[a] == Dim::constant(1);
    }
    if (!all_rows && !no_rows)
      throw TypeError(i, fmt::format("shape mismatch in {}: {} broadcast to {} would repeat it "
                                     "along some leading axes only; an operand of a rank-3/4 "
                                     "result has all its leading extents or none (1)",
                                     op.name, args[i].str(),
                                     TensorType{args[i].dtype, out}.shape_str()));
  }
}

// Every argument has the input's element type (a GEMM's operands and bias, as PyTorch's
// linear and matmul require).
void expect_same_dtype(const OpInfo &op, const std::vector<TensorType> &args) {
  for (size_t i = 1; i < args.size(); ++i)
    if (args[i].dtype != args[0].dtype)
      throw TypeError(static_cast<int>(i), fmt::format("type mismatch in {}: {} and {}", op.name,
                                                       args[0].str(), args[i].str()));
}

// A normalization's parameters and statistics have the input's element type or are f32, as
// PyTorch's mixed precision keeps them for bf16/f16 activations.
void expect_param_dtype(const OpInfo &op, const std::vector<TensorType> &args, int i,
                        std::string_view what) {
  DType dt = args[i].dtype, x = args[0].dtype;
  if (dt == x || dt == DType::F32)
    return;
  if (x == DType::F32)
    throw TypeError(i, fmt::format("type mismatch in {}: {} must be f32 as the input {}, got {}",
                                   op.name, what, args[0].str(), args[i].str()));
  throw TypeError(i,
                  fmt::format("type mismatch in {}: {} must be {} (as the input {}) or f32, got {}",
                              op.name, what, dtype_name(x), args[0].str(), args[i].str()));
}

// Both extents must be the same constant or the same symbolic dim.
void unify(const OpInfo &op, const std::vector<TensorType> &args, int i, const Dim &a, const Dim &b,
           std::string_view what) {
  if (a != b)
    throw TypeError(i, fmt::format("dims cannot unify in {}: {} is {} in the input {} but {} in "
                                   "argument {} {}",
                                   op.name, what, a.str(), args[0].str(), b.str(), i + 1,
                                   args[i].str()));
}

// A per-feature vector of a [rows, C] tensor: shape [C].
void expect_feature_vector(const OpInfo &op, const std::vector<TensorType> &args, int i,
                           const Dim &c, std::string_view what) {
  if (args[i].rank() != 1 || args[i].shape[0] != c)
    throw TypeError(i, fmt::format("shape mismatch in {}: {} must be [{}] to match {}, got {}",
                                   op.name, what, c.str(), args[0].str(), args[i].str()));
}

// The axis the `dim` attribute names, in [0, rank) (a negative dim counts from the end).
size_t axis_of(const OpInfo &op, const TensorType &x,
               const std::map<std::string, AttrValue> &attrs) {
  double d = attrs.at("dim").number;
  int rank = x.rank();
  if (d < -rank || d >= rank)
    throw TypeError(
        -1, fmt::format("{}: dim={} is out of range for {} (rank {})", op.name, d, x.str(), rank));
  return static_cast<size_t>(d < 0 ? d + rank : d);
}

// Argument i as messages name it: "argument 2 ('target')", the name where the op's arity fixes
// which operand it is.
std::string argument_name(const OpInfo &op, int i) {
  std::string text = fmt::format("argument {}", i + 1);
  if (op.min_args != op.max_args)
    return text;
  std::string_view names = op.operands;
  for (int k = 0; k < i; ++k)
    names.remove_prefix(std::min(names.size(), names.find(", ") + 2));
  return fmt::format("{} ('{}')", text, names.substr(0, names.find(", ")));
}

// An i64 tensor holds class indices: only the operand the op table names (OpInfo::index_operand)
// takes one, and that operand takes nothing else.
void expect_index_operands(const OpInfo &op, const std::vector<TensorType> &args) {
  for (int i = 0; i < static_cast<int>(args.size()); ++i) {
    const bool index = i == op.index_operand, i64 = args[i].dtype == DType::I64;
    if (i64 && !index)
      throw TypeError(i, fmt::format("{} cannot take the i64 tensor {} as its {}: an i64 tensor "
                                     "holds class indices, which only a loss's target reads",
                                     op.name, args[i].str(), argument_name(op, i)));
    if (index && !i64)
      throw TypeError(i, fmt::format("{} takes i64 class indices as its {}, got {}", op.name,
                                     argument_name(op, i), args[i].str()));
  }
}

// A loss's logits [N, C] and its target i64[N], its first two operands.
void expect_logits_and_target(const OpInfo &op, const std::vector<TensorType> &args) {
  const TensorType &x = args[0], &t = args[1];
  if (x.rank() != 2)
    throw TypeError(0, fmt::format("{} expects logits [N, C], got {}; view a [B, T, C] tensor "
                                   "as [B*T, C] with reshape",
                                   op.name, x.str()));
  if (t.rank() != 1 || t.shape[0] != x.shape[0])
    throw TypeError(1, fmt::format("shape mismatch in {}: target must be i64[{}], one "
                                   "class index per row of the logits {}, got {}",
                                   op.name, x.shape[0].str(), x.str(), t.str()));
}

} // namespace

std::optional<std::string> group_size_problem(const OpInfo &op,
                                              const std::map<std::string, AttrValue> &attrs,
                                              int64_t features) {
  double groups = attrs.at("groups").number;
  if (groups < 1 || std::fmod(static_cast<double>(features), groups) == 0)
    return std::nullopt;
  return fmt::format("{}: groups={} does not divide the {} features", op.name,
                     format_number(groups), features);
}

int64_t pool_stride(const std::map<std::string, AttrValue> &attrs) {
  double s = attrs.at("stride").number;
  return static_cast<int64_t>(std::isfinite(s) ? s : attrs.at("kernel_size").number);
}

int64_t pool_width(const std::map<std::string, AttrValue> &attrs, int64_t features) {
  auto k = static_cast<int64_t>(attrs.at("kernel_size").number);
  int64_t s = pool_stride(attrs);
  if (k < 1 || s < 1 || k > features) // the op's rule reports the first two
    return 0;
  return (features - k) / s + 1;
}

std::optional<std::vector<Dim>> broadcast(const std::vector<Dim> &a, const std::vector<Dim> &b) {
  size_t n = std::max(a.size(), b.size());
  std::vector<Dim> out(n);
  for (size_t i = 0; i < n; ++i) {
    const Dim one = Dim::constant(1);
    const Dim &x = i + a.size() >= n ? a[i + a.size() - n] : one;
    const Dim &y = i + b.size() >= n ? b[i + b.size() - n] : one;
    if (x == y || y == one)
      out[i] = x;
    else if (x == one)
      out[i] = y;
    else
      return std::nullopt;
  }
  return out;
}

namespace shape_rule {

// [..., K] x weight -> [..., M]: the leading axes of a rank-3/4 input are rows.
TensorType gemm(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &) {
  if (args[0].rank() < 2)
    throw TypeError(
        0, fmt::format("{} expects its input of rank 2 to 4, got {}", op.name, args[0].str()));
  expect_rank(op, args, 1, 2, "its weight");
  expect_same_dtype(op, args);
  if (op.kind == OpKind::MatmulTN) {
    expect_rank(op, args, 0, 2, "its first operand");
    unify(op, args, 1, args[0].shape[0], args[1].shape[0], "the inner dim");
    return {args[0].dtype, {args[0].shape[1], args[1].shape[1]}};
  }
  bool linear = op.kind == OpKind::Linear;
  // linear: weight is [out, in]; matmul: b is [in, out].
  const Dim &k = linear ? args[1].shape[1] : args[1].shape[0];
  const Dim &m = linear ? args[1].shape[0] : args[1].shape[1];
  unify(op, args, 1, args[0].shape.back(), k, "the inner dim");
  if (args.size() == 3)
    expect_feature_vector(op, args, 2, m, "the bias");
  std::vector<Dim> shape = args[0].shape;
  shape.back() = m;
  return {args[0].dtype, shape};
}

TensorType norm(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &) {
  int n = static_cast<int>(args.size());
  if (n == 4)
    throw TypeError(-1, "batchnorm takes (x, running_mean, running_var) or (x, weight, bias, "
                        "running_mean, running_var), got 4 arguments");
  // A rank-3 input is refused rather than read one way: PyTorch's BatchNorm1d takes its
  // axis 1 as the channels, kfuse's feature axis is the last; the reshape says which.
  if (args[0].rank() > 2) {
    TensorType rows = args[0].matrix_view();
    expect_matrix(op, args,
                  fmt::format("PyTorch's batchnorm1d normalizes axis 1 (the channels) of a "
                              "rank-3 input, and kfuse normalizes the last axis of an [N, C] "
                              "input; to normalize each of the {} features over all {} rows, "
                              "view the input as {} first: reshape(x, shape={})",
                              rows.shape[1].str(), rows.shape[0].str(), rows.shape_str(),
                              rows.shape_str()));
  }
  expect_rank(op, args, 0, 2, "its input");
  const Dim &c = args[0].shape[1];
  static const char *names3[] = {"", "running_mean", "running_var"};
  static const char *names5[] = {"", "weight", "bias", "running_mean", "running_var"};
  for (int i = 1; i < n; ++i) {
    expect_feature_vector(op, args, i, c, n == 3 ? names3[i] : names5[i]);
    expect_param_dtype(op, args, i, n == 3 ? names3[i] : names5[i]);
  }
  return args[0];
}

TensorType binary(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &) {
  auto shape = broadcast(args[0].shape, args[1].shape);
  if (!shape)
    throw TypeError(1, fmt::format("shape mismatch in {}: {} and {} do not broadcast", op.name,
                                   args[0].str(), args[1].str()));
  expect_row_broadcast(op, args, *shape);
  return {promote(args[0].dtype, args[1].dtype), *shape};
}

TensorType unary(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs) {
  if (op.kind == OpKind::Cast)
    return {*parse_dtype(attrs.at("dtype").dim), args[0].shape};
  return args[0];
}

// A loss per row for reduction="none", else their sum or mean as [1] (no rank 0, as the
// reductions' rule); cross_entropy_rows' [N, 1]; in the logits' type, as PyTorch's.
TensorType loss(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs) {
  expect_logits_and_target(op, args);
  const Dim &n = args[0].shape[0];
  if (op.kind == OpKind::CrossEntropyRows)
    return {args[0].dtype, {n, Dim::constant(1)}};
  return {args[0].dtype, {attrs.at("reduction").dim == "none" ? n : Dim::constant(1)}};
}

// The gradient g of the loss (its shape) for the logits: the logits' type and shape.
TensorType loss_grad(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs) {
  expect_logits_and_target(op, args);
  const bool per_row = attrs.at("reduction").dim == "none";
  const Dim want = per_row ? args[0].shape[0] : Dim::constant(1);
  if (args[2].rank() != 1 || args[2].shape[0] != want)
    throw TypeError(2, fmt::format("shape mismatch in {}: g must be [{}], the shape of the loss "
                                   "with reduction=\"{}\", got {}",
                                   op.name, want.str(), attrs.at("reduction").dim, args[2].str()));
  return args[0];
}

TensorType random(const OpInfo &, const std::vector<TensorType> &args, const AttrMap &) {
  return args[0];
}

TensorType view(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs) {
  return view_type(op, args[0], attrs);
}

TensorType row(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs) {
  expect_last_axis(op, args[0], axis_of(op, args[0], attrs));
  return args[0];
}

TensorType row_norm(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs) {
  if (op.kind == OpKind::GroupNorm || op.kind == OpKind::InstanceNorm)
    expect_matrix(op, args,
                  "PyTorch's group_norm and instance_norm take axis 1 of a rank-3 "
                  "input as the channels, not the last axis");
  const Dim &f = args[0].shape.back();
  static const char *names[] = {"", "weight", "bias"};
  for (int i = 1; i < static_cast<int>(args.size()); ++i) {
    expect_feature_vector(op, args, i, f, names[i]);
    expect_param_dtype(op, args, i, names[i]);
  }
  // A symbolic F is checked once bound (group_size_problem); groups < 1 is the range's.
  if (attrs.count("groups") && !f.is_symbolic())
    if (auto problem = group_size_problem(op, attrs, f.value))
      throw TypeError(-1, *problem);
  return args[0];
}

TensorType reduce(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs) {
  size_t axis = axis_of(op, args[0], attrs);
  expect_last_axis(op, args[0], axis);
  int rank = args[0].rank();
  bool keepdim = attrs.at("keepdim").number != 0;
  // [B, T] would make T a feature axis: the rows' values keep their axis ([B, T, 1]).
  if (rank > 2 && !keepdim)
    throw TypeError(-1, fmt::format("{} of {} (rank {}) needs keepdim=true: without it the "
                                    "second-to-last axis would become the feature axis",
                                    op.name, args[0].str(), rank));
  if (rank == 1 && !keepdim)
    throw TypeError(-1, fmt::format("{} of {} needs keepdim=true: the result would have rank 0, "
                                    "and kfuse has no rank-0 tensors",
                                    op.name, args[0].str()));
  std::vector<Dim> shape = args[0].shape;
  if (keepdim)
    shape[axis] = Dim::constant(1);
  else
    shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(axis));
  return {args[0].dtype, shape};
}

TensorType pool(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs) {
  expect_matrix(op, args, "PyTorch's pooling of x.unsqueeze(1) takes at most a rank-2 x");
  // A window count has no dim name: the feature count must be a number.
  const Dim &f = args[0].shape.back();
  if (f.is_symbolic())
    throw TypeError(0, fmt::format("{} needs a constant feature count, got {}: the output width "
                                   "(F - kernel_size) / stride + 1 would have no dim name",
                                   op.name, args[0].str()));
  for (const AttrSpec &spec : op.attrs) // before the width, which assumes a valid window
    if (auto problem = check_attr(spec, attrs.at(std::string(spec.name))))
      throw TypeError(-1, fmt::format("{}: attribute '{}' {}", op.name, spec.name, *problem));
  std::vector<Dim> shape = args[0].shape;
  shape.back() = Dim::constant(pool_width(attrs, f.value));
  if (shape.back().value < 1)
    throw TypeError(-1, fmt::format("{}: kernel_size={} is wider than the {} features", op.name,
                                    format_number(attrs.at("kernel_size").number), f.value));
  return {args[0].dtype, shape};
}

// A pool's gradient: g is the pool's result ([N, W], rank at most 2 as the pool's input), the
// result has the pool's input shape: x's (max_pool1d_backward), or g's rows and `features`.
TensorType pool_grad(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs) {
  expect_matrix(op, args, "it is the gradient of a pool, whose input has rank at most 2");
  for (const AttrSpec &spec : op.attrs) // before the width, which assumes a valid window
    if (auto problem = check_attr(spec, attrs.at(std::string(spec.name))))
      throw TypeError(-1, fmt::format("{}: attribute '{}' {}", op.name, spec.name, *problem));
  const TensorType &g = args[0];
  std::vector<Dim> shape = g.shape;
  if (args.size() == 2) {
    const TensorType &x = args[1];
    if (x.rank() != g.rank() || (g.rank() == 2 && x.shape[0] != g.shape[0]) ||
        x.shape.back().is_symbolic())
      throw TypeError(1, fmt::format("shape mismatch in {}: x must have the rows of g {} and a "
                                     "constant feature count, got {}",
                                     op.name, g.str(), x.str()));
    shape.back() = x.shape.back();
  } else {
    shape.back() = Dim::constant(static_cast<int64_t>(attrs.at("features").number));
  }
  const int64_t f = shape.back().value, width = pool_width(attrs, f);
  if (width < 1)
    throw TypeError(-1, fmt::format("{}: kernel_size={} is wider than the {} features", op.name,
                                    format_number(attrs.at("kernel_size").number), f));
  if (g.shape.back() != Dim::constant(width))
    throw TypeError(0, fmt::format("shape mismatch in {}: g must have the {} windows of {} "
                                   "features (kernel_size={}, stride={}), got {}",
                                   op.name, width, f, format_number(attrs.at("kernel_size").number),
                                   pool_stride(attrs), g.str()));
  return {g.dtype, shape};
}

// groupnorm_backward: g and x of one shape, the optional weight per feature, as groupnorm's.
TensorType norm_grad(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &attrs) {
  expect_matrix(op, args, "it is the gradient of groupnorm, whose input has rank at most 2");
  if (args[1].shape != args[0].shape)
    throw TypeError(1, fmt::format("shape mismatch in {}: x must have the shape of g {}, got {}",
                                   op.name, args[0].str(), args[1].str()));
  const Dim &f = args[0].shape.back();
  if (args.size() > 2) {
    expect_feature_vector(op, args, 2, f, "weight");
    expect_param_dtype(op, args, 2, "weight");
  }
  if (!f.is_symbolic())
    if (auto problem = group_size_problem(op, attrs, f.value))
      throw TypeError(-1, *problem);
  return args[0];
}

// Statistics are held in fp32 whatever the matrix's type; a sum over the rows has the matrix's
// type, as sum does (kernels compute it in fp32 either way).
TensorType col_reduce(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &) {
  expect_rank(op, args, 0, 2, "its input");
  return {op.kind == OpKind::ColSum ? args[0].dtype : DType::F32, {args[0].shape[1]}};
}

// Vectors of any type, the result in the matrix's; on a rank-3/4 matrix per feature of the
// rows, as a GEMM epilogue applies it.
TensorType col_affine(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &) {
  if (args[0].rank() < 2)
    throw TypeError(
        0, fmt::format("{} expects its input of rank 2 to 4, got {}", op.name, args[0].str()));
  const Dim &c = args[0].shape.back();
  static constexpr const char *kVectors[] = {"alpha", "beta", "shift"};
  for (size_t i = 1; i < args.size(); ++i)
    if (!(args[i].rank() == 1 && (args[i].shape[0] == c || args[i].shape[0] == Dim::constant(1))))
      throw TypeError(static_cast<int>(i),
                      fmt::format("shape mismatch in col_affine: {} must be [{}] or [1], got {}",
                                  kVectors[i - 1], c.str(), args[i].str()));
  return args[0];
}

// Only a matrix: a rank-3/4 tensor's transpose would move its feature axis among its rows.
TensorType transpose(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &) {
  expect_rank(op, args, 0, 2, "its input");
  return {args[0].dtype, {args[0].shape[1], args[0].shape[0]}};
}

// Each state is updated in its own type from fp32 statistics; the effect has rank 0.
TensorType effect(const OpInfo &op, const std::vector<TensorType> &args, const AttrMap &) {
  expect_rank(op, args, 0, 1, "running_mean");
  for (int i = 1; i < static_cast<int>(args.size()); ++i)
    expect_feature_vector(op, args, i, args[0].shape[0], i == 1 ? "running_var" : "a statistic");
  return {args[0].dtype, {}};
}

TensorType constant(const OpInfo &, const std::vector<TensorType> &, const AttrMap &attrs) {
  auto dt = parse_dtype(attrs.at("dtype").dim);
  if (!dt)
    throw TypeError(-1, fmt::format("constant: '{}' is not a type", attrs.at("dtype").dim));
  return {*dt, {Dim::constant(1)}};
}

} // namespace shape_rule

TensorType infer_type(OpKind kind, const std::vector<TensorType> &args,
                      const std::map<std::string, AttrValue> &attrs) {
  const OpInfo &op = op_info(kind);
  int n = static_cast<int>(args.size());
  if (n < op.min_args || n > op.max_args)
    throw TypeError(-1, op.min_args == op.max_args
                            ? fmt::format("{} takes {} arguments, got {}", op.name, op.min_args, n)
                            : fmt::format("{} takes {} to {} arguments, got {}", op.name,
                                          op.min_args, op.max_args, n));
  for (int i = 0; i < n; ++i)
    if (args[i].rank() == 0)
      throw TypeError(i, fmt::format("{} cannot take an effect as argument {}", op.name, i + 1));
  expect_index_operands(op, args);
  TensorType t = class_traits(op.cls).shape_rule(op, args, attrs);
  // A broadcast or a GEMM can make a result larger than any argument.
  if (auto problem = size_problem(t))
    throw TypeError(-1, fmt::format("{}: the result {}", op_info(kind).name, *problem));
  return t;
}

} // namespace kfuse::ir
