#include "compiler/dsl/lexer.h"

#include <fmt/format.h>

namespace kfuse::dsl {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

TokenKind punctuation(char c) {
  switch (c) {
  case '{':
    return TokenKind::LBrace;
  case '}':
    return TokenKind::RBrace;
  case '(':
    return TokenKind::LParen;
  case ')':
    return TokenKind::RParen;
  case '[':
    return TokenKind::LBracket;
  case ']':
    return TokenKind::RBracket;
  case ',':
    return TokenKind::Comma;
  case ':':
    return TokenKind::Colon;
  case '=':
    return TokenKind::Equal;
  case '-':
    return TokenKind::Minus;
  case '*':
    return TokenKind::Star;
  default:
    return TokenKind::Error;
  }
}

class Lexer {
public:
  explicit Lexer(const std::string &text) : text_(text) {}

  std::vector<Token> run() {
    std::vector<Token> tokens;
    for (;;) {
      skip_space_and_comments();
      if (pos_ >= text_.size()) {
        tokens.push_back(end_token(tokens));
        return tokens;
      }
      tokens.push_back(next());
      if (tokens.back().is(TokenKind::Error))
        return tokens;
    }
  }

private:
  void advance(size_t n) {
    for (size_t i = 0; i < n; ++i, ++pos_) {
      if (text_[pos_] == '\n') {
        ++line_;
        col_ = 1;
      } else {
        ++col_;
      }
    }
  }

  void skip_space_and_comments() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f') {
        advance(1);
      } else if (c == '#') {
        size_t eol = text_.find('\n', pos_);
        advance((eol == std::string_view::npos ? text_.size() : eol) - pos_);
      } else {
        return;
      }
    }
  }

  Token make(TokenKind kind, size_t length, std::string error = {}) {
    Token t;
    t.kind = kind;
    t.text = text_.substr(pos_, length);
    t.loc = {line_, col_};
    t.error = std::move(error);
    advance(length);
    return t;
  }

  // Scans [0-9]+ starting at `i`; returns the end.
  size_t digits(size_t i) const {
    while (i < text_.size() && is_digit(text_[i]))
      ++i;
    return i;
  }

  Token next() {
    char c = text_[pos_];
    if (is_ident_start(c)) {
      size_t end = pos_;
      while (end < text_.size() && is_ident_char(text_[end]))
        ++end;
      size_t n = end - pos_;
      if (n > kMaxTokenLength)
        return make(TokenKind::Error, n,
                    fmt::format("identifier is longer than {} characters", kMaxTokenLength));
      return make(TokenKind::Identifier, n);
    }
    if (is_digit(c))
      return number();
    if (c == '"')
      return string();
    TokenKind kind = punctuation(c);
    if (kind != TokenKind::Error)
      return make(kind, 1);
    auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x21 && byte < 0x7f)
      return make(TokenKind::Error, 1, fmt::format("unexpected character '{}'", c));
    return make(TokenKind::Error, 1,
                fmt::format("unexpected byte 0x{:02X}{}", byte,
                            byte >= 0x80 ? " (only ASCII is allowed outside comments)" : ""));
  }

  // A string ends at the next '"' on the same line; its text includes the quotes.
  Token string() {
    size_t end = pos_ + 1;
    while (end < text_.size() && text_[end] != '"' && text_[end] != '\n') {
      auto byte = static_cast<unsigned char>(text_[end]);
      if (byte < 0x20 || byte >= 0x7f || byte == '\\')
        return make(TokenKind::Error, end + 1 - pos_,
                    "a string holds printable ASCII characters other than '\\' only");
      ++end;
    }
    if (end >= text_.size() || text_[end] == '\n')
      return make(TokenKind::Error, end - pos_, "unterminated string");
    size_t n = end + 1 - pos_;
    if (n > kMaxTokenLength)
      return make(TokenKind::Error, n,
                  fmt::format("string is longer than {} characters", kMaxTokenLength));
    return make(TokenKind::String, n);
  }

  Token number() {
    size_t end = digits(pos_);
    bool is_float = false;
    if (end + 1 < text_.size() && text_[end] == '.' && is_digit(text_[end + 1])) {
      end = digits(end + 1);
      is_float = true;
    }
    if (end < text_.size() && (text_[end] == 'e' || text_[end] == 'E')) {
      size_t k = end + 1;
      if (k < text_.size() && (text_[k] == '+' || text_[k] == '-'))
        ++k;
      if (k < text_.size() && is_digit(text_[k])) {
        end = digits(k);
        is_float = true;
      }
    }
    // A number runs into letters, digits or dots: "12abc", "1.", "1e", "1.2.3".
    if (end < text_.size() && (is_ident_char(text_[end]) || text_[end] == '.')) {
      while (end < text_.size() && (is_ident_char(text_[end]) || text_[end] == '.'))
        ++end;
      size_t n = end - pos_;
      if (n <= kMaxTokenLength)
        return make(TokenKind::Error, n, fmt::format("invalid number '{}'", text_.substr(pos_, n)));
    }
    size_t n = end - pos_;
    if (n > kMaxTokenLength)
      return make(TokenKind::Error, n,
                  fmt::format("number is longer than {} characters", kMaxTokenLength));
    return make(is_float ? TokenKind::Float : TokenKind::Integer, n);
  }

  // End of file is reported just past the last token, where a missing '}' or ')' belongs,
  // rather than on the empty line after a final newline.
  Token end_token(const std::vector<Token> &tokens) const {
    Token t;
    t.kind = TokenKind::End;
    t.text = text_.substr(text_.size());
    if (tokens.empty()) {
      t.loc = {1, 1};
    } else {
      const Token &last = tokens.back();
      t.loc = {last.loc.line, last.loc.col + static_cast<uint32_t>(last.text.size())};
    }
    return t;
  }

  std::string_view text_;
  size_t pos_ = 0;
  uint32_t line_ = 1;
  uint32_t col_ = 1;
};

} // namespace

std::vector<Token> lex(const SourceFile &source) { return Lexer(source.text()).run(); }

std::string describe(const Token &t) {
  switch (t.kind) {
  case TokenKind::Identifier:
    return fmt::format("identifier '{}'", t.text);
  case TokenKind::Integer:
  case TokenKind::Float:
    return fmt::format("number '{}'", t.text);
  case TokenKind::String:
    return fmt::format("string {}", t.text);
  case TokenKind::End:
    return "end of file";
  case TokenKind::Error:
    return t.error;
  default:
    return fmt::format("'{}'", t.text);
  }
}

} // namespace kfuse::dsl
