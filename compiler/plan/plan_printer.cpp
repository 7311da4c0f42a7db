#include "compiler/plan/plan_printer.h"

#include "compiler/ir/printer.h"
#include "compiler/ir/views.h"

#include "kfuse/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>

namespace kfuse::plan {

using namespace ir;

namespace {

// Byte counts are products of extents up to 2^31-1 each: two symbolic dims bound near the
// limit overflow int64, which is reported rather than printed as a negative count.
[[noreturn]] void byte_count_overflow(const Graph &g) {
  throw Error(fmt::format(
      "{}a byte count exceeds {} at these dim values",
      g.name.empty() ? "" : "pipeline '" + g.name + "': ", std::numeric_limits<int64_t>::max()));
}

int64_t checked_mul(int64_t a, int64_t b, const Graph &g) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    byte_count_overflow(g);
  return r;
}

int64_t checked_add(int64_t a, int64_t b, const Graph &g) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    byte_count_overflow(g);
  return r;
}

// Bytes of a set of tensors as a sum of monomials in the unbound dims.
std::string bytes_sum(const Graph &g, const std::vector<TensorType> &types,
                      const DimBindings &dims) {
  std::map<std::string, int64_t> terms; // monomial ("" for constants, "N", "N*M") -> coefficient
  for (const TensorType &t : types) {
    int64_t c = dtype_bytes(t.dtype);
    std::string mono;
    for (const Dim &d : t.shape) {
      // A constant, a dim, or a product of dims and a constant (a reshape's B*T).
      std::vector<std::string> factors = d.sym.empty() ? d.factors : std::vector{d.sym};
      if (d.sym.empty())
        c = checked_mul(c, d.value, g);
      for (const std::string &f : factors) {
        auto it = dims.find(f);
        if (it != dims.end())
          c = checked_mul(c, it->second, g);
        else
          mono += (mono.empty() ? "" : "*") + f;
      }
    }
    terms[mono] = checked_add(terms[mono], c, g);
  }
  std::string s;
  for (const auto &[mono, c] : terms)
    s += (s.empty() ? "" : " + ") +
         (mono.empty() ? fmt::format("{}", c) : fmt::format("{}*{}", mono, c));
  return s.empty() ? "0" : s;
}

std::string join(const std::vector<std::string> &items, std::string_view sep) {
  std::string s;
  for (const std::string &i : items)
    s += (s.empty() ? "" : std::string(sep)) + i;
  return s;
}

std::vector<std::string> names_of(const std::vector<std::string> &names,
                                  const std::vector<ValueId> &ids) {
  std::vector<std::string> out;
  for (ValueId id : ids)
    out.push_back(names[static_cast<size_t>(id)]);
  return out;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string json_array(const std::vector<std::string> &items) {
  std::vector<std::string> quoted;
  for (const std::string &i : items)
    quoted.push_back(json_string(i));
  return "[" + join(quoted, ", ") + "]";
}

// "batchnorm@12" -> "batchnorm"
std::vector<std::string> op_names(const std::vector<std::string> &covers) {
  std::vector<std::string> out;
  for (const std::string &c : covers)
    out.push_back(c.substr(0, c.find('@')));
  return out;
}

// The buffer types of stored values (plan.h: Intermediate).
std::vector<TensorType> buffer_types(const Plan &p, const std::vector<ValueId> &ids) {
  std::vector<TensorType> out;
  for (ValueId id : ids)
    out.push_back(buffer_type(p, id));
  return out;
}

std::vector<ValueId> effects_of(const Graph &g, const Kernel &k) {
  std::vector<ValueId> out;
  for (ValueId id : k.computes)
    if (g[id].is_effect())
      out.push_back(id);
  return out;
}

// "h f32[B*T, 64] = reshape(x, shape=[B*T, 64]): the buffer of x", one per view; a view of a
// value no kernel stores is that value, computed inline by the kernels reading the view.
std::vector<std::string> view_lines(const Plan &p, const std::vector<std::string> &names) {
  const Graph &g = p.graph;
  std::set<ValueId> stored;
  for (const Kernel &k : p.kernels)
    stored.insert(k.stores.begin(), k.stores.end());
  std::vector<std::string> lines;
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value &v = g.values[i];
    if (!v.is_op() || op_info(v.op).cls != OpClass::View)
      continue;
    const AttrSpec &spec = op_info(v.op).attrs[0];
    const ValueId source = view_source(g, static_cast<ValueId>(i));
    const std::string &of = names[static_cast<size_t>(source)];
    lines.push_back(fmt::format("  {} {} = {}({}, {}={}): {}", names[i], v.type.str(),
                                op_info(v.op).name, names[static_cast<size_t>(v.args[0])],
                                spec.name, format_attr(spec, v.attrs.at(std::string(spec.name))),
                                !g[source].is_op() || stored.count(source)
                                    ? "the buffer of " + of
                                    : of + ", computed inline where read"));
  }
  return lines;
}

} // namespace

