#include "compiler/select/padded_rows.h"

#include "compiler/codegen/gpu_support.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>

namespace kfuse::select {

using namespace ir;
using plan::Kernel;
using plan::KernelKind;

namespace {

// The matrices kernel `k` stores whose emitter takes their leading dimension: a transposed copy
// (always a candidate: its rows are the batch); an elementwise kernel's value (without column
// partials); a GEMM epilogue's value; and, where a GEMM epilogue or a row kernel runs row passes,
// the values of its rows' shape that the passes of codegen::writes_rows_at_pitch's classes store.
std::vector<ValueId> pitched_stores(const Graph &g, const Kernel &k) {
  switch (k.kind) {
  case KernelKind::Transpose:
    return {k.anchor};
  case KernelKind::Elementwise:
    if (k.stats_of < 0 && !k.stores.empty())
      return {k.anchor};
    return {};
  case KernelKind::Gemm:
    if (k.row_stages.empty())
      return {k.stores.begin(), k.stores.begin() + std::min<size_t>(1, k.stores.size())};
    [[fallthrough]];
  case KernelKind::Row: {
    std::vector<ValueId> out;
    for (ValueId v : k.stores)
      if (g[v].type.shape == g[k.rows_of].type.shape &&
          (v == k.rows_of || codegen::writes_rows_at_pitch(op_info(g[v].op).cls)))
        out.push_back(v);
    return out;
  }
  case KernelKind::ColPartials:
  case KernelKind::Column:
  case KernelKind::Summary:
    return {};
  }
  return {};
}

// Whether `v` is worth padding: a matrix of 2-byte elements whose rows are no 16-byte multiple
// (the others' are already), or a transposed copy, whose rows are the batch.
bool needs_padding(const Graph &g, const Kernel &writer, ValueId v) {
  if (writer.kind == KernelKind::Transpose)
    return true;
  const TensorType &t = g[v].type;
  if (t.rank() != 2 || t.dtype == ir::DType::F32)
    return false;
  return t.shape[1].is_symbolic() || t.shape[1].value % 8 != 0;
}

std::string kernel_names(const std::vector<const Kernel *> &ks) {
  std::string s;
  for (size_t i = 0; i < ks.size(); ++i)
    s += (i == 0 ? "" : i + 1 == ks.size() ? " and " : ", ") + ks[i]->name;
  return s;
}

std::map<ValueId, std::vector<const Kernel *>> readers_of(const plan::Plan &p) {
  std::map<ValueId, std::vector<const Kernel *>> readers;
  for (const Kernel &k : p.kernels)
    for (ValueId r : k.reads)
      readers[r].push_back(&k);
  return readers;
}

} // namespace

bool reads_as_operand_only(const Graph &g, const Kernel &k, ValueId v) {
  if (k.kind != KernelKind::Gemm)
    return false;
  for (ValueId id : k.computes)
    for (size_t i = 0; i < g[id].args.size(); ++i)
      if (g[id].args[i] == v && !(id == k.anchor && i < 2))
        return false;
  return true;
}

// A fixpoint: a matrix leaves the set when a kernel reading it does not take the pitch, or a
// GEMM reading it has an operand outside the set, or no GEMM reads it any more.
std::set<ValueId> padded_rows(const plan::Plan &p,
                              const std::function<bool(const Value &)> &hopper_candidate) {
  const Graph &g = p.graph;
  std::set<ValueId> padded;
  for (const Kernel &k : p.kernels)
    for (ValueId v : pitched_stores(g, k))
      if (needs_padding(g, k, v) &&
          std::find(g.outputs.begin(), g.outputs.end(), v) == g.outputs.end())
        padded.insert(v);
  auto takes_pitch = [&](const Kernel &r, ValueId v) {
    switch (r.kind) {
    case KernelKind::Transpose:
      return g[r.anchor].args[0] == v;
    case KernelKind::ColPartials:
      return r.stats_of == v;
    case KernelKind::Gemm: {
      const Value &mm = g[r.anchor];
      return reads_as_operand_only(g, r, v) && hopper_candidate(mm) && padded.count(mm.args[0]) &&
             padded.count(mm.args[1]);
    }
    default:
      return false;
    }
  };
  const auto readers = readers_of(p);
  for (bool changed = true; changed;) {
    changed = false;
    for (auto it = padded.begin(); it != padded.end();) {
      const auto r = readers.find(*it);
      const std::vector<const Kernel *> none, &rs = r == readers.end() ? none : r->second;
      const bool keep = std::all_of(rs.begin(), rs.end(),
                                    [&](const Kernel *k) { return takes_pitch(*k, *it); }) &&
                        std::any_of(rs.begin(), rs.end(),
                                    [](const Kernel *k) { return k->kind == KernelKind::Gemm; });
      changed = changed || !keep;
      it = keep ? std::next(it) : padded.erase(it);
    }
  }
  return padded;
}

std::string padding_text(const plan::Plan &p, const std::vector<std::string> &names,
                         const std::set<ValueId> &padded, ValueId a, ValueId b) {
  if (!padded.count(a) || !padded.count(b))
    return "";
  const auto readers = readers_of(p);
  auto written = [&](ValueId v) {
    const auto w = std::find_if(p.kernels.begin(), p.kernels.end(), [&](const Kernel &k) {
      return std::count(k.stores.begin(), k.stores.end(), v) != 0;
    });
    std::vector<const Kernel *> others;
    if (const auto r = readers.find(v); r != readers.end())
      for (const Kernel *k : r->second)
        if (k->kind != KernelKind::Gemm)
          others.push_back(k);
    return fmt::format("{} ({}{}{})", names.at(static_cast<size_t>(v)),
                       w->kind == KernelKind::Transpose ? "a transposed copy by " : "by ", w->name,
                       others.empty() ? "" : ", read at that pitch by " + kernel_names(others));
  };
  return fmt::format("; its operands {} and {} are written with rows padded to 16 bytes, which "
                     "TMA reads at any inner dim",
                     written(a), written(b));
}

} // namespace kfuse::select
