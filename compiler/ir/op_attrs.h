// The attribute specs of the op table (compiler/ir/ops.cpp): the helpers that build them, the
// lists the ops take, in canonical (printed) order, and the constraints between attributes
// (defined in compiler/ir/attributes.cpp). Only the table and those definitions include this
// header.
#pragma once

#include "compiler/ir/ops.h"

#include <optional>
#include <string>
#include <string_view>

namespace kfuse::ir::op_attrs {

// hardtanh: min_val < max_val.
std::optional<std::string> min_below_max(const AttrMap &a);
// clamp: at least one bound.
std::optional<std::string> some_bound(const AttrMap &a);

constexpr AttrSpec number(std::string_view name, double def, Range r = {}) {
  return {name, AttrKind::Number, false, def, {}, r};
}
constexpr AttrSpec required(std::string_view name, AttrKind kind) {
  return {name, kind, true, 0, {}, {}};
}
constexpr AttrSpec choice(std::string_view name, std::string_view words) {
  return {name, AttrKind::Choice, false, 0, words, {}};
}
constexpr AttrSpec optional_number(std::string_view name, double none, Range r = {}) {
  return {name, AttrKind::OptNumber, false, none, {}, r};
}
constexpr AttrSpec required_int(std::string_view name, Range r = {}) {
  return {name, AttrKind::Int, true, 0, {}, r};
}
constexpr AttrSpec optional_int(std::string_view name, double def, Range r) {
  return {name, AttrKind::Int, false, def, {}, r};
}
constexpr AttrSpec boolean(std::string_view name, bool def) {
  return {name, AttrKind::Bool, false, def ? 1.0 : 0.0, {}, {}};
}
// A Bool that is false unless written, printed only where true.
constexpr AttrSpec mark(std::string_view name) {
  AttrSpec spec = boolean(name, false);
  spec.printed_at_default = false;
  return spec;
}
inline constexpr Range positive{0, kInf, true, false};
inline constexpr Range non_negative{0, kInf, false, false};
inline constexpr Range unit{0, 1, false, false};
// A count or a width the kernels take as an int: an integer in [1, kMaxKernelInt].
inline constexpr Range positive_int{1, kMaxKernelInt, false, false, true};

inline constexpr AttrSpec kBatchNormAttrs[] = {number("eps", 1e-5, positive),
                                               number("momentum", 0.1, unit)};
inline constexpr AttrSpec kLeakyReluAttrs[] = {number("negative_slope", 0.01)};
inline constexpr AttrSpec kGeluAttrs[] = {choice("approximate", "none|tanh")};
inline constexpr AttrSpec kHardtanhAttrs[] = {number("min_val", -1.0), number("max_val", 1.0)};
inline constexpr AttrSpec kClampAttrs[] = {optional_number("min", -kInf),
                                           optional_number("max", kInf)};
inline constexpr AttrSpec kSoftplusAttrs[] = {number("beta", 1.0, positive),
                                              number("threshold", 20.0)};
inline constexpr AttrSpec kEluAttrs[] = {number("alpha", 1.0)};
inline constexpr AttrSpec kDimAttrs[] = {required_int("dim")};
inline constexpr AttrSpec kReduceAttrs[] = {required_int("dim"), boolean("keepdim", false)};
inline constexpr AttrSpec kVarAttrs[] = {required_int("dim"), boolean("keepdim", false),
                                         number("correction", 1.0, non_negative)};
inline constexpr AttrSpec kLayerNormAttrs[] = {number("eps", 1e-5, positive)};
// PyTorch's F.rms_norm default: eps=None means torch.finfo(torch.float32).eps.
inline constexpr AttrSpec kRmsNormAttrs[] = {number("eps", 1.1920928955078125e-07, positive)};
inline constexpr AttrSpec kGroupNormAttrs[] = {required_int("groups", positive_int),
                                               number("eps", 1e-5, positive)};
// PyTorch's stride=None: the window's own width.
inline constexpr AttrSpec kPoolAttrs[] = {required_int("kernel_size", positive_int),
                                          optional_number("stride", kInf, positive_int)};
// PyTorch's default p; `stream` defaults to the op's ordinal among the graph's dropouts
// (GraphBuilder::op), so that every dropout draws its own stream.
inline constexpr AttrSpec kDropoutAttrs[] = {number("p", 0.5, {0, 1, false, true}),
                                             optional_int("stream", 0, {0, kMaxDropoutStream})};
// Column statistics: `local=true` takes one rank's rows alone where a pipeline exchanges batch
// statistics across ranks (ir::is_batch_statistic).
inline constexpr AttrSpec kColStatAttrs[] = {mark("local")};
inline constexpr AttrSpec kShapeAttrs[] = {required("shape", AttrKind::Shape)};
inline constexpr AttrSpec kBnUpdateAttrs[] = {{"momentum", AttrKind::Number, true, 0, {}, unit},
                                              required("count", AttrKind::Extent)};
inline constexpr AttrSpec kConstantAttrs[] = {required("value", AttrKind::Number),
                                              required("dtype", AttrKind::DType)};
inline constexpr AttrSpec kCastAttrs[] = {required("dtype", AttrKind::DType)};
// The pools' gradients: the forward's window, its stride resolved; avg_pool1d's also the
// forward's feature count, which its gradient's width does not give (windows may leave a tail).
inline constexpr AttrSpec kMaxPoolGradAttrs[] = {required_int("kernel_size", positive_int),
                                                 required_int("stride", positive_int)};
// PyTorch's defaults; ignore_index is any int, as PyTorch's (an index in [0, C) ignores a class).
inline constexpr AttrSpec kCrossEntropyAttrs[] = {
    optional_int("ignore_index", -100, {-kInf, kInf, false, false, true}),
    choice("reduction", "mean|none|sum"), number("label_smoothing", 0.0, unit)};
// cross_entropy_rows: `weight=true` gives each row's weight in the mean instead of its loss.
inline constexpr AttrSpec kCrossEntropyRowsAttrs[] = {
    optional_int("ignore_index", -100, {-kInf, kInf, false, false, true}),
    number("label_smoothing", 0.0, unit), mark("weight")};
inline constexpr AttrSpec kAvgPoolGradAttrs[] = {required_int("kernel_size", positive_int),
                                                 required_int("stride", positive_int),
                                                 required_int("features", positive_int)};

} // namespace kfuse::ir::op_attrs
