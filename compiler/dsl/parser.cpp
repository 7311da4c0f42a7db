#include "compiler/dsl/parser.h"

#include "compiler/dsl/lexer.h"
#include "compiler/ir/infer.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

namespace kfuse::dsl {
namespace {

using ir::ValueId;

// Levenshtein distance, except that any distance above `cap` is returned as cap + 1.
size_t edit_distance(std::string_view a, std::string_view b, size_t cap) {
  if (std::max(a.size(), b.size()) - std::min(a.size(), b.size()) > cap)
    return cap + 1;
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    size_t row_min = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
      row_min = std::min(row_min, cur[j]);
    }
    if (row_min > cap)
      return cap + 1;
    std::swap(prev, cur);
  }
  return std::min(prev[b.size()], cap + 1);
}

// "; did you mean 'softmax'?" for the closest candidate within edit distance 2 (the first
// one on a tie), or "". A suggestion must also be closer than the word is long, so that
// an unknown 'x' does not suggest 'h'.
std::string suggestion(std::string_view word, const std::vector<std::string_view> &candidates) {
  constexpr size_t kCap = 2;
  std::string_view best;
  size_t best_distance = kCap + 1;
  for (std::string_view c : candidates) {
    size_t d = edit_distance(word, c, kCap);
    if (d < best_distance && d < word.size()) {
      best = c;
      best_distance = d;
    }
  }
  return best.empty() ? std::string() : fmt::format("; did you mean '{}'?", best);
}

// "an input", "a param", "a state", "a dim": how messages name a declaration's kind.
std::string with_article(std::string_view what) {
  return fmt::format("{} {}", what == "input" ? "an" : "a", what);
}

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

class Parser {
public:
  Parser(const SourceFile &source, Diagnostics &diags) : diags_(diags), tokens_(lex(source)) {}

  ir::Graph parse() {
    const Token &keyword = peek();
    if (!keyword.is_word("pipeline"))
      unexpected(keyword, "'pipeline'");
    take();
    const Token &name = expect(TokenKind::Identifier, "a pipeline name after 'pipeline'");
    if (ir::is_kf_keyword(name.text))
      diags_.error(name.range(),
                   fmt::format("'{}' is a keyword and cannot name a pipeline", name.text));
    const Token &open = expect(TokenKind::LBrace, "'{' after the pipeline name");
    for (;;) {
      const Token &t = peek();
      if (t.is(TokenKind::RBrace))
        break;
      if (t.is(TokenKind::End))
        unexpected(t, fmt::format("'}}' at the end of pipeline '{}'", name.text),
                   {{open.range(), "to match this '{'"}});
      // Only a word starts a statement: `return relu(h))` has an unmatched ')', not a
      // statement after the return.
      if (return_ && t.is(TokenKind::Identifier))
        diags_.error(t.range(), "statement after the return statement; return comes last",
                     {{*return_, "the return statement is here"}});
      statement();
    }
    const Token &close = take();
    if (!return_)
      diags_.error(close.range(),
                   fmt::format("missing return statement in pipeline '{}'", name.text));
    if (!peek().is(TokenKind::End))
      unexpected(peek(), "end of file after the pipeline's closing '}'");

    ir::Graph g = builder_.finish();
    g.name = std::string(name.text);
    g.dims = dims_;
    g.loc = keyword.loc;
    try {
      ir::verify(g);
    } catch (const ir::VerifyError &e) {
      diags_.error(
          e.value >= 0 ? g[e.value].loc : g.loc,
          fmt::format("internal error: the parsed graph fails verification: {}", e.what()));
    }
    return g;
  }

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

  // --- statements -----------------------------------------------------------------------

  void statement() {
    const Token &t = peek();
    if (t.is_word("dim"))
      return dims();
    if (t.is_word("input") || t.is_word("param") || t.is_word("state"))
      return declaration();
    if (t.is_word("return"))
      return ret();
    if (t.is(TokenKind::Identifier) && !ir::is_kf_keyword(t.text)) {
      if (peek(1).is(TokenKind::Equal))
        return assignment();
      if (peek(1).is(TokenKind::LParen)) {
        call(1, /*statement=*/true);
        return;
      }
      unexpected(peek(1), fmt::format("'=' or '(' after '{}'", t.text));
    }
    if (t.is(TokenKind::RParen))
      diags_.error(t.range(), "unmatched ')'");
    unexpected(t, "a statement");
  }

