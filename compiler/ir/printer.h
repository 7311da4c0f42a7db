// The canonical .kf text of a graph. Printing is deterministic and parses back to a
// structurally equal graph, so print(parse(print(g))) == print(g): dumps diff cleanly and
// golden files stay stable.
//
// Layout: the header, one `dim` line, the declarations in order, one statement per op in
// order (`name = op(args, attr=value)`, every attribute in op_info order except a clamp
// bound left at none, numbers in their shortest round-trip form, choices quoted), effects
// as bare calls, and `return a, b`.
#pragma once

#include "compiler/ir/graph.h"

#include <string>
#include <string_view>
#include <vector>

namespace kfuse::ir {

// Longest identifier .kf accepts.
inline constexpr size_t kMaxNameLength = 256;

// Words that start statements; they cannot name a pipeline, a dim or a value.
bool is_kf_keyword(std::string_view word);
// Whether `name` can be written as a name in .kf: an identifier of at most kMaxNameLength
// characters that is not a keyword.
bool is_kf_name(std::string_view name);

// The name each value has in print_kf's output ("" for effects, which print as bare calls).
// Declarations keep their names. An op keeps its name when no earlier value took it; a
// rebound name becomes `h_1`, `h_2`...; unnamed ops (passes make them) and names that are
// not valid .kf become `t1`, `t2`... A made-up name never equals any name in the graph.
std::vector<std::string> printed_names(const Graph &g);

// `g` must pass verify().
std::string print_kf(const Graph &g);

// Op `id`'s statement as print_kf writes it, without indent or newline: `h = add(t1, bias)`,
// an effect as a bare call; `names` are printed_names(g).
std::string print_statement(const Graph &g, const std::vector<std::string> &names, ValueId id);

// Whether .kf spells the attribute: an OptNumber left at "none" (its infinite default, clamp's
// max, a pool's stride) has no spelling and is omitted, which parses back to the same value; so
// is a mark at its default (AttrSpec::printed_at_default: a column statistic's `local=false`).
bool printed(const AttrSpec &spec, const AttrValue &a);

// An attribute value as .kf writes it: `1e-5`, `-1`, `N`, `f32`, `"tanh"`, `true`.
std::string format_attr(const AttrSpec &spec, const AttrValue &a);

// The shortest decimal text that reads back as exactly `v` ("1e-5", "0.1", "8192").
std::string format_number(double v);

} // namespace kfuse::ir
