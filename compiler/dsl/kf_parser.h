// The .kf parser behind parse_kf (parser.h has the grammar), one class whose parts live in the
// files named for them:
//   parser.cpp             the pipeline, statements, declarations and tensor types
//   parser_calls.cpp       expressions: names, calls, numeric operands, suggestions for unknown ops
//   parser_attributes.cpp  attribute values: numbers, names, strings, extents and shapes
// Internal to compiler/dsl: nothing outside those files includes it.
#pragma once

#include "compiler/dsl/diagnostics.h"
#include "compiler/dsl/lexer.h"
#include "compiler/dsl/parser.h"
#include "compiler/dsl/source.h"
#include "compiler/ir/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kfuse::dsl::parsing {

using ir::ValueId;

// "; did you mean 'softmax'?" for the closest candidate within edit distance 2 (the first
// one on a tie), or "". A suggestion must also be closer than the word is long, so that
// an unknown 'x' does not suggest 'h'.
std::string suggestion(std::string_view word, const std::vector<std::string_view> &candidates);

// "an input", "a param", "a state", "a dim": how messages name a declaration's kind.
std::string with_article(std::string_view what);

// A parsed expression: its value and the source it spans (for carets on arguments).
struct Operand {
  ValueId id; // -1 for a number until the call gives it a type
  SourceRange range;
  bool is_call; // a new op value, which an assignment names, rather than a name's value
  std::optional<double> number; // a numeric literal operand (`mul(h, 2.0)`)
};

// The shape of a call as written, for suggestions: its positional arguments and attributes.
struct CallShape {
  int args = 0;
  std::vector<std::string_view> attrs;
};

// A call's arguments as parsed, from its '(' to its ')'.
struct CallArgs {
  std::vector<Operand> args;
  std::map<std::string, ir::AttrValue> attrs;
  std::map<std::string, SourceRange> attr_keys; // where each attribute's name is written
  const Token *close = nullptr;                 // the ')'
};

class Parser {
public:
  Parser(const SourceFile &source, Diagnostics &diags) : diags_(diags), tokens_(lex(source)) {}

  ir::Graph parse();

private:
  // --- tokens ---------------------------------------------------------------------------

  // The token list ends with End or Error, and neither is ever consumed past.
  const Token &peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token &take() {
    const Token &t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size())
      ++pos_;
    return t;
  }
  const Token *accept(TokenKind kind) { return peek().is(kind) ? &take() : nullptr; }
  const Token &expect(TokenKind kind, std::string_view what, const std::vector<Note> &notes = {}) {
    if (!peek().is(kind))
      unexpected(peek(), what, notes);
    return take();
  }
  // A malformed token reports what the lexer found wrong; anything else is "expected X".
  [[noreturn]] void unexpected(const Token &t, std::string_view what,
                               const std::vector<Note> &notes = {}) const {
    if (t.is(TokenKind::Error))
      diags_.error(t.range(), t.error);
    diags_.error(t.range(), fmt::format("expected {}, found {}", what, describe(t)), notes);
  }
  // From the start of `first` to the end of `last`; just `first` when they are on
  // different lines (a caret line shows one source line).
  static SourceRange span(const Token &first, const Token &last) {
    if (first.loc.line != last.loc.line)
      return first.range();
    return {first.loc, last.loc.col + static_cast<uint32_t>(last.text.size()) - first.loc.col};
  }

  // --- statements (parser.cpp) ----------------------------------------------------------

  void statement();
  void dims();
  void declaration();
  void define(const Token &name, std::string_view what);
  void assignment();
  void ret();

  // --- types (parser.cpp) ---------------------------------------------------------------

  ir::TensorType tensor_type();
  ir::Dim extent(std::string_view what = "extent");
  int64_t positive_integer(const Token &t, SourceRange at, std::string_view what) const;
  std::string dim_name(const Token &t) const;

  // --- expressions (parser_calls.cpp) ---------------------------------------------------

  Operand expr(int depth);
  ValueId lookup(const Token &t) const;
  Operand call(int depth, bool statement);
  ir::OpKind callee(const Token &name, int depth, bool statement);
  CallArgs arguments(const ir::OpInfo &info, int depth);
  void check_arguments(const ir::OpInfo &info, const Token &name, const CallArgs &given) const;
  bool is_number_start() const;
  Operand number_operand();
  void type_numbers(const ir::OpInfo &info, const Token &name, std::vector<Operand> &args);
  std::optional<CallShape> call_shape() const;
  static std::string op_suggestion(std::string_view word, const std::optional<CallShape> &shape);
  static std::vector<std::string_view> fitting_ops(const std::optional<CallShape> &shape);
  static std::optional<std::string_view> extension_fitting(std::string_view word,
                                                           const std::optional<CallShape> &shape);
  void check_updates(ValueId id, const std::vector<Operand> &args);

  // --- attribute values (parser_attributes.cpp) -----------------------------------------

  void attribute(const ir::OpInfo &info, std::map<std::string, ir::AttrValue> &attrs,
                 std::map<std::string, SourceRange> &keys);
  ir::AttrValue attr_value(const ir::OpInfo &info, const ir::AttrSpec &spec);
  ir::AttrValue extent_value(const ir::OpInfo &info, const ir::AttrSpec &spec);
  ir::Dim product(std::string_view what = "extent");
  ir::AttrValue shape_value(const ir::OpInfo &info, const ir::AttrSpec &spec);

  struct Declared {
    std::string_view what; // "dim", "input", "param" or "state"
    SourceRange where;
  };
  struct Binding {
    ValueId id;
    SourceRange where; // of the name where it was last bound
  };

  Diagnostics &diags_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  ir::GraphBuilder builder_{std::string()};
  std::vector<std::string> dims_;
  std::map<std::string, Declared, std::less<>> declared_; // dims and declarations
  std::map<std::string, Binding, std::less<>> names_;     // value names, newest binding
  std::map<ValueId, SourceRange> updated_;                // states, where they are updated
  std::optional<SourceRange> return_;
};

} // namespace kfuse::dsl::parsing