std::string bytes_text(const TensorType &t, const DimBindings &dims) {
  return bytes_sum(Graph{}, {t}, dims);
}

int64_t bytes_moved(const Plan &p, const DimBindings &dims) {
  const Graph &g = p.graph;
  auto bytes = [&](ValueId id) {
    TensorType t = buffer_type(p, id);
    int64_t b = dtype_bytes(t.dtype);
    for (int64_t extent : concrete_shape(t, dims))
      b = checked_mul(b, extent, g);
    return b;
  };
  int64_t total = 0;
  for (const Kernel &k : p.kernels) {
    for (ValueId id : k.reads)
      total = checked_add(total, bytes(id), g);
    for (ValueId id : k.stores)
      total = checked_add(total, bytes(id), g);
    for (ValueId e : effects_of(g, k))
      total = checked_add(total, checked_add(bytes(g[e].args[0]), bytes(g[e].args[1]), g), g);
  }
  return total;
}

namespace {

// Where each rounding of a GEMM operand (a cast to bf16/f16: precision bf16's; round_tf32:
// precision tf32's weights) runs: in a kernel of its own once per bind (a weight) or every run
// (an input), or fused into the kernel that computes its operand, which then stores the rounded
// value. Empty without roundings.
std::string roundings_text(const Plan &p, const std::vector<std::string> &names) {
  const Graph &g = p.graph;
  auto rounding = [&](ValueId id) {
    const Value &v = g[id];
    return v.op == OpKind::RoundTf32 || (v.op == OpKind::Cast && v.type.dtype != DType::F32);
  };
  std::string s;
  for (const Kernel &k : p.kernels)
    for (ValueId id : k.computes) {
      if (!rounding(id))
        continue;
      const Value &v = g[id];
      bool alone = true;
      for (ValueId c : k.computes)
        alone = alone && rounding(c);
      std::string where = k.per_bind ? "once per bind, " + k.name
                          : alone    ? "every run, " + k.name
                                     : "fused into " + k.name + ", which stores it";
      s += fmt::format("  {} = {} of {}{}: {}\n", names[static_cast<size_t>(id)], v.type.str(),
                       names[static_cast<size_t>(v.args[0])],
                       v.op == OpKind::RoundTf32 ? " rounded to tf32" : "", where);
    }
  return s.empty() ? s : "\nroundings\n" + s;
}

// The column statistics kernel `k` merges ("partials(h)", or every rank's gathered summaries
// where the plan exchanges them), and those it writes; "" where none.
std::string statistics_read(const Plan &p, const Kernel &k, const std::vector<std::string> &names) {
  if (k.stats_of < 0 || (k.kind != KernelKind::Summary && k.kind != KernelKind::Column))
    return {};
  const std::string &of = names[static_cast<size_t>(k.stats_of)];
  if (k.kind == KernelKind::Column && k.exchanged)
    return fmt::format("summaries({}) of {} rank{}, all-gathered", of, p.stats_ranks,
                       p.stats_ranks == 1 ? "" : "s");
  return fmt::format("partials({})", of);
}

// Whether a Summary kernel summarizes matrix `v` for the all-gather.
bool summarized(const Plan &p, ValueId v) {
  return std::any_of(p.kernels.begin(), p.kernels.end(), [v](const Kernel &k) {
    return k.kind == KernelKind::Summary && k.stats_of == v;
  });
}

// The row partials a GEMM kernel writes or a row kernel merges (row_partials_epilogue), "" where
// none: "row partials(h): sum t3, logsumexp t4".
std::string row_partials_text(const Plan &p, const Kernel &k,
                              const std::vector<std::string> &names) {
  if (!k.row_partials)
    return {};
  std::vector<std::string> of;
  for (ValueId st : k.row_stages)
    if (p.graph[st].is_op() && op_info(p.graph[st].op).cls == OpClass::Reduce)
      of.push_back(
          fmt::format("{} {}", op_info(p.graph[st].op).name, names[static_cast<size_t>(st)]));
  return fmt::format("row partials({}): {}", names[static_cast<size_t>(k.rows_of)], join(of, ", "));
}

std::string statistics_written(const Kernel &k, const std::vector<std::string> &names) {
  if (k.stats_of < 0 || k.kind == KernelKind::Column)
    return {};
  const std::string &of = names[static_cast<size_t>(k.stats_of)];
  return k.kind == KernelKind::Summary
             ? fmt::format("summary({}): count, mean, M2 per feature, for the all-gather", of)
             : fmt::format("partials({})", of);
}

} // namespace

