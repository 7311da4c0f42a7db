// The .kf parser: expressions, calls and their arguments, numeric operands, and suggestions
// for an unknown op.
#include "compiler/dsl/kf_parser.h"

#include "compiler/ir/infer.h"
#include "compiler/ir/verifier.h"

#include <charconv>

namespace kfuse::dsl::parsing {

Operand Parser::expr(int depth) {
  const Token &t = peek();
  if (t.is(TokenKind::Identifier) && peek(1).is(TokenKind::LParen))
    return call(depth, /*statement=*/false);
  if (!t.is(TokenKind::Identifier))
    unexpected(t, "a name or a call");
  take();
  return {lookup(t), t.range(), false, std::nullopt};
}

ValueId Parser::lookup(const Token &t) const {
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
Operand Parser::call(int depth, bool statement) {
  const Token &name = take();
  const ir::OpKind kind = callee(name, depth, statement);
  const ir::OpInfo &info = ir::op_info(kind);
  CallArgs given = arguments(info, depth);
  check_arguments(info, name, given);
  type_numbers(info, name, given.args);

  std::vector<ValueId> ids;
  for (const Operand &a : given.args)
    ids.push_back(a.id);
  const int n = static_cast<int>(given.args.size());
  ValueId id = -1;
  try {
    id = builder_.op(kind, ids, given.attrs, {}, name.loc);
  } catch (const ir::TypeError &e) {
    diags_.error(e.arg >= 0 && e.arg < n ? given.args[static_cast<size_t>(e.arg)].range
                                         : name.range(),
                 e.what());
  }
  builder_.at(id).origins = {fmt::format("{}@{}", info.name, name.loc.line)};
  check_updates(id, given.args);
  return {id, span(name, *given.close), true, std::nullopt};
}

// The op that `name` calls, known and placed as the call stands (see call()).
ir::OpKind Parser::callee(const Token &name, int depth, bool statement) {
  if (depth > kMaxCallNesting)
    diags_.error(name.range(), fmt::format("calls are nested more than {} deep", kMaxCallNesting));
  std::optional<ir::OpKind> kind = ir::op_by_name(name.text);
  if (!kind)
    diags_.error(name.range(), fmt::format("unknown op '{}'{}", name.text,
                                           op_suggestion(name.text, call_shape())));
  const ir::OpInfo &info = ir::op_info(*kind);
  bool effect = info.cls == ir::OpClass::Effect;
  if (effect && !statement)
    diags_.error(name.range(),
                 fmt::format("{} has no value; it can only be a statement of its own", info.name));
  if (!effect && statement)
    diags_.error(name.range(),
                 fmt::format("the value of {} is unused; assign it to a name", info.name));
  return *kind;
}

// The arguments from the call's '(' to its ')': positional ones, then attributes.
CallArgs Parser::arguments(const ir::OpInfo &info, int depth) {
  const Token &open = take(); // '('
  CallArgs given;
  const Token *first_attr = nullptr;
  given.close = accept(TokenKind::RParen);
  while (!given.close) {
    if (peek().is(TokenKind::Identifier) && peek(1).is(TokenKind::Equal)) {
      if (!first_attr)
        first_attr = &peek();
      attribute(info, given.attrs, given.attr_keys);
    } else {
      Operand a = is_number_start() ? number_operand() : expr(depth + 1);
      if (first_attr)
        diags_.error(a.range, fmt::format("positional argument after the attribute '{}'; "
                                          "attributes come last",
                                          first_attr->text));
      given.args.push_back(a);
    }
    if (accept(TokenKind::Comma))
      continue;
    given.close = accept(TokenKind::RParen);
    if (!given.close)
      unexpected(peek(), fmt::format("',' or ')' in the call to {}", info.name),
                 {{open.range(), "to match this '('"}});
  }
  return given;
}

// The op takes as many positional arguments as the call gives, and every attribute it requires.
void Parser::check_arguments(const ir::OpInfo &info, const Token &name,
                             const CallArgs &given) const {
  int n = static_cast<int>(given.args.size());
  std::string takes = info.min_args == info.max_args
                          ? fmt::format("{}", info.min_args)
                          : fmt::format("{} to {}", info.min_args, info.max_args);
  if (n > info.max_args) {
    // `max(a, b)` is torch.max's elementwise form: point at the op the call fits.
    CallShape written{n, {}};
    for (const auto &[key, range] : given.attr_keys)
      written.attrs.push_back(key);
    std::optional<std::string_view> fits = extension_fitting(info.name, written);
    diags_.error(given.args[static_cast<size_t>(info.max_args)].range,
                 fmt::format("too many arguments to {}: it takes {}, got {}{}", info.name, takes, n,
                             fits ? fmt::format("; did you mean '{}'?", *fits) : ""));
  }
  if (n < info.min_args)
    diags_.error(name.range(),
                 fmt::format("too few arguments to {}: it takes {}, got {}", info.name, takes, n));
  for (const ir::AttrSpec &spec : info.attrs)
    if (spec.required && !given.attrs.count(std::string(spec.name)))
      diags_.error(name.range(),
                   fmt::format("{} requires the attribute '{}'", info.name, spec.name));
}

bool Parser::is_number_start() const {
  const Token &t = peek();
  return t.is(TokenKind::Integer) || t.is(TokenKind::Float) ||
         (t.is(TokenKind::Minus) &&
          (peek(1).is(TokenKind::Integer) || peek(1).is(TokenKind::Float)));
}

// `2.0`, `-0.5`, `3`: typed later, as a constant of its tensor operand's element type.
Operand Parser::number_operand() {
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
void Parser::type_numbers(const ir::OpInfo &info, const Token &name, std::vector<Operand> &args) {
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
std::optional<CallShape> Parser::call_shape() const {
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
std::string Parser::op_suggestion(std::string_view word, const std::optional<CallShape> &shape) {
  if (std::optional<std::string_view> longer = extension_fitting(word, shape))
    return fmt::format("; did you mean '{}'?", *longer);
  return suggestion(word, fitting_ops(shape));
}

// The ops a call as written fits (all ops when its shape is unknown).
std::vector<std::string_view> Parser::fitting_ops(const std::optional<CallShape> &shape) {
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
std::optional<std::string_view> Parser::extension_fitting(std::string_view word,
                                                          const std::optional<CallShape> &shape) {
  for (std::string_view c : fitting_ops(shape))
    if (word.size() >= 3 && c.size() > word.size() && c.substr(0, word.size()) == word)
      return c;
  return std::nullopt;
}

// The running statistics an op updates must be distinct states, each updated once.
void Parser::check_updates(ValueId id, const std::vector<Operand> &args) {
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

} // namespace kfuse::dsl::parsing
