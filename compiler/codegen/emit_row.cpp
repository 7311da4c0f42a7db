// Row kernels and GEMM row epilogues: the passes over a row, one per row stage of the plan.
#include "compiler/codegen/emit.h"
#include "compiler/ir/infer.h"
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
// store: the later stage whose inline tree reads it (partition.cpp places exactly one).
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

// The passes over a row of rows_of, one per row stage, in plan order: by a block of `threads`
// threads per row reading the stored matrix (a row kernel: `row` = blockIdx.x, `smem` its
// resident row), or by `threads` lanes of a warp (`team`) reading the row `x` the GEMM
// epilogue staged (staged).
// Each pass that reads the row gets a generated functor (col, x) -> value, appended to
// `defs`, computing the stage's input from the loaded element (the prologue), the row index
// and the per-row results of earlier passes (members); the stage's class picks the template.
// Per-row values computed from those results alone (row_result) are computed in the body and
// written by the team's first thread.
std::string row_passes(EmitContext &cx, const Kernel &k, const KernelWriter &w, int threads,
                       bool staged, std::string &defs) {
  const Graph &g = cx.graph;
  const TensorType &t = g[k.rows_of].type;
  for (ValueId st : k.row_stages) {
    const Value &op = g[st];
    if (!op.attrs.count("dim"))
      continue;
    int rank = g[op.args[0]].type.rank();
    double d = op.attr("dim");
    if (!(d == -1 || d == rank - 1))
      throw CodegenError(fmt::format("pipeline '{}': {} over dim={} of {} is not supported on "
                                     "the GPU (only the last axis)",
                                     g.name, op_info(op.op).name, d, g[op.args[0]].type.str()));
  }
  const std::string n = KernelWriter::extent(t.shape.back());
  // A staged row is read at x and written at the row's own address: the templates' row
  // argument is then 0 and their strides unused.
  const std::string src = staged ? "x" : w.ptr(k.rows_of), ld = staged ? "0" : n,
                    row_arg = staged ? "0" : "row", team = staged ? ", team" : "",
                    smem = staged ? "nullptr, 0" : "smem, smem_floats",
                    first = staged ? "team.rank() == 0" : "threadIdx.x == 0";
  auto dst = [&](ValueId st) {
    return staged ? fmt::format("{} + static_cast<long long>(row) * {}", w.ptr(st),
                                KernelWriter::extent(g[st].type.shape.back()))
                  : w.ptr(st);
  };
  std::string body;
  std::vector<ValueId> row_values; // per-row results so far, in registers
  std::set<ValueId> in_entry;      // values the body has computed
  std::set<ValueId> tails;         // row_tail values, computed in their normalization's pass
  bool smem_filled = false;        // an earlier pass left its row in shared memory
  for (size_t i = 0; i < k.row_stages.size(); ++i) {
    const ValueId st = k.row_stages[i];
    if (tails.count(st))
      continue;
    const Value &op = g[st];
    const OpClass cls = op_info(op.op).cls;
    const bool stored = std::count(k.stores.begin(), k.stores.end(), st) != 0;
    const bool row_op = cls == OpClass::Row || cls == OpClass::RowNorm || cls == OpClass::Reduce ||
                        cls == OpClass::Pool;
    if (!row_op && op.type.shape != t.shape) { // row_result: from this row's results only
      std::set<ValueId> given(row_values.begin(), row_values.end());
      given.insert(in_entry.begin(), in_entry.end());
      body += w.tree_statements("  ", st, given);
      body += fmt::format("  if ({})\n    {};\n", first, w.store(st, "row", w.var(st)));
      cx.collect_tree(k, st, given, in_entry);
      row_values.push_back(st);
      continue;
    }
    // A second pass that fills shared memory waits for every thread to be done with the
    // first one's row: row_group_norm reads elements other threads loaded.
    if (!staged && keeps_resident_row(op.op)) {
      if (smem_filled)
        body += "  __syncthreads();\n";
      smem_filled = true;
    }
    // The functor of this pass: the stage's input (a row op's argument, or the elementwise
    // value itself) from the loaded element.
    const ValueId input = row_op ? op.args[0] : st;
    const std::string type = fmt::format("{}_pass{}", k.name, i);
    std::set<ValueId> given(row_values.begin(), row_values.end());
    given.insert(k.rows_of);
    std::string members = w.member_declarations("  ") + "  int row;\n";
    std::vector<std::string> init = {"row"};
    for (ValueId r : row_values) {
      members += fmt::format("  float {};\n", w.var(r));
      init.push_back(w.var(r));
    }
    defs += fmt::format("struct {} {{\n{}  __device__ float operator()(int col, float x) const "
                        "{{\n{}const float {} = x;\n{}{}return {};\n  }}\n}};\n",
                        type, members, cx.indent, w.var(k.rows_of),
                        w.tree_statements(cx.indent, input, given), cx.indent, w.var(input));
    const std::string pre = type + w.member_initializer(init);
    // The functor of a softmax's or normalization's result y at column col (`value`: y, or
    // the normalization's affine of it). Where the kernel does not store the result, the
    // functor computes its row_tail value instead (the elementwise ops after it, which read
    // no other matrix: the row's results, per-feature values), and the pass stores that in
    // `out`.
    ValueId out = st;
    auto post_functor = [&](const std::string &value) {
      std::string post_body = fmt::format("{}return {};\n", cx.indent, value);
      if (!stored) {
        out = row_tail(cx, k, i);
        tails.insert(out);
        std::set<ValueId> at(row_values.begin(), row_values.end());
        at.insert(st);
        post_body =
            fmt::format("{}const float {} = {};\n{}{}return {};\n", cx.indent, w.var(st), value,
                        w.tree_statements(cx.indent, out, at), cx.indent, w.var(out));
      }
      defs += fmt::format("struct {0}_post {{\n{1}  __device__ float operator()(int col, "
                          "float y) const {{\n{2}  }}\n}};\n",
                          type, members, post_body);
      return type + "_post" + w.member_initializer(init);
    };
    switch (cls) {
    case OpClass::Row: {
      cx.includes.insert("row_softmax.cuh");
      const std::string post = post_functor("y");
      body += fmt::format("  kf::row_softmax<{}, {}>({}, {}, {}, {}, {}, {}, {}, {}, {}{});\n",
                          threads, op.op == OpKind::LogSoftmax ? "true" : "false", row_arg, n, src,
                          ld, dst(out), ld, pre, post, smem, team);
      break;
    }
    case OpClass::RowNorm: {
      std::string affine = "y";
      if (op.args.size() > 1)
        affine += " * " + w.load(op.args[1], "col");
      if (op.args.size() > 2)
        affine += " + " + w.load(op.args[2], "col");
      const std::string post = post_functor(affine), eps = float_literal(op.attr("eps"));
      if (op.op == OpKind::GroupNorm) {
        cx.includes.insert("row_group_norm.cuh");
        body += fmt::format("  kf::row_group_norm<{}>({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, "
                            "{}{});\n",
                            threads, row_arg, n, static_cast<int64_t>(op.attr("groups")), src, ld,
                            dst(out), ld, eps, pre, post, smem, team);
        break;
      }
      cx.includes.insert("row_norm.cuh");
      body += fmt::format("  kf::row_norm<{}, {}>({}, {}, {}, {}, {}, {}, {}, {}, {}, {}{});\n",
                          threads, op.op == OpKind::RmsNorm ? "true" : "false", row_arg, n, src, ld,
                          dst(out), ld, eps, pre, post, smem, team);
      break;
    }
    case OpClass::Reduce: {
      cx.includes.insert("row_reduce.cuh");
      double correction = op.attrs.count("correction") ? op.attr("correction") : 0.0;
      body += fmt::format("  const float {} = kf::row_reduce<{}, kf::Reduce::{}>({}, {}, {}, "
                          "{}, {}, {}{});\n",
                          w.var(st), threads, op_info(op.op).reducer, row_arg, n, src, ld,
                          float_literal(correction), pre, team);
      if (stored)
        body += fmt::format("  if ({})\n    {};\n", first, w.store(st, "row", w.var(st)));
      row_values.push_back(st);
      break;
    }
    case OpClass::Pool:
      cx.includes.insert("row_pool.cuh");
      body += fmt::format("  kf::row_pool<{}, kf::Reduce::{}>({}, {}, {}, {}, {}, {}, {}, {}{});\n",
                          threads, op_info(op.op).reducer, row_arg, src, n, dst(st),
                          KernelWriter::extent(op.type.shape.back()),
                          static_cast<int64_t>(op.attr("kernel_size")), pool_stride(op.attrs), pre,
                          team);
      break;
    case OpClass::Gemm:
    case OpClass::Norm:
    case OpClass::Binary:
    case OpClass::Unary:
    case OpClass::Random:
    case OpClass::ColReduce:
    case OpClass::ColAffine:
    case OpClass::Constant:
      cx.includes.insert("row_map.cuh");
      body += fmt::format("  kf::row_map<{}>({}, {}, {}, {}, {}, {}, {}{});\n", threads, row_arg, n,
                          src, ld, dst(st), ld, pre, team);
      break;
    case OpClass::Effect:
    case OpClass::View: // the matrix view reads through views (ir::matrix_view)
      throw CodegenError(fmt::format("internal error: kernel {} has {} as a row pass", k.name,
                                     op_class_name(cls)));
    }
  }
  return body;
}

// Adds to `done` the inline values of kernel `k` that `root`'s tree computes (as

} // namespace

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
  body += row_passes(cx, k, w, threads, false, defs);
  return defs + fmt::format("extern \"C\" __global__ void __launch_bounds__({})\n{}({}) {{\n{}}}\n",
                            threads, k.name, w.param_list(), body);
}

std::string emit_gemm_rows(EmitContext &cx, const Kernel &k, const KernelWriter &w,
                           const select::RowSpec &spec, const std::string &type) {
  const int lanes = spec.threads;
  std::string defs;
  std::istringstream passes(row_passes(cx, k, w, lanes, true, defs));
  std::string body, line;
  while (std::getline(passes, line))
    body += "  " + line + "\n";
  return defs + fmt::format("struct {} {{\n{}  static constexpr bool ENABLED = true;\n"
                            "  static constexpr int LANES = {};\n"
                            "  __device__ void operator()(int row, const kf::Staged *x, "
                            "kf::LaneTeam<LANES> team) const {{\n{}  }}\n}};\n",
                            type, w.member_declarations("  "), lanes, body);
}

} // namespace kfuse::codegen