std::string print_plan_text(const Plan &p, const DimBindings &dims) {
  const Graph &g = p.graph;
  std::vector<std::string> names = printed_names(g);
  std::string s = fmt::format("plan {} (mode {}): {} kernel{}\n", g.name, mode_name(p.mode),
                              p.kernels.size(), p.kernels.size() == 1 ? "" : "s");
  std::vector<ValueId> all_reads, all_writes;
  for (const Kernel &k : p.kernels) {
    s += fmt::format("\n{} ({})\n", k.name, kernel_kind_name(k.kind));
    s += fmt::format("  covers   {}\n", join(k.covers, ", "));
    s += fmt::format("  rules    {}\n", join(k.rules, ", "));
    if (k.per_bind)
      s += "  runs     once per bind: it reads params only\n";
    for (ValueId id : k.computes) {
      const Value &v = g[id];
      std::vector<std::string> parts = names_of(names, v.args);
      for (const AttrSpec &spec : op_info(v.op).attrs) {
        const AttrValue &a = v.attrs.at(std::string(spec.name));
        if (printed(spec, a))
          parts.push_back(std::string(spec.name) + "=" + format_attr(spec, a));
      }
      std::string args = join(parts, ", ");
      std::string lhs = v.is_effect() ? "" : names[static_cast<size_t>(id)] + " = ";
      s += fmt::format("  {}{}{}({})\n", id == k.computes.front() ? "op       " : "         ", lhs,
                       op_info(v.op).name, args);
    }
    std::vector<std::string> reads, writes;
    for (ValueId r : k.reads)
      reads.push_back(fmt::format("{} {}", names[static_cast<size_t>(r)], buffer_type(p, r).str()));
    if (std::string merged = statistics_read(p, k, names); !merged.empty())
      reads.push_back(merged);
    if (std::string partials = row_partials_text(p, k, names);
        !partials.empty() && k.kind == KernelKind::Row)
      reads.push_back(partials + " per column slice");
    for (ValueId w : k.stores)
      writes.push_back(
          fmt::format("{} {}", names[static_cast<size_t>(w)], buffer_type(p, w).str()));
    for (ValueId e : effects_of(g, k))
      writes.push_back(fmt::format("{}, {} (in place)", names[static_cast<size_t>(g[e].args[0])],
                                   names[static_cast<size_t>(g[e].args[1])]));
    if (std::string summarized = statistics_written(k, names); !summarized.empty())
      writes.push_back(summarized);
    if (std::string partials = row_partials_text(p, k, names);
        !partials.empty() && k.kind == KernelKind::Gemm)
      writes.push_back(partials + " per column slice");
    s += fmt::format("  reads    {}\n", reads.empty() ? "-" : join(reads, ", "));
    s += fmt::format("  writes   {}\n", writes.empty() ? "-" : join(writes, ", "));
    for (ValueId w : k.stores)
      if (auto it = p.stored_because.find(w); it != p.stored_because.end())
        s += fmt::format("  stored   {}: {}\n", names[static_cast<size_t>(w)], it->second);
    s += fmt::format("  bytes    {} read, {} written\n",
                     bytes_sum(g, buffer_types(p, k.reads), dims),
                     bytes_sum(g, buffer_types(p, k.stores), dims));
    all_reads.insert(all_reads.end(), k.reads.begin(), k.reads.end());
    all_writes.insert(all_writes.end(), k.stores.begin(), k.stores.end());
  }
  std::vector<std::string> views = view_lines(p, names);
  if (!views.empty())
    s += "\nviews (no kernel: each is the buffer it views, under its own shape)\n" +
         join(views, "\n") + "\n";
  s += "\nintermediates";
  if (p.intermediates.empty() && p.partials.empty())
    s += " none";
  s += "\n";
  for (const Intermediate &i : p.intermediates)
    s += fmt::format("  {} {} ({} B)\n", names[static_cast<size_t>(i.value)], i.type.str(),
                     bytes_text(i.type, dims));
  for (ValueId v : p.partials) {
    s += fmt::format("  partials({}): count, mean, M2 per column per row tile\n",
                     names[static_cast<size_t>(v)]);
    if (summarized(p, v))
      s += fmt::format("  summary({0}) and summaries({0}): count, mean, M2 per column, in "
                       "double, of this rank and of all {1} ranks (all-gathered by the run)\n",
                       names[static_cast<size_t>(v)], p.stats_ranks);
  }
  s += fmt::format("total bytes moved (tensors, partials excluded): {} read, {} written\n",
                   bytes_sum(g, buffer_types(p, all_reads), dims),
                   bytes_sum(g, buffer_types(p, all_writes), dims));
  return s + roundings_text(p, names);
}

