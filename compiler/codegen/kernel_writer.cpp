#include "compiler/codegen/kernel_writer.h"

#include "compiler/codegen/class_codegen.h"
#include "compiler/ir/printer.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

namespace kfuse::codegen {

using namespace ir;

std::string float_literal(double v) {
  if (std::isinf(v))
    return v < 0 ? "-kf::inf()" : "kf::inf()";
  if (v == 0) // "float(-0)" would be +0: the integer 0 negated
    return std::signbit(v) ? "-0.0f" : "0.0f";
  return "float(" + format_number(v) + ")";
}

bool keeps_resident_row(OpKind op) { return class_codegen(op_info(op).cls).keeps_resident_row; }

std::string cuda_type(DType t) {
  switch (t) {
  case DType::F32:
    return "float";
  case DType::BF16:
    return "kf::bf16";
  case DType::F16:
    return "kf::f16";
  case DType::I64:
    return "long long";
  }
  throw CodegenError("internal error: an element type with no CUDA type");
}

KernelWriter::KernelWriter(const plan::Plan &p, const plan::Kernel &k,
                           const std::vector<std::string> &names)
    : p_(p), k_(k), g_(p.graph), names_(names), written_(plan::written(g_, k)) {
  std::vector<ValueId> buffers = k.reads;
  for (ValueId s : k.stores)
    if (!std::count(buffers.begin(), buffers.end(), s))
      buffers.push_back(s);
  for (ValueId b : buffers)
    params_.push_back({LaunchParam::Kind::Buffer, b, {}});
  // An exchanged Column kernel merges the gathered summaries instead of the partials, which the
  // Summary kernel before it merged.
  const bool gathers = k.kind == plan::KernelKind::Column && k.exchanged;
  if (k.stats_of >= 0 && !gathers) {
    params_.push_back({LaunchParam::Kind::PartialMean, k.stats_of, {}});
    params_.push_back({LaunchParam::Kind::PartialM2, k.stats_of, {}});
  }
  if (k.kind == plan::KernelKind::Summary)
    params_.push_back({LaunchParam::Kind::StatsSummary, k.stats_of, {}});
  if (k.row_partials)
    params_.push_back({LaunchParam::Kind::RowPartials, k.rows_of, {}});
  if (k.stats_of >= 0 && gathers)
    params_.push_back({LaunchParam::Kind::GatheredSummaries, k.stats_of, {}});
  for (const std::string &d : g_.dims)
    params_.push_back({LaunchParam::Kind::Dim, -1, d});
  if (std::any_of(k.computes.begin(), k.computes.end(),
                  [&](ValueId id) { return g_[id].op == OpKind::Dropout; })) {
    params_.push_back({LaunchParam::Kind::RngSeed, -1, {}});
    params_.push_back({LaunchParam::Kind::RngOffset, -1, {}});
  }
  // Row kernels with a softmax or normalization pass keep a resident row in shared memory.
  if (std::any_of(k.row_stages.begin(), k.row_stages.end(),
                  [&](ValueId st) { return keeps_resident_row(g_[st].op); }))
    params_.push_back({LaunchParam::Kind::SmemFloats, -1, {}});
}

std::string KernelWriter::var(ValueId v) const { return "v_" + names_.at(static_cast<size_t>(v)); }
std::string KernelWriter::ptr(ValueId v) const { return "p_" + names_.at(static_cast<size_t>(v)); }

std::string KernelWriter::element_type(ValueId v) const {
  return cuda_type(plan::buffer_type(p_, v).dtype);
}

std::string KernelWriter::load(ValueId v, const std::string &index) const {
  return fmt::format("kf::load({} + {})", ptr(v), index);
}

std::string KernelWriter::store(ValueId v, const std::string &index,
                                const std::string &value) const {
  return fmt::format("kf::store({} + {}, {})", ptr(v), index, value);
}

std::string KernelWriter::extent(const Dim &d) {
  if (d.factors.empty())
    return d.is_symbolic() ? dim_var(d.sym) : fmt::format("{}", d.value);
  std::string p = d.value == 1 ? "" : fmt::format("{} * ", d.value);
  for (size_t i = 0; i < d.factors.size(); ++i)
    p += (i ? " * " : "") + dim_var(d.factors[i]);
  return "(" + p + ")";
}

bool KernelWriter::computed_here(ValueId v) const { return plan::computes(k_, v); }

bool KernelWriter::writes(ValueId v) const { return written_.count(v) != 0; }

std::string KernelWriter::operand(ValueId v, bool element, const std::set<ValueId> &given) const {
  if (computed_here(v) || given.count(v))
    return var(v);
  const TensorType &t = g_[v].type;
  const Dim one = Dim::constant(1);
  if (plan::is_column_value(t))
    return load(v, t.shape.back() == one ? "0" : "col");
  if (!element)
    throw CodegenError(fmt::format("internal error: kernel {} reads matrix '{}' per column",
                                   k_.name, names_[static_cast<size_t>(v)]));
  return load(v, fmt::format("static_cast<size_t>({}) * {} + {}", t.shape[0] == one ? "0" : "row",
                             extent(t.shape[1]), t.shape[1] == one ? "0" : "col"));
}

// An attribute in a CUDA expression: a float literal, a choice's or a type's word, or a clamp
// bound left at none (its infinity).
static std::string cuda_attr(const AttrSpec &spec, const AttrValue &a) {
  switch (spec.kind) {
  case AttrKind::Number:
  case AttrKind::OptNumber:
  case AttrKind::Int:
    return float_literal(a.number);
  case AttrKind::Choice:
    return a.dim;
  case AttrKind::Bool:
    return a.number != 0 ? "true" : "false";
  case AttrKind::DType: // a word of a function's name: kf::round_to_bf16
    return a.dim;
  case AttrKind::Extent:
  case AttrKind::Shape:
    break;
  }
  throw CodegenError(fmt::format("internal error: attribute '{}' has no CUDA spelling", spec.name));
}

std::string KernelWriter::statement(ValueId id, bool element,
                                    const std::set<ValueId> &given) const {
  const Value &v = g_[id];
  const OpInfo &info = op_info(v.op);
  if (info.cuda.empty())
    throw CodegenError(
        fmt::format("internal error: kernel {} cannot compute {} inline", k_.name, info.name));
  // The passes remove eval-mode dropouts (simplify_identities); one left would drop elements.
  if (v.op == OpKind::Dropout && p_.mode == Mode::Eval)
    throw CodegenError(
        fmt::format("internal error: kernel {} has a dropout in eval mode", k_.name));
  // Expands the op table's expression: {0}, {1}, ... are the operands, {name} an attribute.
  std::string e;
  std::string_view text = info.cuda;
  for (size_t i = 0; i < text.size(); ++i) {
    size_t close = text[i] == '{' ? text.find('}', i) : std::string_view::npos;
    if (close == std::string_view::npos) {
      e += text[i];
      continue;
    }
    std::string_view key = text.substr(i + 1, close - i - 1);
    i = close;
    if (key[0] >= '0' && key[0] <= '9') {
      std::string x = operand(v.args.at(static_cast<size_t>(key[0] - '0')), element, given);
      // col_affine's optional shift is subtracted from y before the scale (ops.cpp).
      if (v.op == OpKind::ColAffine && key == "0" && v.args.size() == 4)
        x = fmt::format("({} - {})", x, operand(v.args[3], element, given));
      e += x;
      continue;
    }
    if (key == "index") { // the element's row-major index (a random op's counter)
      e += element && !plan::is_column_value(v.type)
               ? fmt::format("static_cast<unsigned long long>(row) * {} + col",
                             extent(v.type.shape[1]))
               : std::string("static_cast<unsigned long long>(col)");
      continue;
    }
    const AttrSpec *spec = nullptr;
    for (const AttrSpec &s : info.attrs)
      spec = s.name == key ? &s : spec;
    if (!spec)
      throw CodegenError(
          fmt::format("internal error: the CUDA expression of {} names '{}'", info.name, key));
    e += cuda_attr(*spec, v.attrs.at(std::string(key)));
  }
  return fmt::format("const float {} = {};\n", var(id), e);
}

static bool is_inline_op(const Value &v) { return !op_info(v.op).cuda.empty(); }

std::vector<ValueId> KernelWriter::column_values() const {
  std::vector<ValueId> out;
  for (ValueId id : k_.computes)
    if (plan::is_column_value(g_[id].type) && is_inline_op(g_[id]))
      out.push_back(id);
  return out;
}

std::string KernelWriter::column_statements(const std::string &indent,
                                            const std::set<ValueId> *only,
                                            const std::set<ValueId> &given) const {
  std::string s;
  for (ValueId id : column_values())
    if (only == nullptr || only->count(id))
      s += indent + statement(id, false, given);
  return s;
}

std::string KernelWriter::element_statements(const std::string &indent,
                                             const std::set<ValueId> &given) const {
  std::string s;
  for (ValueId id : k_.computes)
    if (!plan::is_column_value(g_[id].type) && is_inline_op(g_[id]) && !given.count(id))
      s += indent + statement(id, true, given);
  return s;
}

std::string KernelWriter::tree_statements(const std::string &indent, ValueId root,
                                          const std::set<ValueId> &given) const {
  std::set<ValueId> tree;
  std::vector<ValueId> todo = {root};
  while (!todo.empty()) {
    ValueId cur = todo.back();
    todo.pop_back();
    if (given.count(cur) || !computed_here(cur) || !is_inline_op(g_[cur]) ||
        !tree.insert(cur).second)
      continue;
    todo.insert(todo.end(), g_[cur].args.begin(), g_[cur].args.end());
  }
  std::string s;
  for (ValueId id : k_.computes)
    if (tree.count(id))
      s += indent + statement(id, !plan::is_column_value(g_[id].type), given);
  return s;
}

std::string KernelWriter::param_list() const {
  std::vector<std::string> parts;
  for (const LaunchParam &lp : params_) {
    switch (lp.kind) {
    case LaunchParam::Kind::Buffer:
      parts.push_back(fmt::format("{}{} *__restrict__ {}", writes(lp.value) ? "" : "const ",
                                  element_type(lp.value), ptr(lp.value)));
      break;
    case LaunchParam::Kind::PartialMean:
      parts.push_back(fmt::format("float *__restrict__ {}_pmean", ptr(lp.value)));
      break;
    case LaunchParam::Kind::PartialM2:
      parts.push_back(fmt::format("float *__restrict__ {}_pm2", ptr(lp.value)));
      break;
    case LaunchParam::Kind::StatsSummary:
      parts.push_back(fmt::format("double *__restrict__ {}_summary", ptr(lp.value)));
      break;
    case LaunchParam::Kind::GatheredSummaries:
      parts.push_back(fmt::format("const double *__restrict__ {}_gathered", ptr(lp.value)));
      break;
    case LaunchParam::Kind::RowPartials: // the GEMM writes them, the row kernel merges them
      parts.push_back(fmt::format("{}float *__restrict__ {}_rowpart",
                                  k_.kind == plan::KernelKind::Gemm ? "" : "const ",
                                  ptr(lp.value)));
      break;
    case LaunchParam::Kind::Dim:
      parts.push_back("int " + dim_var(lp.dim));
      break;
    case LaunchParam::Kind::SmemFloats:
      parts.push_back("int smem_floats");
      break;
    case LaunchParam::Kind::TensorMap:
      parts.push_back(
          fmt::format("const __grid_constant__ kf::sm90::TensorMap {}_map", ptr(lp.value)));
      break;
    case LaunchParam::Kind::RngSeed:
      parts.push_back("unsigned long long rng_seed");
      break;
    case LaunchParam::Kind::RngOffset:
      parts.push_back("unsigned long long rng_offset");
      break;
    case LaunchParam::Kind::Splits:
    case LaunchParam::Kind::SplitPartials:
    case LaunchParam::Kind::SplitCounters:
      throw CodegenError("internal error: split-K parameters are the GEMM entry's, not a "
                         "kernel writer's");
    }
  }
  std::string s;
  for (const std::string &p : parts)
    s += (s.empty() ? "" : ", ") + p;
  return s;
}

std::string KernelWriter::member_declarations(const std::string &indent) const {
  std::string s;
  for (const LaunchParam &lp : params_) {
    if (lp.kind == LaunchParam::Kind::Buffer)
      s += fmt::format("{}{}{} *{};\n", indent, writes(lp.value) ? "" : "const ",
                       element_type(lp.value), ptr(lp.value));
    else if (lp.kind == LaunchParam::Kind::Dim)
      s += fmt::format("{}int {};\n", indent, dim_var(lp.dim));
    else if (lp.kind == LaunchParam::Kind::RngSeed)
      s += indent + "unsigned long long rng_seed;\n";
    else if (lp.kind == LaunchParam::Kind::RngOffset)
      s += indent + "unsigned long long rng_offset;\n";
  }
  return s;
}

std::string KernelWriter::member_initializer(const std::vector<std::string> &extra) const {
  std::string s;
  for (const LaunchParam &lp : params_) {
    if (lp.kind == LaunchParam::Kind::Buffer)
      s += (s.empty() ? "" : ", ") + ptr(lp.value);
    else if (lp.kind == LaunchParam::Kind::Dim)
      s += (s.empty() ? "" : ", ") + dim_var(lp.dim);
    else if (lp.kind == LaunchParam::Kind::RngSeed)
      s += (s.empty() ? "" : ", ") + std::string("rng_seed");
    else if (lp.kind == LaunchParam::Kind::RngOffset)
      s += (s.empty() ? "" : ", ") + std::string("rng_offset");
  }
  for (const std::string &e : extra)
    s += (s.empty() ? "" : ", ") + e;
  return "{" + s + "}";
}

} // namespace kfuse::codegen
