// Row kernels and GEMM row epilogues: the passes over a row, one per row stage of the plan.
#include "compiler/codegen/class_codegen.h"
#include "compiler/codegen/emit.h"
#include "compiler/codegen/row_passes.h"
#include "compiler/ir/infer.h"
#include "compiler/ir/op_class.h"
#include "compiler/ir/printer.h"
#include "compiler/select/geometry.h"
#include "templates/row_kernel.cuh"

#include <algorithm>
#include <fmt/format.h>
#include <sstream>

namespace kfuse::codegen {

using namespace ir;
using plan::Kernel;

namespace {

// The row_tail value of the softmax or normalization at k.row_stages[i], which k does not
// store: the later stage whose inline tree reads it (partition_rows.cpp places exactly one).
ValueId row_tail(const EmitContext &cx, const Kernel &k, size_t i) {
  const Graph &g = cx.graph;
  const ValueId norm = k.row_stages[i];
  for (size_t j = i + 1; j < k.row_stages.size(); ++j) {
    std::set<ValueId> tree;
    cx.collect_tree(k, k.row_stages[j], {}, tree);
    if (tree.count(norm))
      return k.row_stages[j];
  }
  throw CodegenError(fmt::format("internal error: {} neither stores {} nor computes a value "
                                 "after it",
                                 k.name, g[norm].name));
}

} // namespace

RowPasses::RowPasses(EmitContext &cx, const Kernel &k, const KernelWriter &w, int threads,
                     bool staged, int partial_tiles)
    : cx_(cx), g_(cx.graph), k_(k), w_(w), threads_(threads), staged_(staged),
      partial_tiles_(partial_tiles), n_(KernelWriter::extent(g_[k.rows_of].type.shape.back())),
      // A staged row is read at x and written at the row's own address: the templates' row
      // argument is then 0 and their strides unused.
      src_(staged ? "x" : w.ptr(k.rows_of)), ld_(staged ? "0" : n_), row_arg_(staged ? "0" : "row"),
      team_(staged ? ", team" : ""), smem_(staged ? "nullptr, 0" : "smem, smem_floats"),
      first_(staged ? "team.rank() == 0" : "threadIdx.x == 0") {}

std::string RowPasses::run(std::string &defs) {
  check_last_axis();
  const TensorType &t = g_[k_.rows_of].type;
  for (size_t i = 0; i < k_.row_stages.size(); ++i) {
    const ValueId st = k_.row_stages[i];
    if (tails_.count(st))
      continue;
    const bool row_op = class_traits(op_info(g_[st].op).cls).row_op();
    if (!row_op && g_[st].type.shape != t.shape)
      row_result(st);
    else if (row_op && partial_tiles_ > 0 && !staged_)
      merge(st);
    else
      pass(i, st, row_op, defs);
  }
  return body_;
}

void RowPasses::check_last_axis() const {
  for (ValueId st : k_.row_stages) {
    const Value &op = g_[st];
    if (!op.attrs.count("dim"))
      continue;
    int rank = g_[op.args[0]].type.rank();
    double d = op.attr("dim");
    if (!(d == -1 || d == rank - 1))
      throw CodegenError(fmt::format("pipeline '{}': {} over dim={} of {} is not supported on "
                                     "the GPU (only the last axis)",
                                     g_.name, op_info(op.op).name, d, g_[op.args[0]].type.str()));
  }
}

std::string RowPasses::dst(ValueId st) const {
  return staged_ ? fmt::format("{} + static_cast<long long>(row) * {}", w_.ptr(st),
                               cx_.leading_dim(st, g_[st].type.shape.back()))
                 : w_.ptr(st);
}

std::string RowPasses::dst_ld(ValueId st) const {
  return staged_ ? ld_ : cx_.leading_dim(st, g_[st].type.shape.back());
}

void RowPasses::row_result(ValueId st) {
  std::set<ValueId> given(row_values_.begin(), row_values_.end());
  given.insert(in_entry_.begin(), in_entry_.end());
  body_ += w_.tree_statements("  ", st, given);
  body_ += fmt::format("  if ({})\n    {};\n", first_, w_.store(st, "row", w_.var(st)));
  cx_.collect_tree(k_, st, given, in_entry_);
  row_values_.push_back(st);
}

void RowPasses::pass(size_t i, ValueId st, bool row_op, std::string &defs) {
  const Value &op = g_[st];
  // A second pass that fills shared memory waits for every thread to be done with the first
  // one's row: row_group_norm reads elements other threads loaded.
  if (!staged_ && keeps_resident_row(op.op)) {
    if (smem_filled_)
      body_ += "  __syncthreads();\n";
    smem_filled_ = true;
  }
  type_ = fmt::format("{}_pass{}", k_.name, i);
  members_ = w_.member_declarations("  ") + "  int row;\n";
  init_ = {"row"};
  for (ValueId r : row_values_) {
    members_ += fmt::format("  float {};\n", w_.var(r));
    init_.push_back(w_.var(r));
  }
  // The functor of this pass: the stage's input (a row op's argument, or the elementwise
  // value itself) from the loaded element.
  const ValueId input = row_op ? op.args[0] : st;
  std::set<ValueId> given(row_values_.begin(), row_values_.end());
  given.insert(k_.rows_of);
  defs += fmt::format("struct {} {{\n{}  __device__ float operator()(int col, float x) const "
                      "{{\n{}const float {} = x;\n{}{}return {};\n  }}\n}};\n",
                      type_, members_, cx_.indent, w_.var(k_.rows_of),
                      w_.tree_statements(cx_.indent, input, given), cx_.indent, w_.var(input));
  call(i, st, type_ + w_.member_initializer(init_), defs);
}

std::string RowPasses::post_functor(size_t i, ValueId st, const std::string &value, ValueId &out,
                                    std::string &defs) {
  out = st;
  std::string post_body = fmt::format("{}return {};\n", cx_.indent, value);
  if (!std::count(k_.stores.begin(), k_.stores.end(), st)) {
    out = row_tail(cx_, k_, i);
    tails_.insert(out);
    std::set<ValueId> at(row_values_.begin(), row_values_.end());
    at.insert(st);
    post_body =
        fmt::format("{}const float {} = {};\n{}{}return {};\n", cx_.indent, w_.var(st), value,
                    w_.tree_statements(cx_.indent, out, at), cx_.indent, w_.var(out));
  }
  defs += fmt::format("struct {0}_post {{\n{1}  __device__ float operator()(int col, "
                      "float y) const {{\n{2}  }}\n}};\n",
                      type_, members_, post_body);
  return type_ + "_post" + w_.member_initializer(init_);
}

void RowPasses::call(size_t i, ValueId st, const std::string &pre, std::string &defs) {
  const OpClass cls = op_info(g_[st].op).cls;
  const RowPass emit = class_codegen(cls).row_pass;
  if (!emit) // views and effects: the matrix view reads through views (ir::matrix_view)
    throw CodegenError(
        fmt::format("internal error: kernel {} has {} as a row pass", k_.name, op_class_name(cls)));
  (this->*emit)(i, st, pre, defs);
}

void RowPasses::softmax(size_t i, ValueId st, const std::string &pre, std::string &defs) {
  const Value &op = g_[st];
  cx_.includes.insert("row_softmax.cuh");
  ValueId out = st;
  const std::string post = post_functor(i, st, "y", out, defs);
  body_ += fmt::format("  kf::row_softmax<{}, {}>({}, {}, {}, {}, {}, {}, {}, {}, {}{});\n",
                       threads_, op.op == OpKind::LogSoftmax ? "true" : "false", row_arg_, n_, src_,
                       ld_, dst(out), dst_ld(out), pre, post, smem_, team_);
}

void RowPasses::reduce(size_t, ValueId st, const std::string &pre, std::string &) {
  const Value &op = g_[st];
  if (partial_tiles_ > 0) { // a GEMM epilogue's value x of column col: added to p
    cx_.includes.insert("row_partials.cuh");
    int floats = 0;
    const int offset = partial_offset(st, floats);
    body_ += fmt::format("  kf::partial_add<kf::Reduce::{}>(p + {}, {}(col, x));\n",
                         op_info(op.op).reducer, offset, pre);
    return;
  }
  cx_.includes.insert("row_reduce.cuh");
  double correction = op.attrs.count("correction") ? op.attr("correction") : 0.0;
  body_ += fmt::format("  const float {} = kf::row_reduce<{}, kf::Reduce::{}>({}, {}, {}, "
                       "{}, {}, {}{});\n",
                       w_.var(st), threads_, op_info(op.op).reducer, row_arg_, n_, src_, ld_,
                       float_literal(correction), pre, team_);
  if (std::count(k_.stores.begin(), k_.stores.end(), st))
    body_ += fmt::format("  if ({})\n    {};\n", first_, w_.store(st, "row", w_.var(st)));
  row_values_.push_back(st);
}

namespace {

// The reducers of kernel k's row partials, in their order ("kf::Reduce::Sum, ...").
std::string partial_reducers(const Graph &g, const Kernel &k) {
  std::string list;
  for (ValueId r : k.row_stages)
    if (op_info(g[r].op).cls == OpClass::Reduce)
      list += fmt::format("{}kf::Reduce::{}", list.empty() ? "" : ", ", op_info(g[r].op).reducer);
  return list;
}

} // namespace

int row_partial_floats(const Graph &g, const Kernel &k, ValueId st) {
  int floats = 0;
  for (ValueId r : k.row_stages) {
    const Value &v = g[r];
    if (op_info(v.op).cls != OpClass::Reduce)
      continue;
    if (r == st)
      return floats;
    ++floats; // one per reduction (row_partials.cuh)
  }
  return st < 0 ? floats : -1;
}

int RowPasses::partial_offset(ValueId st, int &floats) const {
  floats = row_partial_floats(g_, k_, -1);
  const int offset = row_partial_floats(g_, k_, st);
  if (offset < 0)
    throw CodegenError(
        fmt::format("internal error: {} has no row partials of {}", k_.name, g_[st].name));
  return offset;
}

void RowPasses::merge(ValueId st) {
  const Value &op = g_[st];
  cx_.includes.insert("row_partials.cuh");
  int floats = 0;
  const int offset = partial_offset(st, floats);
  body_ += fmt::format("  const float {} = kf::row_merge<{}, kf::Reduce::{}>(row, {}, {}_rowpart, "
                       "{}, {}, {});\n",
                       w_.var(st), threads_, op_info(op.op).reducer, partial_tiles_,
                       w_.ptr(k_.rows_of), floats, offset, n_);
  if (std::count(k_.stores.begin(), k_.stores.end(), st))
    body_ += fmt::format("  if ({})\n    {};\n", first_, w_.store(st, "row", w_.var(st)));
  row_values_.push_back(st);
  in_entry_.insert(st);
}

void RowPasses::pool(size_t, ValueId st, const std::string &pre, std::string &) {
  const Value &op = g_[st];
  cx_.includes.insert("row_pool.cuh");
  body_ +=
      fmt::format("  kf::row_pool<{}, kf::Reduce::{}>({}, {}, {}, {}, {}, {}, {}, {}{});\n",
                  threads_, op_info(op.op).reducer, row_arg_, src_, n_, dst(st),
                  KernelWriter::extent(op.type.shape.back()),
                  static_cast<int64_t>(op.attr("kernel_size")), pool_stride(op.attrs), pre, team_);
}

std::string RowPasses::operand_row(ValueId v) const {
  return fmt::format("{} + static_cast<long long>(row) * {}", w_.ptr(v),
                     KernelWriter::extent(g_[v].type.shape.back()));
}

void RowPasses::pool_grad(size_t, ValueId st, const std::string &pre, std::string &) {
  const Value &op = g_[st];
  cx_.includes.insert("row_pool_grad.cuh");
  const bool max = op.op == OpKind::MaxPool1dBackward;
  body_ += fmt::format(
      "  kf::row_pool_grad<{}, kf::Reduce::{}>({}, {}, {}, {}, {}, {}, {}, {}, {}, {}{});\n",
      threads_, max ? "Max" : "Mean", row_arg_, src_, ld_,
      max ? operand_row(op.args[1]) : "static_cast<const float *>(nullptr)", dst(st), n_,
      KernelWriter::extent(op.type.shape.back()), static_cast<int64_t>(op.attr("kernel_size")),
      static_cast<int64_t>(op.attr("stride")), pre, team_);
}

void RowPasses::norm_grad(size_t i, ValueId st, const std::string &pre, std::string &defs) {
  const Value &op = g_[st];
  cx_.includes.insert("row_group_norm_grad.cuh");
  ValueId out = st;
  const std::string post = post_functor(i, st, "y", out, defs);
  body_ +=
      fmt::format("  kf::row_group_norm_grad<{}>({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, "
                  "{}{});\n",
                  threads_, row_arg_, n_, static_cast<int64_t>(op.attr("groups")), src_, ld_,
                  operand_row(op.args[1]),
                  op.args.size() > 2 ? w_.ptr(op.args[2]) : "static_cast<const float *>(nullptr)",
                  dst(out), dst_ld(out), float_literal(op.attr("eps")), pre, post, team_);
}

namespace {

// The reduction a loss op's pass computes: "none" for a value per row; a sum or a mean over the
// rows is a column sum after columns_from_reductions, and only "sum" remains for the gradient.
std::string loss_reduction(const Value &op) {
  const std::string r = op.attrs.count("reduction") ? op.attrs.at("reduction").dim : "none";
  if (r != "none" && !(r == "sum" && op.op == OpKind::CrossEntropyBackward))
    throw CodegenError(fmt::format("internal error: {} with reduction=\"{}\" reached the code "
                                   "generator; columns_from_reductions rewrites it",
                                   op_info(op.op).name, r));
  return r;
}

// The row's class index. `row` is the row's index in the tensor also where the pass reads a
// staged row (row_arg_ 0), so the target and a per-row gradient are indexed by it, not row_arg_.
std::string target_of_row(const KernelWriter &w, const Value &op) {
  return fmt::format("{}[row]", w.ptr(op.args[1]));
}

} // namespace

void RowPasses::loss(size_t, ValueId st, const std::string &pre, std::string &) {
  const Value &op = g_[st];
  loss_reduction(op);
  cx_.includes.insert("row_cross_entropy.cuh");
  const bool weight = op.attrs.count("weight") && op.attr("weight") != 0;
  body_ +=
      fmt::format("  const float {} = kf::row_cross_entropy<{}>({}, {}, {}, {}, {}, {}LL, {}, "
                  "{}, {}{});\n",
                  w_.var(st), threads_, row_arg_, n_, src_, ld_, target_of_row(w_, op),
                  static_cast<int64_t>(op.attr("ignore_index")),
                  float_literal(op.attr("label_smoothing")), weight ? "true" : "false", pre, team_);
  if (std::count(k_.stores.begin(), k_.stores.end(), st))
    body_ += fmt::format("  if ({})\n    {};\n", first_, w_.store(st, "row", w_.var(st)));
}

void RowPasses::loss_grad(size_t, ValueId st, const std::string &pre, std::string &) {
  const Value &op = g_[st];
  const bool per_row = loss_reduction(op) == "none";
  cx_.includes.insert("row_cross_entropy.cuh");
  body_ += fmt::format(
      "  kf::row_cross_entropy_grad<{}>({}, {}, {}, {}, {}, {}LL, {}, {}, {}, {}, {}{});\n",
      threads_, row_arg_, n_, src_, ld_, target_of_row(w_, op),
      static_cast<int64_t>(op.attr("ignore_index")), float_literal(op.attr("label_smoothing")),
      w_.load(op.args[2], per_row ? "row" : "0"), dst(st), dst_ld(st), pre, team_);
}

void RowPasses::map(size_t, ValueId st, const std::string &pre, std::string &) {
  cx_.includes.insert("row_map.cuh");
  body_ += fmt::format("  kf::row_map<{}>({}, {}, {}, {}, {}, {}, {}{});\n", threads_, row_arg_, n_,
                       src_, ld_, dst(st), dst_ld(st), pre, team_);
}

void RowPasses::norm(size_t i, ValueId st, const std::string &pre, std::string &defs) {
  const Value &op = g_[st];
  std::string affine = "y";
  if (op.args.size() > 1)
    affine += " * " + w_.load(op.args[1], "col");
  if (op.args.size() > 2)
    affine += " + " + w_.load(op.args[2], "col");
  ValueId out = st;
  const std::string post = post_functor(i, st, affine, out, defs),
                    eps = float_literal(op.attr("eps"));
  if (op.op == OpKind::GroupNorm) {
    cx_.includes.insert("row_group_norm.cuh");
    body_ += fmt::format("  kf::row_group_norm<{}>({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, "
                         "{}{});\n",
                         threads_, row_arg_, n_, static_cast<int64_t>(op.attr("groups")), src_, ld_,
                         dst(out), dst_ld(out), eps, pre, post, smem_, team_);
    return;
  }
  cx_.includes.insert("row_norm.cuh");
  body_ += fmt::format("  kf::row_norm<{}, {}>({}, {}, {}, {}, {}, {}, {}, {}, {}, {}{});\n",
                       threads_, op.op == OpKind::RmsNorm ? "true" : "false", row_arg_, n_, src_,
                       ld_, dst(out), dst_ld(out), eps, pre, post, smem_, team_);
}

std::string emit_row(EmitContext &cx, const Kernel &k, const KernelWriter &w,
                     const select::RowSpec &spec, KernelLaunch &launch) {
  const TensorType &t = cx.graph[k.rows_of].type;
  launch.rows = t.rank() == 2 ? t.shape[0] : Dim::constant(1);
  launch.cols = t.shape.back();
  launch.geometry = select::row_geometry(spec, launch.rows, launch.cols);
  const int threads = spec.threads;
  std::string defs, body = "  kf::wait_prior_grid();\n";
  if (spec.resident)
    body += "  extern __shared__ __align__(16) float smem[];\n";
  body += "  const int row = blockIdx.x;\n";
  body += RowPasses(cx, k, w, threads, false, spec.partial_tiles).run(defs);
  return defs + fmt::format("extern \"C\" __global__ void __launch_bounds__({})\n{}({}) {{\n{}}}\n",
                            threads, k.name, w.param_list(), body);
}

std::string emit_gemm_rows(EmitContext &cx, const Kernel &k, const KernelWriter &w,
                           const select::RowSpec &spec, const std::string &type) {
  const int lanes = spec.threads;
  std::string defs;
  std::istringstream passes(RowPasses(cx, k, w, lanes, true, spec.partial_tiles).run(defs));
  std::string body, line;
  while (std::getline(passes, line))
    body += "  " + line + "\n";
  if (k.row_partials) // gemm_epilogue.cuh's Row partials
    return defs +
           fmt::format("struct {0} {{\n{1}  float *{2}_rowpart;\n"
                       "  static constexpr bool ENABLED = true;\n"
                       "  static constexpr bool PARTIALS = true;\n"
                       "  using Partials = kf::RowPartials<{3}>;\n"
                       "  __device__ void add(float *p, int row, int col, float x) const "
                       "{{\n{4}  }}\n"
                       "  __device__ float *out(int row, int tile) const {{\n"
                       "    return {2}_rowpart + (static_cast<long long>(row) * {5} + tile) * "
                       "Partials::FLOATS;\n  }}\n"
                       "}};\n",
                       type, w.member_declarations("  "), w.ptr(k.rows_of),
                       partial_reducers(cx.graph, k), body, spec.partial_tiles);
  return defs + fmt::format("struct {} {{\n{}  static constexpr bool ENABLED = true;\n"
                            "  static constexpr int LANES = {};\n"
                            "  __device__ void operator()(int row, const kf::Staged *x, "
                            "kf::LaneTeam<LANES> team) const {{\n{}  }}\n}};\n",
                            type, w.member_declarations("  "), lanes, body);
}

} // namespace kfuse::codegen