namespace {

// `"row_partials": [...], ` (the reductions whose row partials the kernel writes or merges),
// present only where it does, so other plans read as before.
std::string row_partials_json(const Graph &g, const Kernel &k,
                              const std::vector<std::string> &names) {
  if (!k.row_partials)
    return {};
  std::vector<std::string> of;
  for (ValueId st : k.row_stages)
    if (op_info(g[st].op).cls == OpClass::Reduce)
      of.push_back(names[static_cast<size_t>(st)]);
  return fmt::format("\"row_partials\": {}, ", json_array(of));
}

} // namespace

std::string print_plan_json(const Plan &p, const DimBindings &dims) {
  const Graph &g = p.graph;
  std::vector<std::string> names = printed_names(g);
  std::vector<std::string> kernels;
  for (const Kernel &k : p.kernels) {
    std::vector<std::string> computes;
    for (ValueId id : k.computes)
      computes.push_back(std::string(op_info(g[id].op).name));
    kernels.push_back(fmt::format(
        "    {{\"name\": {}, \"kind\": {}, \"ops\": {}, \"op_sites\": {}, \"rules\": {}, "
        "\"computes\": {}, \"reads\": {}, \"writes\": {}, \"stats_of\": {}, {}\"per_bind\": {}, "
        "\"bytes_read\": {}, \"bytes_written\": {}}}",
        json_string(k.name), json_string(kernel_kind_name(k.kind)), json_array(op_names(k.covers)),
        json_array(k.covers), json_array(k.rules), json_array(computes),
        json_array(names_of(names, k.reads)), json_array(names_of(names, k.stores)),
        k.stats_of >= 0 ? json_string(names[static_cast<size_t>(k.stats_of)]) : "null",
        row_partials_json(g, k, names), k.per_bind ? "true" : "false",
        json_string(bytes_sum(g, buffer_types(p, k.reads), dims)),
        json_string(bytes_sum(g, buffer_types(p, k.stores), dims))));
  }
  std::vector<std::string> inters;
  for (const Intermediate &i : p.intermediates)
    inters.push_back(fmt::format("    {{\"name\": {}, \"type\": {}, \"bytes\": {}}}",
                                 json_string(names[static_cast<size_t>(i.value)]),
                                 json_string(i.type.str()), json_string(bytes_text(i.type, dims))));
  // Present only where the pipeline has views, so plans without them read as before.
  std::string views;
  for (const std::string &line : view_lines(p, names))
    views += (views.empty() ? "" : ", ") + json_string(line.substr(2));
  return fmt::format("{{\n  \"pipeline\": {},\n  \"mode\": {},\n  \"kernels\": [\n{}\n  ],\n"
                     "{}  \"intermediates\": [{}{}{}]\n}}\n",
                     json_string(g.name), json_string(mode_name(p.mode)), join(kernels, ",\n"),
                     views.empty() ? "" : fmt::format("  \"views\": [{}],\n", views),
                     inters.empty() ? "" : "\n", join(inters, ",\n"), inters.empty() ? "" : "\n  ");
}

} // namespace kfuse::plan
