// The .kf parser: attribute values (`dim=-1`, `eps=1e-5`, `mode="train"`, `count=B*T`,
// `shape=[B*T, -1]`), each checked against its spec in the op table.
#include "compiler/dsl/kf_parser.h"

#include <charconv>

namespace kfuse::dsl::parsing {

void Parser::attribute(const ir::OpInfo &info, std::map<std::string, ir::AttrValue> &attrs,
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

ir::AttrValue Parser::attr_value(const ir::OpInfo &info, const ir::AttrSpec &spec) {
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
    if (!t.is(TokenKind::Identifier) || !ir::parse_dtype(t.text) ||
        !ir::is_float(*ir::parse_dtype(t.text)))
      diags_.error(at,
                   fmt::format("{} must be an element type (f32, f16 or bf16), got {}", what, got));
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
      diags_.error(at, fmt::format("{} must be {}, got {}{}", what, ir::attr_expectation(spec), got,
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
ir::AttrValue Parser::extent_value(const ir::OpInfo &info, const ir::AttrSpec &spec) {
  const Token &t = peek();
  if (!t.is(TokenKind::Integer) && !t.is(TokenKind::Identifier)) {
    const Token *minus = accept(TokenKind::Minus);
    const Token &v = peek();
    diags_.error(minus ? span(*minus, v) : v.range(),
                 fmt::format("attribute '{}' of {} must be {}, got {}{}", spec.name, info.name,
                             ir::attr_expectation(spec), minus ? "-" : "", v.text));
  }
  return ir::AttrValue::extent(product(fmt::format("attribute '{}' of {}", spec.name, info.name)));
}

// `B*T`, `4*T`, `N`, `768`: positive integers and dim names joined by '*'.
ir::Dim Parser::product(std::string_view what) {
  std::vector<ir::Dim> factors;
  const Token &first = peek();
  double constant = 1; // in double: several factors of 2^31 overflow int64
  do {
    factors.push_back(extent(what));
    if (!factors.back().is_symbolic())
      constant *= static_cast<double>(factors.back().value);
  } while (accept(TokenKind::Star));
  if (constant > static_cast<double>(ir::kMaxExtent))
    diags_.error(span(first, tokens_[pos_ - 1]), fmt::format("{} {} is too large; the limit is {}",
                                                             what, constant, ir::kMaxExtent));
  return ir::Dim::product(factors);
}

// `[B*T, -1, 768]`: extents that are products of dim names and positive integers, and at
// most one -1 (the extent the others leave, as torch.reshape infers it).
ir::AttrValue Parser::shape_value(const ir::OpInfo &info, const ir::AttrSpec &spec) {
  const Token &open =
      expect(TokenKind::LBracket, fmt::format("'[' to start the attribute '{}' of {}: a shape such "
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

} // namespace kfuse::dsl::parsing