  void dims() {
    take();
    do {
      const Token &name = expect(TokenKind::Identifier, "a dim name");
      define(name, "dim");
      dims_.emplace_back(name.text);
    } while (accept(TokenKind::Comma));
  }

  void declaration() {
    const Token &keyword = take();
    ir::ValueKind kind = keyword.text == "input"   ? ir::ValueKind::Input
                         : keyword.text == "param" ? ir::ValueKind::Param
                                                   : ir::ValueKind::State;
    const Token &name =
        expect(TokenKind::Identifier, fmt::format("a name after '{}'", keyword.text));
    define(name, keyword.text);
    expect(TokenKind::Colon, fmt::format("':' after '{}'", name.text));
    ir::TensorType type = tensor_type();
    ValueId id = builder_.declare(kind, std::string(name.text), type, name.loc);
    names_[std::string(name.text)] = {id, name.range()};
  }

  // Records a dim or declaration name; it must be new.
  void define(const Token &name, std::string_view what) {
    if (ir::is_kf_keyword(name.text))
      diags_.error(name.range(), fmt::format("'{}' is a keyword and cannot name {}", name.text,
                                             with_article(what)));
    std::optional<SourceRange> previous;
    if (auto it = declared_.find(name.text); it != declared_.end())
      previous = it->second.where;
    else if (auto bound = names_.find(name.text); bound != names_.end())
      previous = bound->second.where;
    if (previous)
      diags_.error(name.range(), fmt::format("redefinition of '{}'", name.text),
                   {{*previous, "previous definition is here"}});
    declared_.emplace(std::string(name.text), Declared{what, name.range()});
  }

  void assignment() {
    const Token &name = take();
    take(); // '='
    if (auto it = declared_.find(name.text); it != declared_.end())
      diags_.error(name.range(),
                   fmt::format("cannot assign to {} '{}'", it->second.what, name.text),
                   {{it->second.where, fmt::format("'{}' is declared here", name.text)}});
    Operand v = expr(1);
    if (v.is_call)
      builder_.at(v.id).name = std::string(name.text);
    names_[std::string(name.text)] = {v.id, name.range()};
  }

  void ret() {
    const Token &keyword = take();
    do
      builder_.add_output(expr(1).id);
    while (accept(TokenKind::Comma));
    return_ = keyword.range();
  }

  // --- types ----------------------------------------------------------------------------

  ir::TensorType tensor_type() {
    const Token &dtype = peek();
    if (!dtype.is(TokenKind::Identifier))
      unexpected(dtype, "an element type (f32, f16 or bf16)");
    std::optional<ir::DType> dt = ir::parse_dtype(dtype.text);
    if (!dt)
      diags_.error(dtype.range(), fmt::format("unknown element type '{}'; expected f32, f16 or "
                                              "bf16",
                                              dtype.text));
    take();
    const Token &open = expect(TokenKind::LBracket, "'[' after the element type");
    ir::TensorType type{*dt, {}};
    do {
      if (type.shape.size() == 4)
        diags_.error(peek().range(), "too many extents: tensors have rank 1 to 4");
      type.shape.push_back(extent());
    } while (accept(TokenKind::Comma));
    const Token &close = expect(TokenKind::RBracket, "',' or ']' after an extent",
                                {{open.range(), "to match this '['"}});
    if (auto problem = ir::size_problem(type))
      diags_.error(span(dtype, close), *problem);
    return type;
  }

  ir::Dim extent(std::string_view what = "extent") {
    const Token *minus = accept(TokenKind::Minus);
    const Token &t = peek();
    bool number = t.is(TokenKind::Integer) || t.is(TokenKind::Float);
    if (minus && !number)
      unexpected(t, "a number after '-'");
    if (!number && !t.is(TokenKind::Identifier))
      unexpected(t, "an extent (a positive integer or a dim name)");
    take();
    if (t.is(TokenKind::Identifier))
      return ir::Dim::symbol(dim_name(t));
    SourceRange at = minus ? span(*minus, t) : t.range();
    if (minus || t.is(TokenKind::Float))
      diags_.error(at, fmt::format("an extent must be a positive integer, got {}{}",
                                   minus ? "-" : "", t.text));
    return ir::Dim::constant(positive_integer(t, at, what));
  }

