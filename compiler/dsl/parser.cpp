#include "compiler/dsl/parser.h"

#include "compiler/dsl/kf_parser.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"

#include <charconv>

namespace kfuse::dsl {
namespace parsing {
namespace {

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

} // namespace

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

std::string with_article(std::string_view what) {
  return fmt::format("{} {}", what == "input" ? "an" : "a", what);
}

ir::Graph Parser::parse() {
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
    diags_.error(e.value >= 0 ? g[e.value].loc : g.loc,
                 fmt::format("internal error: the parsed graph fails verification: {}", e.what()));
  }
  return g;
}

void Parser::statement() {
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

void Parser::dims() {
  take();
  do {
    const Token &name = expect(TokenKind::Identifier, "a dim name");
    define(name, "dim");
    dims_.emplace_back(name.text);
  } while (accept(TokenKind::Comma));
}

void Parser::declaration() {
  const Token &keyword = take();
  ir::ValueKind kind = keyword.text == "input"   ? ir::ValueKind::Input
                       : keyword.text == "param" ? ir::ValueKind::Param
                                                 : ir::ValueKind::State;
  const Token &name = expect(TokenKind::Identifier, fmt::format("a name after '{}'", keyword.text));
  define(name, keyword.text);
  expect(TokenKind::Colon, fmt::format("':' after '{}'", name.text));
  const Token &dtype = peek();
  ir::TensorType type = tensor_type();
  if (kind != ir::ValueKind::Input && !ir::is_float(type.dtype))
    diags_.error(dtype.range(), fmt::format("{} '{}' cannot be {}: an {} tensor is only an input "
                                            "read as class indices",
                                            keyword.text, name.text, ir::dtype_name(type.dtype),
                                            ir::dtype_name(type.dtype)));
  ValueId id = builder_.declare(kind, std::string(name.text), type, name.loc);
  names_[std::string(name.text)] = {id, name.range()};
}

// Records a dim or declaration name; it must be new.
void Parser::define(const Token &name, std::string_view what) {
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

void Parser::assignment() {
  const Token &name = take();
  take(); // '='
  if (auto it = declared_.find(name.text); it != declared_.end())
    diags_.error(name.range(), fmt::format("cannot assign to {} '{}'", it->second.what, name.text),
                 {{it->second.where, fmt::format("'{}' is declared here", name.text)}});
  Operand v = expr(1);
  if (v.is_call)
    builder_.at(v.id).name = std::string(name.text);
  names_[std::string(name.text)] = {v.id, name.range()};
}

void Parser::ret() {
  const Token &keyword = take();
  do {
    Operand out = expr(1);
    if (out.id >= 0 && !ir::is_float(builder_.at(out.id).type.dtype))
      diags_.error(out.range, fmt::format("a pipeline cannot return the {} tensor '{}': an {} "
                                          "tensor is only an input read as class indices",
                                          "i64", builder_.at(out.id).name, "i64"));
    builder_.add_output(out.id);
  } while (accept(TokenKind::Comma));
  return_ = keyword.range();
}

ir::TensorType Parser::tensor_type() {
  const Token &dtype = peek();
  if (!dtype.is(TokenKind::Identifier))
    unexpected(dtype, "an element type (f32, f16, bf16 or i64)");
  std::optional<ir::DType> dt = ir::parse_dtype(dtype.text);
  if (!dt)
    diags_.error(dtype.range(), fmt::format("unknown element type '{}'; expected f32, f16, bf16 "
                                            "or i64",
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

ir::Dim Parser::extent(std::string_view what) {
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
    diags_.error(at, fmt::format("an extent must be a positive integer, got {}{}", minus ? "-" : "",
                                 t.text));
  return ir::Dim::constant(positive_integer(t, at, what));
}

int64_t Parser::positive_integer(const Token &t, SourceRange at, std::string_view what) const {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
  if (ec != std::errc() || v > ir::kMaxExtent)
    diags_.error(at,
                 fmt::format("{} {} is too large; the limit is {}", what, t.text, ir::kMaxExtent));
  if (v == 0)
    diags_.error(at, fmt::format("{} must be positive, got 0", what));
  return v;
}

// A name used where a dim belongs (an extent, count=N): it must be a declared dim.
std::string Parser::dim_name(const Token &t) const {
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

} // namespace parsing

ir::Graph parse_kf(const SourceFile &source, Diagnostics &diags) {
  return parsing::Parser(source, diags).parse();
}

ir::Graph parse_kf_file(const std::string &path) {
  SourceFile source = SourceFile::read(path);
  Diagnostics diags(source);
  return parse_kf(source, diags);
}

} // namespace kfuse::dsl
