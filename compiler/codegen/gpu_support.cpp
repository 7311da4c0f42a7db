#include "compiler/codegen/gpu_support.h"

#include "compiler/ir/printer.h"

#include <fmt/format.h>

namespace kfuse::codegen {

using namespace ir;

std::optional<GpuUnsupported> gpu_unsupported(const Graph &g) {
  std::vector<std::string> names = printed_names(g);
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value &v = g.values[i];
    ValueId id = static_cast<ValueId>(i);
    // Ops take the element type of their arguments, so the first non-f32 value is a
    // declaration or a constant: the place to change.
    if (!v.is_effect() && v.type.dtype != DType::F32)
      return GpuUnsupported{
          id,
          fmt::format("{} '{}' is {}; the GPU code generator supports f32 tensors only",
                      v.is_op() ? "the value" : value_kind_name(v.kind), names[i], v.type.str())};
    if (!v.is_op() || !v.attrs.count("dim"))
      continue;
    OpClass cls = op_info(v.op).cls;
    int rank = g[v.args[0]].type.rank();
    double d = v.attr("dim");
    if ((cls == OpClass::Row || cls == OpClass::Reduce) && !(d == -1 || d == rank - 1))
      return GpuUnsupported{
          id, fmt::format("{} over dim={} of {} is not supported on the GPU (only the last axis, "
                          "dim={} or dim=-1)",
                          op_info(v.op).name, format_number(d), g[v.args[0]].type.str(), rank - 1)};
  }
  return std::nullopt;
}

} // namespace kfuse::codegen
