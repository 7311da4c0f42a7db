// The .kf lexer: identifiers, numbers, strings and punctuation; '#' starts a comment to the end of
// the line. Keywords are identifiers to the lexer: whether `dim` is a keyword or an
// attribute name depends on where it stands, which the parser decides.
#pragma once

#include "compiler/dsl/diagnostics.h"
#include "compiler/dsl/source.h"
#include "compiler/ir/printer.h"

#include <string>
#include <string_view>
#include <vector>

namespace kfuse::dsl {

enum class TokenKind : uint8_t {
  Identifier, // [A-Za-z_][A-Za-z0-9_]*
  Integer,    // [0-9]+
  Float,      // [0-9]+ ('.' [0-9]+)? ([eE] [+-]? [0-9]+)?, with a '.' or an exponent
  String,     // '"' printable ASCII except '"' and '\\', on one line '"': a choice attribute
  LBrace,
  RBrace,
  LParen,
  RParen,
  LBracket,
  RBracket,
  Comma,
  Colon,
  Equal,
  Minus,
  Star, // '*': a product of extents in a shape (`[B*T, 768]`)
  End,
  Error, // a malformed token; `error` says what is wrong
};

// Longer identifiers and numbers are rejected: no real name is this long, and the bound
// keeps the cost of every later look at a name small.
inline constexpr size_t kMaxTokenLength = ir::kMaxNameLength;

struct Token {
  TokenKind kind = TokenKind::End;
  std::string_view text; // the token's characters in the source buffer; empty for End
  ir::SourceLoc loc;
  std::string error; // for Error tokens

  SourceRange range() const { return {loc, static_cast<uint32_t>(text.size())}; }
  bool is(TokenKind k) const { return kind == k; }
  bool is_word(std::string_view word) const {
    return kind == TokenKind::Identifier && text == word;
  }
};

// Tokenizes the whole buffer (which must outlive the tokens). The result ends with one End
// token, or stops at the first malformed token with an Error token: the parser reports it
// when it gets there, so errors are reported in source order.
std::vector<Token> lex(const SourceFile &source);

// How a diagnostic names a token: "identifier 'h'", "number '1e-5'", "'('", "end of file".
std::string describe(const Token &t);

} // namespace kfuse::dsl