  int64_t positive_integer(const Token &t, SourceRange at, std::string_view what) const {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (ec != std::errc() || v > ir::kMaxExtent)
      diags_.error(
          at, fmt::format("{} {} is too large; the limit is {}", what, t.text, ir::kMaxExtent));
    if (v == 0)
      diags_.error(at, fmt::format("{} must be positive, got 0", what));
    return v;
  }

  // A name used where a dim belongs (an extent, count=N): it must be a declared dim.
  std::string dim_name(const Token &t) const {
    if (auto it = declared_.find(t.text); it != declared_.end()) {
      if (it->second.what == "dim")
        return std::string(t.text);
      diags_.error(t.range(),
                   fmt::format("'{}' is {}, not a dim", t.text, with_article(it->second.what)),
                   {{it->second.where, fmt::format("'{}' is declared here", t.text)}});
    }
    if (auto it = names_.find(t.text); it != names_.end())
      diags_.error(t.range(), fmt::format("'{}' is a value, not a dim", t.text),
                   {{it->second.where, fmt::format("'{}' is defined here", t.text)}});
    std::vector<std::string_view> candidates(dims_.begin(), dims_.end());
    diags_.error(t.range(),
                 fmt::format("undeclared dim '{}'{}", t.text, suggestion(t.text, candidates)));
  }

  // --- expressions ----------------------------------------------------------------------

  Operand expr(int depth) {
    const Token &t = peek();
    if (t.is(TokenKind::Identifier) && peek(1).is(TokenKind::LParen))
      return call(depth, /*statement=*/false);
    if (!t.is(TokenKind::Identifier))
      unexpected(t, "a name or a call");
    take();
    return {lookup(t), t.range(), false, std::nullopt};
  }

  ValueId lookup(const Token &t) const {
    if (auto it = names_.find(t.text); it != names_.end())
      return it->second.id;
    if (auto it = declared_.find(t.text); it != declared_.end()) // not a value: a dim
      diags_.error(t.range(), fmt::format("'{}' is a dim, not a value", t.text),
                   {{it->second.where, fmt::format("'{}' is declared here", t.text)}});
    std::vector<std::string_view> candidates;
    for (const auto &[name, binding] : names_)
      candidates.push_back(name);
    diags_.error(t.range(),
                 fmt::format("unknown name '{}'{}", t.text, suggestion(t.text, candidates)));
  }

