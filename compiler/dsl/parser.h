// The .kf parser: source text to a verified ir::Graph, reporting the first error
// clang-style through the diagnostics engine. docs/DSL.md is the language reference.
//
//   file      := 'pipeline' NAME '{' stmt* '}'
//   stmt      := 'dim' NAME (',' NAME)*
//              | ('input' | 'param' | 'state') NAME ':' dtype '[' extent (',' extent)* ']'
//              | NAME '=' expr
//              | call                          # an effect (bn_update) only
//              | 'return' expr (',' expr)*     # exactly once, last
//   expr      := NAME | call
//   call      := OP '(' [arg (',' arg)*] ')'
//   arg       := expr | NAME '=' attrvalue     # attributes after positional arguments
//   attrvalue := NUMBER | '-' NUMBER | NAME | STRING  # NAME: a dim, a dtype, true or false
//   dtype     := 'f32' | 'f16' | 'bf16'        extent := INTEGER | NAME (a declared dim)
//
// Newlines are whitespace; '#' starts a comment. The statement keywords (pipeline, dim,
// input, param, state, return) cannot be names; `dim` is still an attribute name.
#pragma once

#include "compiler/dsl/diagnostics.h"
#include "compiler/dsl/source.h"
#include "compiler/ir/graph.h"

#include <string>

namespace kfuse::dsl {

// Deeper call nesting is rejected, which bounds the parser's recursion on any input.
inline constexpr int kMaxCallNesting = 64;

// Parses `source`; `diags` must report against the same source. Throws DiagnosticError at
// the first error. Every op value records its op name's location and the origin
// "<op>@<line>"; the top-level call of an assignment carries the assigned name.
ir::Graph parse_kf(const SourceFile &source, Diagnostics &diags);

// Reads and parses a file. A file that cannot be read is reported with its path.
ir::Graph parse_kf_file(const std::string &path);

} // namespace kfuse::dsl
