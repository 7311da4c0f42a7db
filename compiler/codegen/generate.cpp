// From a plan's kernel specs to one CUDA translation unit: per kernel, the generated functor
// the template calls and the extern "C" entry point, by the emitter of its kind.
#include "compiler/codegen/embedded_templates.h"
#include "compiler/codegen/emit.h"
#include "compiler/ir/printer.h"
#include "compiler/select/geometry.h"
#include "compiler/select/select.h"

#include <algorithm>
#include <fmt/format.h>
#include <sstream>

namespace kfuse::codegen {

using namespace ir;
using plan::Kernel;
using plan::KernelKind;

namespace {

std::string comment(const Kernel &k) {
  std::string covers, rules;
  for (const std::string &c : k.covers)
    covers += (covers.empty() ? "" : ", ") + c;
  for (const std::string &r : k.rules)
    rules += (rules.empty() ? "" : ", ") + r;
  return fmt::format("// {}: {} ({}){}\n", k.name, covers.empty() ? "-" : covers,
                     plan::kernel_kind_name(k.kind), rules.empty() ? "" : "; " + rules);
}

// Kernel k's source by the emitter of its spec's kind.
std::string emit_kernel(EmitContext &cx, const Kernel &k, const KernelWriter &w,
                        const select::KernelSpec &spec, KernelLaunch &launch) {
  if (const auto *s = std::get_if<select::GemmSpec>(&spec))
    return emit_gemm(cx, k, w, *s, launch);
  if (const auto *s = std::get_if<select::RowSpec>(&spec))
    return emit_row(cx, k, w, *s, launch);
  if (const auto *s = std::get_if<select::ElementwiseSpec>(&spec)) {
    cx.includes.insert("elementwise.cuh");
    return emit_elementwise(cx, k, w, *s, launch);
  }
  if (const auto *s = std::get_if<select::TransposeSpec>(&spec)) {
    cx.includes.insert("transpose.cuh");
    return emit_transpose(cx, k, w, *s, launch);
  }
  cx.includes.insert("col_stats.cuh");
  if (std::holds_alternative<select::ColPartialsSpec>(spec))
    return emit_col_partials(cx, k, w, launch);
  return emit_column(cx, k, w, std::get<select::ColumnSpec>(spec), launch);
}

// The column slices of a kernel's row partials (row_partials_epilogue).
int partial_tiles(const select::KernelSpec &spec) {
  if (const auto *s = std::get_if<select::GemmSpec>(&spec))
    return s->rows.partial_tiles;
  return std::get<select::RowSpec>(spec).partial_tiles;
}

void inline_into(const std::string &source, std::set<std::string> &done, std::string &out) {
  std::istringstream in(source);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("#pragma once", 0) == 0)
      continue;
    if (line.rfind("#include \"", 0) == 0) {
      std::string file = line.substr(10, line.find('"', 10) - 10);
      auto it = embedded_templates().find(file);
      if (it == embedded_templates().end())
        throw CodegenError("no template named '" + file + "'");
      if (done.insert(file).second) {
        out += "// ---- begin " + file + "\n";
        inline_into(it->second, done, out);
        out += "// ---- end " + file + "\n";
      }
      continue;
    }
    out += line + "\n";
  }
}

} // namespace

std::string EmitContext::functor_head(const std::string &type, const KernelWriter &w) const {
  return fmt::format("struct {} {{\n{}", type, w.member_declarations("  "));
}

int EmitContext::row_multiple(ValueId v) const {
  auto it = row_multiples.find(v);
  return it == row_multiples.end() ? 1 : it->second;
}

std::string EmitContext::leading_dim(ValueId v, const Dim &cols) const {
  const int multiple = row_multiple(v);
  if (multiple == 1 || !cols.is_symbolic())
    return KernelWriter::extent(
        cols.is_symbolic() ? cols
                           : Dim::constant((cols.value + multiple - 1) / multiple * multiple));
  return fmt::format("(static_cast<long long>({0}) + {1} - 1) / {1} * {1}",
                     KernelWriter::extent(cols), multiple);
}

void EmitContext::collect_tree(const Kernel &k, ValueId root, const std::set<ValueId> &given,
                               std::set<ValueId> &done) const {
  std::vector<ValueId> todo = {root};
  while (!todo.empty()) {
    ValueId cur = todo.back();
    todo.pop_back();
    if (given.count(cur) || !plan::computes(k, cur) || !done.insert(cur).second)
      continue;
    todo.insert(todo.end(), graph[cur].args.begin(), graph[cur].args.end());
  }
}

Program emit(const plan::Plan &p, const select::Selection &selection, const std::string &arch) {
  const Graph &g = p.graph;
  EmitContext cx{p,
                 g,
                 printed_names(g),
                 selection.partial_rows,
                 selection.row_multiples,
                 {"dtype.cuh", "grid_dependency.cuh", "math.cuh"}};
  Program prog;
  prog.file_name = g.name + ".cu";
  prog.row_multiples = selection.row_multiples;
  std::string body;
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const Kernel &k = p.kernels[i];
    KernelWriter w(p, k, cx.names);
    KernelLaunch launch;
    launch.entry = k.name;
    launch.kind = k.kind;
    for (ValueId id : k.computes)
      if (g[id].op == OpKind::Dropout)
        cx.includes.insert("dropout.cuh");
    body += "\n" + comment(k) + emit_kernel(cx, k, w, selection.kernels.at(i), launch);
    // Kernel-specific parameters (tensor maps, split-K's) come first, then the writer's; every
    // entry waits for the grid before it first (grid_dependency.cuh), which the runtime may then
    // launch early where the target has the wait.
    auto finish = [&](KernelLaunch &l) {
      l.params.insert(l.params.end(), w.params().begin(), w.params().end());
      for (LaunchParam &lp : l.params)
        if (lp.kind == LaunchParam::Kind::PartialMean || lp.kind == LaunchParam::Kind::PartialM2)
          lp.tile_rows = cx.partial_rows.at(lp.value);
        else if (lp.kind == LaunchParam::Kind::RowPartials)
          lp.row_floats = row_partial_floats(g, k, -1) * partial_tiles(selection.kernels.at(i));
      l.geometry.waits_prior_grid = select::waits_prior_grid(arch);
    };
    finish(launch);
    for (KernelLaunch &v : launch.by_rows)
      finish(v);
    prog.launches.push_back(std::move(launch));
  }
  std::string head =
      fmt::format("// Generated by kfuse from pipeline '{}', mode {}. Do not edit.\n"
                  "// {} kernel{}, launched in this order.\n",
                  g.name, mode_name(p.mode), p.kernels.size(), p.kernels.size() == 1 ? "" : "s");
  for (const std::string &inc : cx.includes)
    head += fmt::format("#include \"{}\"\n", inc);
  prog.source = head + body;
  return prog;
}

Program generate(const plan::Plan &p, const Target &target, const GemmTunings &tunings) {
  const plan::Plan view = select::kernel_view(p);
  return emit(view, select::select_kernels(view, target, tunings), target.arch);
}

Program generate(const plan::Plan &p) { return generate(p, Target{}); }

std::string inline_templates(const std::string &source) {
  std::set<std::string> done;
  std::string out;
  inline_into(source, done, out);
  return out;
}

} // namespace kfuse::codegen