  // `statement`: the call stands alone, so it must be an effect; otherwise it must not be.
  Operand call(int depth, bool statement) {
    const Token &name = take();
    if (depth > kMaxCallNesting)
      diags_.error(name.range(),
                   fmt::format("calls are nested more than {} deep", kMaxCallNesting));
    std::optional<ir::OpKind> kind = ir::op_by_name(name.text);
    if (!kind)
      diags_.error(name.range(), fmt::format("unknown op '{}'{}", name.text,
                                             op_suggestion(name.text, call_shape())));
    const ir::OpInfo &info = ir::op_info(*kind);
    bool effect = info.cls == ir::OpClass::Effect;
    if (effect && !statement)
      diags_.error(
          name.range(),
          fmt::format("{} has no value; it can only be a statement of its own", info.name));
    if (!effect && statement)
      diags_.error(name.range(),
                   fmt::format("the value of {} is unused; assign it to a name", info.name));

    const Token &open = take(); // '('
    std::vector<Operand> args;
    std::map<std::string, ir::AttrValue> attrs;
    std::map<std::string, SourceRange> attr_keys;
    const Token *first_attr = nullptr;
    const Token *close = accept(TokenKind::RParen);
    while (!close) {
      if (peek().is(TokenKind::Identifier) && peek(1).is(TokenKind::Equal)) {
        if (!first_attr)
          first_attr = &peek();
        attribute(info, attrs, attr_keys);
      } else {
        Operand a = is_number_start() ? number_operand() : expr(depth + 1);
        if (first_attr)
          diags_.error(a.range, fmt::format("positional argument after the attribute '{}'; "
                                            "attributes come last",
                                            first_attr->text));
        args.push_back(a);
      }
      if (accept(TokenKind::Comma))
        continue;
      close = accept(TokenKind::RParen);
      if (!close)
        unexpected(peek(), fmt::format("',' or ')' in the call to {}", info.name),
                   {{open.range(), "to match this '('"}});
    }

    int n = static_cast<int>(args.size());
    std::string takes = info.min_args == info.max_args
                            ? fmt::format("{}", info.min_args)
                            : fmt::format("{} to {}", info.min_args, info.max_args);
    if (n > info.max_args) {
      // `max(a, b)` is torch.max's elementwise form: point at the op the call fits.
      CallShape written{n, {}};
      for (const auto &[key, range] : attr_keys)
        written.attrs.push_back(key);
      std::optional<std::string_view> fits = extension_fitting(info.name, written);
      diags_.error(args[static_cast<size_t>(info.max_args)].range,
                   fmt::format("too many arguments to {}: it takes {}, got {}{}", info.name, takes,
                               n, fits ? fmt::format("; did you mean '{}'?", *fits) : ""));
    }
    if (n < info.min_args)
      diags_.error(name.range(), fmt::format("too few arguments to {}: it takes {}, got {}",
                                             info.name, takes, n));
    for (const ir::AttrSpec &spec : info.attrs)
      if (spec.required && !attrs.count(std::string(spec.name)))
        diags_.error(name.range(),
                     fmt::format("{} requires the attribute '{}'", info.name, spec.name));
    type_numbers(info, name, args);

    std::vector<ValueId> ids;
    for (const Operand &a : args)
      ids.push_back(a.id);
    ValueId id = -1;
    try {
      id = builder_.op(*kind, ids, attrs, {}, name.loc);
    } catch (const ir::TypeError &e) {
      diags_.error(e.arg >= 0 && e.arg < n ? args[static_cast<size_t>(e.arg)].range : name.range(),
                   e.what());
    }
    builder_.at(id).origins = {fmt::format("{}@{}", info.name, name.loc.line)};
    check_updates(id, args);
    return {id, span(name, *close), true, std::nullopt};
  }

  // --- numbers as operands and suggestions -----------------------------------------------

  bool is_number_start() const {
    const Token &t = peek();
    return t.is(TokenKind::Integer) || t.is(TokenKind::Float) ||
           (t.is(TokenKind::Minus) &&
            (peek(1).is(TokenKind::Integer) || peek(1).is(TokenKind::Float)));
  }

