#include "compiler/ir/ops.h"

#include "compiler/ir/op_attrs.h"
#include "compiler/ir/op_class.h"
#include "compiler/ir/pointwise.h"
#include "compiler/ir/reduce.h"
#include "compiler/ir/types.h"

#include <cmath>
#include <iterator>

namespace kfuse::ir {
namespace {

using namespace op_attrs;

// --- the table ----------------------------------------------------------------------------

// No shape rule of the op's own: the op reference gives its class's (ClassTraits::shapes).
constexpr std::string_view kAny = "";

// A pointwise op: unary (1 operand) or binary (2, broadcast); `calls`: transcendental_calls.
constexpr OpInfo unary(OpKind k, std::string_view name, ScalarFn f, std::string_view cuda,
                       int calls, std::string_view semantics, std::string_view torch,
                       Span<AttrSpec> attrs = {}, AttrRule rule = nullptr) {
  return {k,    name, OpClass::Unary, 1,         1,       "x", attrs, false, f,
          cuda, rule, kAny,           semantics, nullptr, {},  torch, calls};
}
constexpr OpInfo binary(OpKind k, std::string_view name, ScalarFn f, std::string_view cuda,
                        int calls, std::string_view semantics, std::string_view torch) {
  return {k,       name, OpClass::Binary, 2,       2,  "a, b", {},   false, f, cuda,
          nullptr, kAny, semantics,       nullptr, {}, torch,  calls};
}

// An internal pointwise op without attributes: what backward graphs are written with.
constexpr OpInfo internal_pointwise(OpKind k, OpClass cls, std::string_view name, ScalarFn f,
                                    std::string_view cuda, int calls, std::string_view semantics,
                                    std::string_view torch) {
  int n = cls == OpClass::Binary ? 2 : 1;
  return {k,         name,    cls, n,     n,       n == 2 ? "a, b" : "x",
          {},        true,    f,   cuda,  nullptr, kAny,
          semantics, nullptr, {},  torch, calls};
}

// A row normalization along `dim`.
constexpr OpInfo row(OpKind k, std::string_view name, std::string_view semantics,
                     std::string_view torch) {
  return {k,       name, OpClass::Row, 1,    1,         "x",     kDimAttrs, false,
          nullptr, {},   nullptr,      kAny, semantics, nullptr, {},        torch};
}

// A normalization over the feature axis (the last) with optional per-feature vectors.
constexpr OpInfo row_norm(OpKind k, std::string_view name, int max_args, std::string_view operands,
                          Span<AttrSpec> attrs, std::string_view semantics, std::string_view torch,
                          AttrRule rule = nullptr, std::string_view shapes = kAny) {
  return {k,  name, OpClass::RowNorm, 1,         max_args, operands, attrs, false, nullptr,
          {}, rule, shapes,           semantics, nullptr,  {},       torch};
}

// A reduction along `dim`; `reducer` names its kf::Reduce in templates/row_reduce.cuh.
constexpr OpInfo reduction(OpKind k, std::string_view name, ReduceFn f, std::string_view reducer,
                           std::string_view semantics, std::string_view torch,
                           Span<AttrSpec> attrs = kReduceAttrs) {
  return {k,       name, OpClass::Reduce, 1,    1,         "x", attrs,   false,
          nullptr, {},   nullptr,         kAny, semantics, f,   reducer, torch};
}

// A pooling over windows of the feature axis; `f` and `reducer` (as for a reduction) apply to
// each window.
constexpr OpInfo pool(OpKind k, std::string_view name, ReduceFn f, std::string_view reducer,
                      std::string_view semantics, std::string_view torch) {
  return {k,       name, OpClass::Pool, 1,    1,         "x", kPoolAttrs, false,
          nullptr, {},   nullptr,       kAny, semantics, f,   reducer,    torch};
}

// A view: its result is its argument's buffer under another shape (compiler/ir/views.h).
constexpr OpInfo view(OpKind k, std::string_view name, Span<AttrSpec> attrs,
                      std::string_view shapes, std::string_view semantics, std::string_view torch) {
  return {k,       name, OpClass::View, 1,      1,         "x",     attrs, false,
          nullptr, {},   nullptr,       shapes, semantics, nullptr, {},    torch};
}

// A loss of each row's logits against its class index (operand 1, i64), or (internal) its
// per-row form or its gradient, which takes the loss's gradient last.
constexpr OpInfo loss(OpKind k, std::string_view name, OpClass cls, Span<AttrSpec> attrs,
                      std::string_view shapes, std::string_view semantics, std::string_view torch) {
  const bool grad = cls == OpClass::LossGrad, internal = k != OpKind::CrossEntropy;
  std::string_view operands = grad ? "logits, target, g" : "logits, target";
  OpInfo op{k,       name, cls,     grad ? 3 : 2, grad ? 3 : 2, operands, attrs, internal,
            nullptr, {},   nullptr, shapes,       semantics,    nullptr,  {},    torch};
  op.index_operand = 1;
  return op;
}

// A per-column statistic of a matrix's rows, computed by the column kernel from merged partials.
constexpr OpInfo col_statistic(OpKind k, std::string_view name, std::string_view semantics,
                               std::string_view torch) {
  return {k,       name, OpClass::ColReduce, 1,       1,  "y",  kColStatAttrs, true, nullptr, {},
          nullptr, kAny, semantics,          nullptr, {}, torch};
}

namespace pw = pointwise;
namespace rd = reduce;

constexpr OpInfo kOps[] = {
    {OpKind::Linear,
     "linear",
     OpClass::Gemm,
     2,
     3,
     "x, weight, bias?",
     {},
     false,
     nullptr,
     {},
     nullptr,
     "`x: [N, K]`, `weight: [M, K]`, `bias: [M]` → `[N, M]`",
     "`F.linear(x, weight, bias)` = `x @ weight.T + bias`",
     nullptr,
     {},
     "F.linear(x, weight, bias)"},
    {OpKind::Matmul,
     "matmul",
     OpClass::Gemm,
     2,
     2,
     "a, b",
     {},
     false,
     nullptr,
     {},
     nullptr,
     "`a: [N, K]`, `b: [K, M]` → `[N, M]`",
     "`a @ b`",
     nullptr,
     {},
     "torch.matmul(a, b)"},
    // What matmul(transpose(a), b) becomes (compiler/passes/transposed_operands.cpp): the
    // backward's weight gradient gᵀ x, a GEMM reading its first operand column-major.
    {OpKind::MatmulTN,
     "matmul_tn",
     OpClass::Gemm,
     2,
     2,
     "a, b",
     {},
     true,
     nullptr,
     {},
     nullptr,
     "`a: [K, N]`, `b: [K, M]` → `[N, M]`",
     "`a.T @ b`",
     nullptr,
     {},
     "torch.matmul(a.T, b)"},
    {OpKind::BatchNorm,
     "batchnorm",
     OpClass::Norm,
     3,
     5,
     "x, weight?, bias?, running_mean, running_var",
     kBatchNormAttrs,
     false,
     nullptr,
     {},
     nullptr,
     "`x: [N, C]`, the others `[C]` → `[N, C]`",
     "`F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)`; "
     "below",
     nullptr,
     {},
     "F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)"},

    binary(OpKind::Add, "add", pw::add, "{0} + {1}", 0, "`a + b`", "torch.add(a, b)"),
    binary(OpKind::Sub, "sub", pw::sub, "{0} - {1}", 0, "`a - b`", "torch.sub(a, b)"),
    binary(OpKind::Mul, "mul", pw::mul, "{0} * {1}", 0, "`a * b`", "torch.mul(a, b)"),
    binary(OpKind::Div, "div", pw::div, "{0} / {1}", 0, "`a / b` (true division)",
           "torch.div(a, b)"),
    binary(OpKind::Maximum, "maximum", pw::maximum, "kf::maximum({0}, {1})", 0,
           "`torch.maximum(a, b)`: NaN if either is NaN", "torch.maximum(a, b)"),
    binary(OpKind::Minimum, "minimum", pw::minimum, "kf::minimum({0}, {1})", 0,
           "`torch.minimum(a, b)`: NaN if either is NaN", "torch.minimum(a, b)"),
    binary(OpKind::Pow, "pow", pw::pow, "powf({0}, {1})", 2, "`torch.pow(a, b)`",
           "torch.pow(a, b)"),

    unary(OpKind::Relu, "relu", pw::relu, "kf::relu({0})", 0,
          "`torch.relu`: `max(x, 0)`, NaN stays NaN", "torch.relu(x)"),
    unary(OpKind::LeakyRelu, "leaky_relu", pw::leaky_relu, "kf::leaky_relu({0}, {negative_slope})",
          0, "`F.leaky_relu`: `x > 0 ? x : x * negative_slope`", "F.leaky_relu(x, negative_slope)",
          kLeakyReluAttrs),
    unary(OpKind::Gelu, "gelu", pw::gelu, "kf::gelu_{approximate}({0})", 1,
          "`F.gelu`: `0.5 x (1 + erf(x / √2))`; with `approximate=\"tanh\"`, "
          "`0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`",
          "F.gelu(x, approximate=approximate)", kGeluAttrs),
    unary(OpKind::Silu, "silu", pw::silu, "kf::silu({0})", 1, "`F.silu`: `x / (1 + exp(-x))`",
          "F.silu(x)"),
    unary(OpKind::Sigmoid, "sigmoid", pw::sigmoid, "kf::sigmoid({0})", 1, "`1 / (1 + exp(-x))`",
          "torch.sigmoid(x)"),
    unary(OpKind::Tanh, "tanh", pw::tanh, "tanhf({0})", 1, "`torch.tanh`", "torch.tanh(x)"),
    unary(OpKind::Hardtanh, "hardtanh", pw::clamp, "kf::clamp({0}, {min_val}, {max_val})", 0,
          "`F.hardtanh`: `clamp(x, min_val, max_val)`; needs `min_val < max_val`",
          "F.hardtanh(x, min_val, max_val)", kHardtanhAttrs, min_below_max),
    unary(OpKind::Clamp, "clamp", pw::clamp, "kf::clamp({0}, {min}, {max})", 0,
          "`torch.clamp`: `min(max(x, min), max)`, NaN stays NaN; at least one bound",
          "torch.clamp(x, min, max)", kClampAttrs, some_bound),
    unary(OpKind::Hardsigmoid, "hardsigmoid", pw::hardsigmoid, "kf::hardsigmoid({0})", 0,
          "`F.hardsigmoid`: `min(max(x + 3, 0), 6) / 6`", "F.hardsigmoid(x)"),
    unary(OpKind::Hardswish, "hardswish", pw::hardswish, "kf::hardswish({0})", 0,
          "`F.hardswish`: `x * min(max(x + 3, 0), 6) / 6`", "F.hardswish(x)"),
    unary(OpKind::Mish, "mish", pw::mish, "kf::mish({0})", 3, "`F.mish`: `x * tanh(log1p(exp(x)))`",
          "F.mish(x)"),
    unary(OpKind::Softplus, "softplus", pw::softplus, "kf::softplus({0}, {beta}, {threshold})", 2,
          "`F.softplus`: `x * beta > threshold ? x : log1p(exp(beta x)) / beta`",
          "F.softplus(x, beta, threshold)", kSoftplusAttrs),
    unary(OpKind::Elu, "elu", pw::elu, "kf::elu({0}, {alpha})", 1,
          "`F.elu`: `x > 0 ? x : alpha * (exp(x) - 1)`", "F.elu(x, alpha)", kEluAttrs),
    unary(OpKind::Selu, "selu", pw::selu, "kf::selu({0})", 1,
          "`F.selu`: `scale * elu(x, alpha)` with PyTorch's constants", "F.selu(x)"),
    unary(OpKind::LogSigmoid, "logsigmoid", pw::logsigmoid, "kf::logsigmoid({0})", 2,
          "`F.logsigmoid`: `log(sigmoid(x))`, computed as `min(x, 0) - log1p(exp(-|x|))`",
          "F.logsigmoid(x)"),
    // A one-expression op carries both definitions in its entry.
    unary(
        OpKind::Softsign, "softsign",
        [](double x, double, const double *) { return x / (1 + std::fabs(x)); },
        "({0} / (1.0f + fabsf({0})))", 0,
        "`F.softsign`: `x / (1 + abs(x))`; NaN at +-inf, as PyTorch", "F.softsign(x)"),
    unary(OpKind::Exp, "exp", pw::exp, "expf({0})", 1, "`torch.exp`", "torch.exp(x)"),
    unary(OpKind::Log, "log", pw::log, "logf({0})", 1, "`torch.log`: NaN below 0, -inf at 0",
          "torch.log(x)"),
    unary(OpKind::Abs, "abs", pw::abs, "fabsf({0})", 0, "`torch.abs`", "torch.abs(x)"),
    unary(OpKind::Neg, "neg", pw::neg, "-{0}", 0, "`-x`", "torch.neg(x)"),
    unary(OpKind::Sqrt, "sqrt", pw::sqrt, "sqrtf({0})", 0, "`torch.sqrt`", "torch.sqrt(x)"),
    // Correctly rounded sqrt and division: rsqrtf's 2 ulp would show in batchnorm.
    unary(OpKind::Rsqrt, "rsqrt", pw::rsqrt, "1.0f / sqrtf({0})", 0, "`torch.rsqrt`: `1 / sqrt(x)`",
          "torch.rsqrt(x)"),
    unary(OpKind::Square, "square", pw::square, "{0} * {0}", 0, "`torch.square`: `x * x`",
          "torch.square(x)"),
    unary(OpKind::Reciprocal, "reciprocal", pw::reciprocal, "1.0f / {0}", 0,
          "`torch.reciprocal`: `1 / x`", "torch.reciprocal(x)"),

    row(OpKind::Softmax, "softmax", "`torch.softmax(x, dim)`; `dim` in `[-rank, rank)`, required",
        "torch.softmax(x, dim)"),
    row(OpKind::LogSoftmax, "log_softmax",
        "`torch.log_softmax(x, dim)`, computed as `(x - max) - log(Σ exp(x - max))`",
        "torch.log_softmax(x, dim)"),

    row_norm(OpKind::LayerNorm, "layernorm", 3, "x, weight?, bias?", kLayerNormAttrs,
             "`F.layer_norm(x, [F], weight, bias, eps)`: `(x - mean) / sqrt(var + eps) * weight + "
             "bias`, biased variance over the feature axis",
             "F.layer_norm(x, x.shape[-1:], weight, bias, eps)"),
    row_norm(OpKind::RmsNorm, "rmsnorm", 2, "x, weight?", kRmsNormAttrs,
             "`F.rms_norm(x, [F], weight, eps)`: `x * rsqrt(mean(x²) + eps) * weight` over the "
             "feature axis; `eps` defaults to PyTorch's `finfo(float32).eps`",
             "F.rms_norm(x, x.shape[-1:], weight, eps)"),
    row_norm(OpKind::GroupNorm, "groupnorm", 3, "x, weight?, bias?", kGroupNormAttrs,
             "`F.group_norm(x, groups, weight, bias, eps)`: each row's `F` features split into "
             "`groups` contiguous groups of `F / groups`, each normalized by its own mean and "
             "biased variance, then the per-feature `* weight + bias`",
             "F.group_norm(x, groups, weight, bias, eps)", nullptr,
             "`x: [N, F]`, the others `[F]` → `[N, F]`; `groups` divides `F` (checked at run time "
             "where `F` is a dim name)"),
    row_norm(OpKind::InstanceNorm, "instancenorm", 1, "x", kLayerNormAttrs,
             "`F.instance_norm(x.unsqueeze(1), eps=eps).squeeze(1)`: each row of `x` is one "
             "instance of one channel over `F` positions, normalized by its mean and biased "
             "variance, no affine and no running statistics",
             "F.instance_norm(x.unsqueeze(1), eps=eps).squeeze(1)", nullptr,
             "`x: [N, F]` → `[N, F]`"),

    reduction(OpKind::Sum, "sum", rd::sum, "Sum", "`torch.sum(x, dim, keepdim)`",
              "torch.sum(x, dim, keepdim=keepdim)"),
    reduction(OpKind::Mean, "mean", rd::mean, "Mean", "`torch.mean(x, dim, keepdim)`",
              "torch.mean(x, dim, keepdim=keepdim)"),
    reduction(OpKind::Max, "max", rd::max, "Max",
              "the values of `torch.max(x, dim, keepdim)`: NaN if the slice holds a NaN",
              "torch.max(x, dim, keepdim=keepdim).values"),
    reduction(OpKind::Min, "min", rd::min, "Min",
              "the values of `torch.min(x, dim, keepdim)`: NaN if the slice holds a NaN",
              "torch.min(x, dim, keepdim=keepdim).values"),
    reduction(OpKind::Amax, "amax", rd::max, "Max", "`torch.amax(x, dim, keepdim)`",
              "torch.amax(x, dim, keepdim=keepdim)"),
    reduction(OpKind::Amin, "amin", rd::min, "Min", "`torch.amin(x, dim, keepdim)`",
              "torch.amin(x, dim, keepdim=keepdim)"),
    reduction(OpKind::Logsumexp, "logsumexp", rd::logsumexp, "LogSumExp",
              "`torch.logsumexp(x, dim, keepdim)`: `max + log(Σ exp(x - max))`, the max taken as "
              "0 where infinite",
              "torch.logsumexp(x, dim, keepdim=keepdim)"),
    reduction(OpKind::Var, "var", rd::var, "Var",
              "`torch.var(x, dim, correction, keepdim)`: `Σ (x - mean)² / max(0, n - correction)`",
              "torch.var(x, dim, correction=correction, keepdim=keepdim)", kVarAttrs),
    reduction(OpKind::Std, "std", rd::std, "Std",
              "`torch.std(x, dim, correction, keepdim)`: `sqrt(var)`",
              "torch.std(x, dim, correction=correction, keepdim=keepdim)", kVarAttrs),

    pool(OpKind::MaxPool1d, "max_pool1d", rd::max, "Max",
         "`F.max_pool1d(x.unsqueeze(1), kernel_size, stride).squeeze(1)`: the max of each window "
         "`x[:, j * stride : j * stride + kernel_size]`, NaN if it holds a NaN; no padding, "
         "`stride` defaults to `kernel_size`",
         "F.max_pool1d(x.unsqueeze(1), kernel_size, None if stride is None else "
         "int(stride)).squeeze(1)"),
    pool(OpKind::AvgPool1d, "avg_pool1d", rd::mean, "Mean",
         "`F.avg_pool1d(x.unsqueeze(1), kernel_size, stride).squeeze(1)`: the mean of each "
         "window; no padding, `stride` defaults to `kernel_size`",
         "F.avg_pool1d(x.unsqueeze(1), kernel_size, None if stride is None else "
         "int(stride)).squeeze(1)"),

    loss(OpKind::CrossEntropy, "cross_entropy", OpClass::Loss, kCrossEntropyAttrs,
         "`logits: [N, C]`, `target: i64[N]` → `[N]` (`reduction=\"none\"`), else `[1]`",
         "`F.cross_entropy(logits, target, ignore_index, reduction, label_smoothing)`: below",
         "F.cross_entropy(logits, target, ignore_index=int(ignore_index), reduction=reduction, "
         "label_smoothing=label_smoothing).reshape(-1)"),
    {OpKind::Dropout,
     "dropout",
     OpClass::Random,
     1,
     1,
     "x",
     kDropoutAttrs,
     false,
     nullptr,
     "kf::dropout({0}, {p}, {stream}, rng_seed, rng_offset, {index})",
     nullptr,
     "`x` → the same shape",
     "`F.dropout(x, p, training)`: the identity in eval mode; in train mode each element is "
     "kept with probability `1 - p` and scaled by `1 / (1 - p)`, else multiplied by 0, drawn "
     "from the run's Philox stream (below); `p` in `[0, 1)`; `stream` (< 65536) defaults to "
     "the op's ordinal among the pipeline's dropouts",
     nullptr,
     {},
     "F.dropout(x, p, training)"},
    view(OpKind::Reshape, "reshape", kShapeAttrs,
         "`x` → `shape`: the same elements, the last extent unchanged, the rows' product equal",
         "`torch.reshape(x, shape)`: at most one extent `-1`, inferred from the others; the last "
         "(feature) axis keeps its extent",
         "torch.reshape(x, shape)"),
    view(OpKind::Unsqueeze, "unsqueeze", kDimAttrs,
         "`x` → `x` with an axis of extent 1 at `dim`, before the last axis (rank ≤ 4)",
         "`torch.unsqueeze(x, dim)`; `dim` in `[-rank - 1, rank)` other than `-1`: a new last "
         "axis would change the feature axis",
         "torch.unsqueeze(x, dim)"),
    view(OpKind::Squeeze, "squeeze", kDimAttrs,
         "`x` → `x` without axis `dim`, whose extent is the constant 1",
         "`torch.squeeze(x, dim)`; `dim` in `[-rank, rank)` other than the feature axis "
         "(`rank - 1`, `-1`); an axis of another extent is an error (PyTorch leaves it as is)",
         "torch.squeeze(x, dim)"),
    col_statistic(OpKind::ColMean, "col_mean", "`y.mean(0)`", "torch.mean(y, 0)"),
    col_statistic(OpKind::ColVar, "col_var", "`y.var(0, unbiased=False)` (biased)",
                  "torch.var(y, 0, correction=0)"),
    // What a sum over the rows (dim=0) becomes (compiler/passes/columns_from_reductions.cpp):
    // the column kernel's merged mean times the rows, in double.
    col_statistic(OpKind::ColSum, "col_sum", "`y.sum(0)`", "torch.sum(y, 0)"),
    // The shift is subtracted first, as batchnorm does: `(y - mean) * alpha + beta` loses
    // nothing to cancellation on a column whose spread is tiny next to its mean (a constant
    // column gives exact zeros), where `y * alpha + (beta - mean * alpha)` cancels. The code
    // generator writes `({0} - {3})` for {0} when the shift is present.
    {OpKind::ColAffine,
     "col_affine",
     OpClass::ColAffine,
     3,
     4,
     "y, alpha, beta, shift?",
     {},
     true,
     nullptr,
     "{0} * {1} + {2}",
     nullptr,
     "`y: [N, C]`, `alpha`, `beta`, `shift`: `[C]` or `[1]` → `[N, C]`",
     "`(y - shift) * alpha + beta`, per column; without `shift`, `y * alpha + beta`",
     nullptr,
     {},
     "(y if shift is None else y - shift) * alpha + beta"},
    {OpKind::BnUpdate,
     "bn_update",
     OpClass::Effect,
     4,
     4,
     "running_mean, running_var, mean, var",
     kBnUpdateAttrs,
     true,
     nullptr,
     {},
     nullptr,
     "`[C]` each → effect",
     "`running_mean ← (1 - momentum) * running_mean + momentum * mean`, `running_var ← (1 - "
     "momentum) * running_var + momentum * var * count / (count - 1)`",
     nullptr,
     {},
     "(running_mean.lerp_(mean, momentum), running_var.lerp_(var * (count / (count - 1)), "
     "momentum))"},
    // What precision bf16 makes of a GEMM's f32 operands (compiler/passes/autocast_bf16.cpp),
    // and of its result: back to f32, which rounds nothing (kernels hold fp32).
    {OpKind::Cast,
     "cast",
     OpClass::Unary,
     1,
     1,
     "x",
     kCastAttrs,
     true,
     pw::cast,
     "kf::round_to_{dtype}({0})",
     nullptr,
     "`x` → the same shape, of type `dtype`",
     "`x.to(dtype)`: rounded to the nearest value of `dtype`, ties to even",
     nullptr,
     {},
     "x.to(dtype)"},
    // What precision tf32 makes of a GEMM's f32 weight on the Hopper mainloop, once per bind
    // (compiler/passes/round_tf32.cpp): the tensor cores would truncate it.
    internal_pointwise(
        OpKind::RoundTf32, OpClass::Unary, "round_tf32", pw::round_tf32, "kf::round_to_tf32({0})",
        0,
        "`x` rounded to tf32 (10 explicit mantissa bits), nearest, ties away from zero, as "
        "cuBLAS rounds its tf32 operands; NaN and inf unchanged",
        "torch.where(torch.isfinite(x), ((x.float().view(torch.int32) + 4096) & -8192)"
        ".view(torch.float32), x.float()).to(x.dtype)"),
    // The derivatives of piecewise ops (relu, clamp, maximum, ...) and the reductions' masks
    // select with these (compiler/ir/vjp.h); 1 or 0 in the type of the operands, 0 where
    // either is NaN, as PyTorch's comparisons are false there.
    internal_pointwise(
        OpKind::Greater, OpClass::Binary, "gt",
        [](double x, double y, const double *) { return x > y ? 1.0 : 0.0; },
        "({0} > {1} ? 1.0f : 0.0f)", 0, "`a > b` as 1 or 0 (`torch.gt`); 0 where either is NaN",
        "torch.gt(a, b).to(torch.result_type(a, b))"),
    internal_pointwise(
        OpKind::GreaterEqual, OpClass::Binary, "ge",
        [](double x, double y, const double *) { return x >= y ? 1.0 : 0.0; },
        "({0} >= {1} ? 1.0f : 0.0f)", 0, "`a >= b` as 1 or 0 (`torch.ge`); 0 where either is NaN",
        "torch.ge(a, b).to(torch.result_type(a, b))"),
    // gelu's derivative (the normal CDF) needs it.
    internal_pointwise(
        OpKind::Erf, OpClass::Unary, "erf",
        [](double x, double, const double *) { return std::erf(x); }, "erff({0})", 1, "`torch.erf`",
        "torch.erf(x)"),
    // The backward of a GEMM multiplies by its operands transposed (compiler/ir/vjp.h).
    {OpKind::Transpose,
     "transpose",
     OpClass::Transpose,
     1,
     1,
     "x",
     {},
     true,
     nullptr,
     {},
     nullptr,
     kAny,
     "`x.T`: the rows of `x` as its columns",
     nullptr,
     {},
     "torch.transpose(x, 0, 1)"},
    // The backward of the pools and of groupnorm (compiler/ir/vjp.cpp), one row pass each as
    // their forwards are: a pool's gradient is gathered, each feature summing the windows that
    // hold it, so that no two threads write one element.
    {OpKind::MaxPool1dBackward,
     "max_pool1d_backward",
     OpClass::PoolGrad,
     2,
     2,
     "g, x",
     kMaxPoolGradAttrs,
     true,
     nullptr,
     {},
     nullptr,
     "`g: [N, W]`, `x: [N, F]` → `[N, F]`; `W` is max_pool1d's width of `F`",
     "the gradient of `F.max_pool1d(x.unsqueeze(1), kernel_size, stride)`: each window's `g` "
     "added to the feature of `x` PyTorch's indices pick (the first maximum; the last NaN); 0 "
     "where no window picks a feature",
     nullptr,
     {},
     "torch.zeros_like(x, dtype=g.dtype).scatter_add_(-1, F.max_pool1d(x.unsqueeze(1), "
     "int(kernel_size), int(stride), return_indices=True)[1].squeeze(1), g)"},
    {OpKind::AvgPool1dBackward,
     "avg_pool1d_backward",
     OpClass::PoolGrad,
     1,
     1,
     "g",
     kAvgPoolGradAttrs,
     true,
     nullptr,
     {},
     nullptr,
     "`g: [N, W]` → `[N, features]`; `W` is avg_pool1d's width of `features`",
     "the gradient of `F.avg_pool1d(x.unsqueeze(1), kernel_size, stride)` for `features` "
     "features: `g / kernel_size` added to every feature of its window; 0 where no window "
     "holds a feature",
     nullptr,
     {},
     "F.pad(F.conv_transpose1d(g.unsqueeze(1), torch.full((1, 1, int(kernel_size)), 1 / "
     "kernel_size, dtype=g.dtype, device=g.device), stride=int(stride)).squeeze(1), (0, "
     "int(features) - (g.shape[-1] - 1) * int(stride) - int(kernel_size)))"},
    {OpKind::GroupNormBackward,
     "groupnorm_backward",
     OpClass::NormGrad,
     2,
     3,
     "g, x, weight?",
     kGroupNormAttrs,
     true,
     nullptr,
     {},
     nullptr,
     "`g, x: [N, F]`, `weight: [F]` → `[N, F]`; `groups` divides `F`",
     "the gradient of `F.group_norm(x, groups, weight, bias, eps)` for `x`: per group, "
     "`rstd (gx - mean(gx) - x̂ mean(gx x̂))` with `gx = g * weight`, `x̂ = (x - mean) rstd`",
     nullptr,
     {},
     "(lambda s: torch.ops.aten.native_group_norm_backward(g, x, s[1], s[2], weight, "
     "x.shape[0], x.shape[1], 1, int(groups), [True, False, False])[0])("
     "torch.ops.aten.native_group_norm(x, weight, None, x.shape[0], x.shape[1], 1, int(groups), "
     "eps))"},
    // What cross_entropy's sum and mean become (compiler/passes/columns_from_reductions.cpp): the
    // column sum of the rows' losses, over the column sum of their weights for the mean.
    loss(OpKind::CrossEntropyRows, "cross_entropy_rows", OpClass::Loss, kCrossEntropyRowsAttrs,
         "`logits: [N, C]`, `target: i64[N]` → `[N, 1]`",
         "each row's `cross_entropy` (`reduction=\"none\"`); with `weight=true` its weight in "
         "the mean instead: 1, 0 where ignored",
         "((target != ignore_index).to(logits.dtype) if weight else F.cross_entropy(logits, "
         "target, ignore_index=int(ignore_index), reduction='none', "
         "label_smoothing=label_smoothing)).unsqueeze(1)"),
    // cross_entropy's backward, one row pass as its forward is (compiler/ir/vjp.cpp).
    loss(OpKind::CrossEntropyBackward, "cross_entropy_backward", OpClass::LossGrad,
         kCrossEntropyAttrs,
         "`logits: [N, C]`, `target: i64[N]`, `g: [N]` (`reduction=\"none\"`) or `[1]` → `[N, C]`",
         "the gradient of `F.cross_entropy` for `logits`: `(softmax(x) - (1 - ε) onehot(t) - ε / "
         "C) g`, `g / count` for `mean`; 0 on ignored rows",
         "torch.where((target == ignore_index).unsqueeze(1), 0, (torch.softmax(logits.double(), "
         "1) - (1 - label_smoothing) * F.one_hot(target.clamp(0, logits.shape[1] - 1), "
         "logits.shape[1]) - label_smoothing / logits.shape[1]) * (g.double().unsqueeze(1) if "
         "reduction == 'none' else g.double() / (target != ignore_index).sum() if reduction == "
         "'mean' else g.double())).to(logits.dtype)"),
    {OpKind::Constant,
     "constant",
     OpClass::Constant,
     0,
     0,
     "",
     kConstantAttrs,
     true,
     nullptr,
     "{value}",
     nullptr,
     "no arguments → `dtype[1]`",
     "a one-element tensor holding `value`",
     nullptr,
     {},
     "torch.full((1,), value, dtype=dtype, device=device)"},
};

constexpr bool in_enum_order() {
  for (size_t i = 0; i < std::size(kOps); ++i)
    if (static_cast<size_t>(kOps[i].kind) != i)
      return false;
  return std::size(kOps) == kOpCount;
}
static_assert(in_enum_order(), "kOps must list every OpKind once, in enum order");

// The Python Reference computes every op of a .kf with its PyTorch spelling.
constexpr bool torch_complete() {
  for (const OpInfo &op : kOps)
    if (op.torch.empty())
      return false;
  return true;
}
static_assert(torch_complete(), "every op needs its PyTorch spelling");

// The checks below compare function addresses, which the sanitized build (KFUSE_SANITIZED, see
// CMakeLists.txt) cannot do at compile time; every other build makes them.
#ifndef KFUSE_SANITIZED
// Ops of a pointwise class, and only they, have reference semantics and a CUDA expression.
constexpr bool pointwise_complete() {
  for (const OpInfo &op : kOps) {
    const ClassTraits &c = class_traits(op.cls);
    if (c.pointwise() != (op.fp64 != nullptr) || (c.pointwise() && op.cuda.empty()))
      return false;
    if (c.pointwise() && (op.min_args != c.scalar_operands || op.max_args != c.scalar_operands))
      return false;
  }
  return true;
}
static_assert(pointwise_complete(),
              "every pointwise op needs fp64 semantics and a CUDA expression");

// Ops of a reducing class (reductions, pools), and only they, have reduction semantics and a
// template reducer.
constexpr bool reductions_complete() {
  for (const OpInfo &op : kOps) {
    bool reduce = class_traits(op.cls).reduces();
    if (reduce != (op.reduce != nullptr) || reduce == op.reducer.empty())
      return false;
  }
  return true;
}
static_assert(reductions_complete(), "every reduction and pool needs fp64 semantics and a reducer");
#endif

} // namespace

Span<OpInfo> all_ops() { return kOps; }

} // namespace kfuse::ir
