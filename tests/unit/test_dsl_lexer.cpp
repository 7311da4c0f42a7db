#include "compiler/dsl/lexer.h"

#include <doctest/doctest.h>

using namespace kfuse;
using dsl::TokenKind;

namespace {

std::vector<dsl::Token> lex_text(const dsl::SourceFile &src) { return dsl::lex(src); }

std::vector<TokenKind> kinds(const std::vector<dsl::Token> &tokens) {
  std::vector<TokenKind> k;
  for (const dsl::Token &t : tokens)
    k.push_back(t.kind);
  return k;
}

} // namespace

TEST_CASE("lexer: a declaration's tokens, kinds and locations") {
  dsl::SourceFile src("t.kf", "input x: f32[N, 8192]\n  h = relu(x)");
  auto tokens = lex_text(src);
  CHECK(kinds(tokens) ==
        std::vector<TokenKind>{
            TokenKind::Identifier, TokenKind::Identifier, TokenKind::Colon, TokenKind::Identifier,
            TokenKind::LBracket, TokenKind::Identifier, TokenKind::Comma, TokenKind::Integer,
            TokenKind::RBracket, TokenKind::Identifier, TokenKind::Equal, TokenKind::Identifier,
            TokenKind::LParen, TokenKind::Identifier, TokenKind::RParen, TokenKind::End});
  CHECK(tokens[7].text == "8192");
  CHECK(tokens[7].loc.line == 1);
  CHECK(tokens[7].loc.col == 17);
  CHECK(tokens[9].text == "h");
  CHECK(tokens[9].loc.line == 2);
  CHECK(tokens[9].loc.col == 3);
}

TEST_CASE("lexer: integers and floats") {
  dsl::SourceFile src("t.kf", "8192 1e-5 0.1 1E+3 007 2.5e10");
  auto tokens = lex_text(src);
  CHECK(kinds(tokens) == std::vector<TokenKind>{TokenKind::Integer, TokenKind::Float,
                                                TokenKind::Float, TokenKind::Float,
                                                TokenKind::Integer, TokenKind::Float,
                                                TokenKind::End});
  CHECK(tokens[1].text == "1e-5");
  CHECK(tokens[3].text == "1E+3");
  CHECK(tokens[5].text == "2.5e10");
}

TEST_CASE("lexer: '-' is its own token, before a number") {
  dsl::SourceFile src("t.kf", "dim=-1");
  CHECK(kinds(lex_text(src)) == std::vector<TokenKind>{TokenKind::Identifier, TokenKind::Equal,
                                                       TokenKind::Minus, TokenKind::Integer,
                                                       TokenKind::End});
}

TEST_CASE("lexer: comments and CRLF line ends are whitespace") {
  dsl::SourceFile src("t.kf", "# a comment\r\ndim N # trailing\r\n#last");
  auto tokens = lex_text(src);
  REQUIRE(tokens.size() == 3);
  CHECK(tokens[0].is_word("dim"));
  CHECK(tokens[0].loc.line == 2);
  CHECK(tokens[1].is_word("N"));
  CHECK(tokens[2].is(TokenKind::End));
}

TEST_CASE("lexer: End sits just past the last token") {
  dsl::SourceFile src("t.kf", "return h\n\n# done\n");
  auto tokens = lex_text(src);
  REQUIRE(tokens.back().is(TokenKind::End));
  CHECK(tokens.back().loc.line == 1);
  CHECK(tokens.back().loc.col == 9);

  dsl::SourceFile empty("t.kf", "");
  auto none = lex_text(empty);
  REQUIRE(none.size() == 1);
  CHECK(none[0].loc.line == 1);
  CHECK(none[0].loc.col == 1);
}

TEST_CASE("lexer: a malformed token ends the stream with an Error token") {
  struct Case {
    std::string text;
    std::string error;
    std::string token;
  };
  std::vector<Case> cases = {
      {"h = relu(x) @", "unexpected character '@'", "@"},
      {"h = 12abc", "invalid number '12abc'", "12abc"},
      {"x = 1.", "invalid number '1.'", "1."},
      {"x = 1e", "invalid number '1e'", "1e"},
      {"x = 1.2.3", "invalid number '1.2.3'", "1.2.3"},
      {"x \x01", "unexpected byte 0x01", "\x01"},
      {"x \xc3\xa9", "unexpected byte 0xC3 (only ASCII is allowed outside comments)", "\xc3"},
      {"x " + std::string(257, 'a'), "identifier is longer than 256 characters",
       std::string(257, 'a')},
      {"x " + std::string(300, '1'), "number is longer than 256 characters", std::string(300, '1')},
  };
  for (const Case &c : cases) {
    INFO(c.text);
    dsl::SourceFile src("t.kf", c.text);
    auto tokens = lex_text(src);
    REQUIRE(tokens.back().is(TokenKind::Error));
    CHECK(tokens.back().error == c.error);
    CHECK(tokens.back().text == c.token);
  }
  dsl::SourceFile ok("t.kf", "# comments may hold anything: \xc3\xa9 @ \x01\nx");
  CHECK(kinds(lex_text(ok)) == std::vector<TokenKind>{TokenKind::Identifier, TokenKind::End});
  dsl::SourceFile longest("t.kf", std::string(256, 'a'));
  CHECK(lex_text(longest)[0].is(TokenKind::Identifier));
}

TEST_CASE("lexer: describe names tokens for diagnostics") {
  dsl::SourceFile src("t.kf", "h 12 ( @");
  auto tokens = lex_text(src);
  CHECK(dsl::describe(tokens[0]) == "identifier 'h'");
  CHECK(dsl::describe(tokens[1]) == "number '12'");
  CHECK(dsl::describe(tokens[2]) == "'('");
  CHECK(dsl::describe(tokens[3]) == "unexpected character '@'");
  dsl::SourceFile empty("t.kf", "");
  CHECK(dsl::describe(lex_text(empty)[0]) == "end of file");
}