  // `2.0`, `-0.5`, `3`: typed later, as a constant of its tensor operand's element type.
  Operand number_operand() {
    const Token *minus = accept(TokenKind::Minus);
    const Token &t = take();
    SourceRange at = minus ? span(*minus, t) : t.range();
    double x = 0;
    auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), x);
    if (ec != std::errc())
      diags_.error(at, fmt::format("number {}{} is out of range", minus ? "-" : "", t.text));
    return {-1, at, true, minus ? -x : x};
  }

  // Numbers are operands of pointwise binary ops, beside a tensor whose element type they
  // take; each becomes a constant op.
  void type_numbers(const ir::OpInfo &info, const Token &name, std::vector<Operand> &args) {
    std::optional<ir::DType> dtype;
    for (const Operand &a : args)
      if (!a.number)
        dtype = builder_.graph()[a.id].type.dtype;
    for (Operand &a : args) {
      if (!a.number)
        continue;
      if (info.cls != ir::OpClass::Binary) {
        std::vector<std::string_view> binary;
        for (ir::OpKind k : ir::ops_of_class(ir::OpClass::Binary))
          binary.push_back(ir::op_info(k).name);
        diags_.error(a.range, fmt::format("a number cannot be an argument of {}; numbers are "
                                          "operands of {}",
                                          info.name, fmt::join(binary, ", ")));
      }
      if (!dtype)
        diags_.error(name.range(), fmt::format("{} needs a tensor operand; both operands are "
                                               "numbers",
                                               info.name));
      a.id =
          builder_.op(ir::OpKind::Constant, {},
                      {{"value", {*a.number, {}}}, {"dtype", {0, std::string(dtype_name(*dtype))}}},
                      {}, a.range.loc);
      builder_.at(a.id).origins = {fmt::format("{}@{}", info.name, name.loc.line)};
    }
  }

  // The call's shape as written from the current '(' to its ')'; nullopt when it does not
  // close before an error or the end of the file.
  std::optional<CallShape> call_shape() const {
    CallShape shape;
    int depth = 0;
    for (size_t i = pos_; i < tokens_.size(); ++i) {
      const Token &t = tokens_[i];
      if (t.is(TokenKind::End) || t.is(TokenKind::Error))
        return std::nullopt;
      if (t.is(TokenKind::RParen) && --depth == 0)
        return shape;
      bool arg_start =
          (t.is(TokenKind::LParen) && depth++ == 0) || (t.is(TokenKind::Comma) && depth == 1);
      if (!arg_start || i + 1 >= tokens_.size() || tokens_[i + 1].is(TokenKind::RParen))
        continue;
      if (tokens_[i + 1].is(TokenKind::Identifier) && i + 2 < tokens_.size() &&
          tokens_[i + 2].is(TokenKind::Equal))
        shape.attrs.push_back(tokens_[i + 1].text);
      else
        ++shape.args;
    }
    return std::nullopt;
  }

  // A suggestion for an unknown op among the ops the call could be, as written: those
  // taking its number of operands and each of its attributes (so `sum(h, dim=1)` does not
  // suggest `sub`). A known op that starts with the word comes first (`max(a, b)`:
  // `maximum`), then the closest spelling.
  static std::string op_suggestion(std::string_view word, const std::optional<CallShape> &shape) {
    if (std::optional<std::string_view> longer = extension_fitting(word, shape))
      return fmt::format("; did you mean '{}'?", *longer);
    return suggestion(word, fitting_ops(shape));
  }

  // The ops a call as written fits (all ops when its shape is unknown).
  static std::vector<std::string_view> fitting_ops(const std::optional<CallShape> &shape) {
    std::vector<std::string_view> candidates;
    for (const ir::OpInfo &op : ir::all_ops()) {
      bool fits = !shape || (op.min_args <= shape->args && shape->args <= op.max_args);
      for (size_t i = 0; fits && shape && i < shape->attrs.size(); ++i) {
        fits = false;
        for (const ir::AttrSpec &spec : op.attrs)
          fits = fits || spec.name == shape->attrs[i];
      }
      if (fits)
        candidates.push_back(op.name);
    }
    return candidates;
  }

  // An op the call fits whose name extends `word` (`max` -> `maximum`), if any.
  static std::optional<std::string_view> extension_fitting(std::string_view word,
                                                           const std::optional<CallShape> &shape) {
    for (std::string_view c : fitting_ops(shape))
      if (word.size() >= 3 && c.size() > word.size() && c.substr(0, word.size()) == word)
        return c;
    return std::nullopt;
  }

  // The running statistics an op updates must be distinct states, each updated once.
  void check_updates(ValueId id, const std::vector<Operand> &args) {
    const ir::Value &v = builder_.graph()[id];
    std::vector<int> updated = ir::updated_args(v);
    std::string_view op = ir::op_info(v.op).name;
    std::string_view why =
        v.op == ir::OpKind::BatchNorm ? "train mode updates it" : "bn_update updates it";
    for (size_t k = 0; k < updated.size(); ++k) {
      const Operand &a = args[static_cast<size_t>(updated[k])];
      const ir::Value &s = builder_.graph()[a.id];
      std::string_view role = k == 0 ? "running_mean" : "running_var";
      if (s.is_op())
        diags_.error(a.range, fmt::format("the {} of {} must be a state ({}), not a computed "
                                          "value",
                                          role, op, why));
      if (s.kind != ir::ValueKind::State) {
        const Declared &d = declared_.at(s.name);
        diags_.error(a.range,
                     fmt::format("the {} of {} must be a state ({}); '{}' is {}", role, op, why,
                                 s.name, with_article(d.what)),
                     {{d.where, fmt::format("'{}' is declared here", s.name)}});
      }
      if (auto it = updated_.find(a.id); it != updated_.end())
        diags_.error(a.range,
                     fmt::format("state '{}' is updated twice; a run updates a state at most "
                                 "once",
                                 s.name),
                     {{it->second, "the first update is here"}});
      updated_.emplace(a.id, a.range);
    }
  }

  void attribute(const ir::OpInfo &info, std::map<std::string, ir::AttrValue> &attrs,
                 std::map<std::string, SourceRange> &keys) {
    const Token &key = take();
    take(); // '='
    const ir::AttrSpec *spec = nullptr;
    std::vector<std::string_view> candidates;
    for (const ir::AttrSpec &s : info.attrs) {
      candidates.push_back(s.name);
      if (s.name == key.text)
        spec = &s;
    }
    if (!spec && info.attrs.empty())
      diags_.error(key.range(), fmt::format("{} takes no attributes", info.name));
    if (!spec)
      diags_.error(key.range(), fmt::format("unknown attribute '{}' for {}{}", key.text, info.name,
                                            suggestion(key.text, candidates)));
    std::string name(key.text);
    if (auto it = keys.find(name); it != keys.end())
      diags_.error(key.range(), fmt::format("duplicate attribute '{}'", key.text),
                   {{it->second, "first given here"}});
    attrs[name] = attr_value(info, *spec);
    keys[name] = key.range();
  }

  ir::AttrValue attr_value(const ir::OpInfo &info, const ir::AttrSpec &spec) {
    if (spec.kind == ir::AttrKind::Shape)
      return shape_value(info, spec);
    if (spec.kind == ir::AttrKind::Extent)
      return extent_value(info, spec);
    const Token *minus = accept(TokenKind::Minus);
    const Token &t = peek();
    bool number = t.is(TokenKind::Integer) || t.is(TokenKind::Float);
    bool string = t.is(TokenKind::String);
    if (minus && !number)
      unexpected(t, "a number after '-'");
    if (!number && !string && !t.is(TokenKind::Identifier))
      unexpected(t, "an attribute value (a number, a name or a string)");
    take();
    if (peek().is(TokenKind::LParen))
      diags_.error(t.range(), "an attribute value is a number, a name or a string, not a call");
    SourceRange at = minus ? span(*minus, t) : t.range();
    std::string got = number   ? fmt::format("{}{}", minus ? "-" : "", t.text)
                      : string ? std::string(t.text)
                               : fmt::format("'{}'", t.text);
    std::string what = fmt::format("attribute '{}' of {}", spec.name, info.name);
    ir::AttrValue value;
    switch (spec.kind) {
    case ir::AttrKind::Number:
    case ir::AttrKind::OptNumber: {
      if (!number)
        diags_.error(at, fmt::format("{} must be a number, got {}", what, got));
      double x = 0;
      auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), x);
      if (ec != std::errc())
        diags_.error(at, fmt::format("number {} is out of range", got));
      value = {minus ? -x : x, {}};
      break;
    }
    case ir::AttrKind::Int: {
      if (!t.is(TokenKind::Integer))
        diags_.error(at, fmt::format("{} must be an integer, got {}", what, got));
      int64_t x = 0;
      auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), x);
      if (ec != std::errc()) // beyond int64; check_attr says the range of the rest
        diags_.error(at, fmt::format("{} is out of range: {}", what, got));
      value = {static_cast<double>(minus ? -x : x), {}};
      break;
    }
    case ir::AttrKind::DType:
      if (!t.is(TokenKind::Identifier) || !ir::parse_dtype(t.text))
        diags_.error(
            at, fmt::format("{} must be an element type (f32, f16 or bf16), got {}", what, got));
      value = {0, std::string(t.text)};
      break;
    case ir::AttrKind::Bool:
      if (!t.is(TokenKind::Identifier) || (t.text != "true" && t.text != "false"))
        diags_.error(at, fmt::format("{} must be true or false, got {}", what, got));
      value = {t.text == "true" ? 1.0 : 0.0, {}};
      break;
    case ir::AttrKind::Shape:  // shape_value() parses it
    case ir::AttrKind::Extent: // extent_value() parses it
      break;
    case ir::AttrKind::Choice:
      if (!string)
        diags_.error(at,
                     fmt::format("{} must be {}, got {}{}", what, ir::attr_expectation(spec), got,
                                 t.is(TokenKind::Identifier)
                                     ? fmt::format("; write it as a string: \"{}\"", t.text)
                                     : ""));
      value = {0, std::string(t.text.substr(1, t.text.size() - 2))};
      break;
    }
    if (auto problem = ir::check_attr(spec, value))
      diags_.error(at, fmt::format("{} {}", what, *problem));
    return value;
  }

  // `count=N`, `count=64`, `count=B*T`: one extent, written as a shape's extents are.
  ir::AttrValue extent_value(const ir::OpInfo &info, const ir::AttrSpec &spec) {
    const Token &t = peek();
    if (!t.is(TokenKind::Integer) && !t.is(TokenKind::Identifier)) {
      const Token *minus = accept(TokenKind::Minus);
      const Token &v = peek();
      diags_.error(minus ? span(*minus, v) : v.range(),
                   fmt::format("attribute '{}' of {} must be {}, got {}{}", spec.name, info.name,
                               ir::attr_expectation(spec), minus ? "-" : "", v.text));
    }
    return ir::AttrValue::extent(
        product(fmt::format("attribute '{}' of {}", spec.name, info.name)));
  }

  // `B*T`, `4*T`, `N`, `768`: positive integers and dim names joined by '*'.
  ir::Dim product(std::string_view what = "extent") {
    std::vector<ir::Dim> factors;
    const Token &first = peek();
    double constant = 1; // in double: several factors of 2^31 overflow int64
    do {
      factors.push_back(extent(what));
      if (!factors.back().is_symbolic())
        constant *= static_cast<double>(factors.back().value);
    } while (accept(TokenKind::Star));
    if (constant > static_cast<double>(ir::kMaxExtent))
      diags_.error(
          span(first, tokens_[pos_ - 1]),
          fmt::format("{} {} is too large; the limit is {}", what, constant, ir::kMaxExtent));
    return ir::Dim::product(factors);
  }

  // `[B*T, -1, 768]`: extents that are products of dim names and positive integers, and at
  // most one -1 (the extent the others leave, as torch.reshape infers it).
  ir::AttrValue shape_value(const ir::OpInfo &info, const ir::AttrSpec &spec) {
    const Token &open = expect(TokenKind::LBracket,
                               fmt::format("'[' to start the attribute '{}' of {}: a shape such "
                                           "as [B*T, 768]",
                                           spec.name, info.name));
    ir::AttrValue value;
    std::optional<SourceRange> inferred;
    do {
      if (value.shape.size() == 4)
        diags_.error(peek().range(), "too many extents: tensors have rank 1 to 4");
      if (const Token *minus = accept(TokenKind::Minus)) {
        const Token &one = take();
        SourceRange at = span(*minus, one);
        if (!one.is(TokenKind::Integer) || one.text != "1")
          diags_.error(at, fmt::format("an extent of a shape is a positive integer, a dim name, "
                                       "a product of them, or -1; got -{}",
                                       one.text));
        if (inferred)
          diags_.error(at, "only one extent of a shape can be -1",
                       {{*inferred, "the first -1 is here"}});
        inferred = at;
        value.shape.push_back(ir::Dim::constant(-1));
        continue;
      }
      value.shape.push_back(product());
    } while (accept(TokenKind::Comma));
    expect(TokenKind::RBracket, "',', '*' or ']' after an extent",
           {{open.range(), "to match this '['"}});
    return value;
  }

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

} // namespace

ir::Graph parse_kf(const SourceFile &source, Diagnostics &diags) {
  return Parser(source, diags).parse();
}

ir::Graph parse_kf_file(const std::string &path) {
  SourceFile source = SourceFile::read(path);
  Diagnostics diags(source);
  return parse_kf(source, diags);
}

} // namespace kfuse::dsl
