#include "recipe/jinja/parser.h"

#include <cstdlib>
#include <set>

#include "recipe/jinja/builtins.h"

namespace deepinfer::recipe::jinja {

namespace {

struct ParseError {
  size_t pos;
  std::string message;
};

class Parser {
 public:
  explicit Parser(const LexedTemplate& lexed) : tokens_(lexed.tokens) {}

  Body parse_template() {
    Body body = parse_body({});
    if (peek().kind != TokenKind::kEnd) fail(peek().pos, "unexpected tag");
    return body;
  }

 private:
  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(at_ + ahead, tokens_.size() - 1)]; }
  const Token& next() { return tokens_[at_ < tokens_.size() - 1 ? at_++ : at_]; }
  [[noreturn]] void fail(size_t pos, std::string message) const { throw ParseError{pos, std::move(message)}; }

  bool is_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOperator && peek(ahead).text == op;
  }
  bool is_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
  }
  void expect_op(std::string_view op) {
    if (!is_op(op)) fail(peek().pos, "expected '" + std::string(op) + "', got '" + describe(peek()) + "'");
    next();
  }
  void expect_block_end() {
    if (peek().kind != TokenKind::kBlockEnd) fail(peek().pos, "expected end of block tag, got '" + describe(peek()) + "'");
    next();
  }
  std::string expect_name() {
    if (peek().kind != TokenKind::kName) fail(peek().pos, "expected a name, got '" + describe(peek()) + "'");
    return next().text;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kBlockEnd: return "%}";
      case TokenKind::kVarEnd: return "}}";
      case TokenKind::kEnd: return "end of template";
      default: return t.text;
    }
  }

  // Statements until one of `enders` ({% name %}); leaves the block-begin of the ender current.
  Body parse_body(const std::set<std::string>& enders) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::kEnd) {
        if (!enders.empty()) {
          std::string expected;
          for (const std::string& e : enders) expected += (expected.empty() ? "'" : " or '") + e + "'";
          fail(t.pos, "unexpected end of template, expected " + expected);
        }
        return body;
      }
      if (t.kind == TokenKind::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->text = next().text;
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->pos = next().pos;
        s->expr = parse_expression();
        if (peek().kind != TokenKind::kVarEnd) fail(peek().pos, "expected '}}', got '" + describe(peek()) + "'");
        next();
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        if (peek(1).kind == TokenKind::kName && enders.count(peek(1).text)) return body;
        body.push_back(parse_statement());
      } else {
        fail(t.pos, "unexpected '" + describe(t) + "'");
      }
    }
  }

  // Consumes {% name %} (the block begin is current).
  void expect_end_tag(const std::string& name) {
    next();
    if (!is_name(name)) fail(peek().pos, "expected '" + name + "'");
    next();
    expect_block_end();
  }

  std::unique_ptr<Stmt> parse_statement() {
    DepthGuard guard(*this, peek().pos);
    size_t pos = next().pos;  // {%
    if (peek().kind != TokenKind::kName) fail(peek().pos, "expected a tag name");
    std::string tag = next().text;
    auto s = std::make_unique<Stmt>();
    s->pos = pos;
    if (tag == "if") {
      s->kind = Stmt::Kind::kIf;
      s->conditions.push_back(parse_expression());
      expect_block_end();
      SoftScope soft(soft_, true);
      while (true) {
        s->bodies.push_back(parse_body({"elif", "else", "endif"}));
        next();
        std::string which = next().text;
        if (which == "elif") {
          s->conditions.push_back(parse_expression());
          expect_block_end();
        } else if (which == "else") {
          expect_block_end();
          s->bodies.push_back(parse_body({"endif"}));
          expect_end_tag("endif");
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (tag == "for") {
      s->kind = Stmt::Kind::kFor;
      s->targets = parse_targets();
      if (!is_name("in")) fail(peek().pos, "expected 'in'");
      next();
      s->expr = parse_expression(/*with_condition=*/false);
      if (is_name("if")) {
        next();
        s->filter = parse_expression();
      }
      if (is_name("recursive")) fail(peek().pos, "recursive loops are not supported");
      expect_block_end();
      {
        SoftScope hard(soft_, false);
        s->bodies.push_back(parse_body({"else", "endfor"}));
      }
      if (is_name("else", 1)) {
        next();
        next();
        expect_block_end();
        s->bodies.push_back(parse_body({"endfor"}));
      }
      expect_end_tag("endfor");
    } else if (tag == "set") {
      std::string first = expect_name();
      if (is_op(".")) {
        next();
        s->kind = Stmt::Kind::kSet;
        s->targets = {first};
        s->attr = expect_name();
      } else {
        s->targets = {first};
        while (is_op(",")) {
          next();
          s->targets.push_back(expect_name());
        }
      }
      if (is_op("=")) {
        next();
        s->kind = Stmt::Kind::kSet;
        s->expr = parse_tuple_or_expression();
        expect_block_end();
      } else {
        if (s->targets.size() != 1 || !s->attr.empty()) fail(peek().pos, "expected '='");
        s->kind = Stmt::Kind::kSetBlock;
        expect_block_end();
        s->bodies.push_back(parse_body({"endset"}));
        expect_end_tag("endset");
      }
    } else if (tag == "macro") {
      s->kind = Stmt::Kind::kMacro;
      s->text = expect_name();
      s->params = parse_params();
      expect_block_end();
      {
        SoftScope hard(soft_, false);
        s->bodies.push_back(parse_body({"endmacro"}));
      }
      expect_end_tag("endmacro");
    } else if (tag == "call") {
      s->kind = Stmt::Kind::kCallBlock;
      if (is_op("(")) s->params = parse_params();
      s->expr = parse_expression();
      if (s->expr->kind != Expr::Kind::kCall) fail(s->expr->pos, "expected a call");
      expect_block_end();
      {
        SoftScope hard(soft_, false);
        s->bodies.push_back(parse_body({"endcall"}));
      }
      expect_end_tag("endcall");
    } else if (tag == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      auto placeholder = std::make_unique<Expr>();
      placeholder->kind = Expr::Kind::kLiteral;
      s->filter = parse_filter(std::move(placeholder));
      expect_block_end();
      s->bodies.push_back(parse_body({"endfilter"}));
      expect_end_tag("endfilter");
    } else if (tag == "break" || tag == "continue") {
      s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect_block_end();
    } else if (tag == "generation") {
      s->kind = Stmt::Kind::kScope;
      expect_block_end();
      s->bodies.push_back(parse_body({"endgeneration"}));
      expect_end_tag("endgeneration");
    } else {
      fail(pos, "unknown tag '" + tag + "'");
    }
    return s;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> targets;
    bool paren = is_op("(");
    if (paren) next();
    targets.push_back(expect_name());
    while (is_op(",")) {
      next();
      targets.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return targets;
  }

  std::vector<std::pair<std::string, ExprPtr>> parse_params() {
    std::vector<std::pair<std::string, ExprPtr>> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string name = expect_name();
      ExprPtr def;
      if (is_op("=")) {
        next();
        def = parse_expression();
      }
      params.emplace_back(std::move(name), std::move(def));
    }
    next();
    return params;
  }

  ExprPtr make(Expr::Kind kind, size_t pos, std::string name = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    e->name = std::move(name);
    return e;
  }

  // `a, b` as a tuple (set statements).
  ExprPtr parse_tuple_or_expression() {
    size_t pos = peek().pos;
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    auto tuple = make(Expr::Kind::kTuple, pos);
    tuple->args.push_back(std::move(first));
    while (is_op(",")) {
      next();
      tuple->args.push_back(parse_expression());
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_condition = true) {
    DepthGuard guard(*this, peek().pos);
    ExprPtr e = parse_or();
    if (!with_condition) return e;
    while (is_name("if")) {
      SoftScope soft(soft_, true);
      auto cond = make(Expr::Kind::kCondition, next().pos);
      cond->args.push_back(parse_or());  // [condition, then, else]
      cond->args.push_back(std::move(e));
      ExprPtr otherwise;
      if (is_name("else")) {
        next();
        otherwise = parse_expression();
      }
      cond->args.push_back(std::move(otherwise));
      e = std::move(cond);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      auto e = make(Expr::Kind::kOr, next().pos);
      e->args.push_back(std::move(left));
      e->args.push_back(parse_and());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      auto e = make(Expr::Kind::kAnd, next().pos);
      e->args.push_back(std::move(left));
      e->args.push_back(parse_not());
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_not() {
    DepthGuard guard(*this, peek().pos);
    if (is_name("not")) {
      auto e = make(Expr::Kind::kUnary, next().pos, "not");
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr binary(std::string op, size_t pos, ExprPtr left, ExprPtr right) {
    auto e = make(Expr::Kind::kBinary, pos, std::move(op));
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    while (true) {
      size_t pos = peek().pos;
      std::string op;
      if (peek().kind == TokenKind::kOperator &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == "<=" ||
           peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        return left;
      }
      left = binary(op, pos, std::move(left), parse_math1());
    }
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      size_t pos = peek().pos;
      std::string op = next().text;
      left = binary(op, pos, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      size_t pos = next().pos;
      left = binary("~", pos, std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      size_t pos = peek().pos;
      std::string op = next().text;
      left = binary(op, pos, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      size_t pos = next().pos;
      left = binary("**", pos, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this, peek().pos);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      size_t pos = peek().pos;
      e = make(Expr::Kind::kUnary, pos, next().text);
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    size_t pos = t.pos;
    if (t.kind == TokenKind::kName) {
      std::string name = next().text;
      auto e = make(Expr::Kind::kLiteral, pos);
      if (name == "true" || name == "True") e->literal = Value::boolean(true);
      else if (name == "false" || name == "False") e->literal = Value::boolean(false);
      else if (name == "none" || name == "None") e->literal = Value::none();
      else e = make(Expr::Kind::kName, pos, name);
      return e;
    }
    if (t.kind == TokenKind::kString) {
      std::string s;
      while (peek().kind == TokenKind::kString) s += next().text;  // adjacent literals join
      auto e = make(Expr::Kind::kLiteral, pos);
      e->literal = Value::string(std::move(s), /*trusted=*/true);
      return e;
    }
    if (t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat) {
      auto e = make(Expr::Kind::kLiteral, pos);
      std::string text = next().text;
      e->literal = t.kind == TokenKind::kInteger ? Value::integer(std::strtoll(text.c_str(), nullptr, 10))
                                                 : Value::number(std::strtod(text.c_str(), nullptr));
      return e;
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        next();
        return make(Expr::Kind::kTuple, pos);
      }
      ExprPtr first = parse_expression();
      if (is_op(",")) {
        auto tuple = make(Expr::Kind::kTuple, pos);
        tuple->args.push_back(std::move(first));
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          tuple->args.push_back(parse_expression());
        }
        first = std::move(tuple);
      }
      expect_op(")");
      return first;
    }
    if (is_op("[")) {
      next();
      auto list = make(Expr::Kind::kList, pos);
      while (!is_op("]")) {
        if (!list->args.empty()) expect_op(",");
        if (is_op("]")) break;
        list->args.push_back(parse_expression());
      }
      next();
      return list;
    }
    if (is_op("{")) {
      next();
      auto dict = make(Expr::Kind::kDict, pos);
      while (!is_op("}")) {
        if (!dict->args.empty()) expect_op(",");
        if (is_op("}")) break;
        dict->args.push_back(parse_expression());
        expect_op(":");
        dict->args.push_back(parse_expression());
      }
      next();
      return dict;
    }
    fail(pos, "unexpected '" + describe(t) + "'");
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (peek().kind == TokenKind::kName && is_op("=", 1)) {
        std::string key = next().text;
        next();
        call.keywords.emplace_back(std::move(key), parse_expression());
      } else {
        if (!call.keywords.empty()) fail(peek().pos, "positional argument follows keyword argument");
        call.args.push_back(parse_expression());
      }
    }
    next();
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      size_t pos = peek().pos;
      if (is_op(".")) {
        next();
        if (peek().kind == TokenKind::kInteger) {
          auto item = make(Expr::Kind::kItem, pos);
          auto index = make(Expr::Kind::kLiteral, pos);
          index->literal = Value::integer(std::strtoll(next().text.c_str(), nullptr, 10));
          item->args.push_back(std::move(e));
          item->args.push_back(std::move(index));
          e = std::move(item);
        } else {
          auto attr = make(Expr::Kind::kAttr, pos, expect_name());
          attr->args.push_back(std::move(e));
          e = std::move(attr);
        }
      } else if (is_op("[")) {
        next();
        e = parse_subscript(std::move(e), pos);
      } else if (is_op("(")) {
        auto call = make(Expr::Kind::kCall, pos);
        call->args.push_back(std::move(e));
        parse_call_args(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target, size_t pos) {
    ExprPtr parts[3];
    int colons = 0;
    while (!is_op("]")) {
      if (is_op(":")) {
        if (++colons > 2) fail(peek().pos, "unexpected ':'");
        next();
      } else {
        if (parts[colons]) fail(peek().pos, "expected ']'");
        parts[colons] = parse_expression();
      }
    }
    next();
    if (colons == 0) {
      if (!parts[0]) fail(pos, "expected an index");
      auto item = make(Expr::Kind::kItem, pos);
      item->args.push_back(std::move(target));
      item->args.push_back(std::move(parts[0]));
      return item;
    }
    auto slice = make(Expr::Kind::kSlice, pos);
    slice->args.push_back(std::move(target));
    for (auto& p : parts) slice->args.push_back(std::move(p));
    return slice;
  }

  ExprPtr parse_filter(ExprPtr input) {
    size_t pos = peek().pos;
    std::string name = expect_name();
    while (is_op(".")) {
      next();
      name += "." + expect_name();
    }
    if (!has_filter(name) && !soft_) fail(pos, "no filter named '" + name + "'");
    auto f = make(Expr::Kind::kFilter, pos, name);
    f->args.push_back(std::move(input));
    if (is_op("(")) parse_call_args(*f);
    return f;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        next();
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        size_t pos = next().pos;
        bool negated = false;
        if (is_name("not")) {
          next();
          negated = true;
        }
        std::string name;
        if (peek().kind == TokenKind::kName) {
          name = next().text;
        } else if (peek().kind == TokenKind::kOperator && (is_op("==") || is_op("!=") || is_op("<") ||
                                                           is_op(">") || is_op("<=") || is_op(">="))) {
          name = next().text;
        } else {
          fail(peek().pos, "expected a test name");
        }
        if (!has_test(name) && !soft_) fail(pos, "no test named '" + name + "'");
        auto t = make(Expr::Kind::kTest, pos, name);
        t->negated = negated;
        t->args.push_back(std::move(e));
        const Token& a = peek();
        if (is_op("(")) {
          parse_call_args(*t);
        } else if ((a.kind == TokenKind::kName || a.kind == TokenKind::kString || a.kind == TokenKind::kInteger ||
                    a.kind == TokenKind::kFloat || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("is")) {
          t->args.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else if (is_op("(")) {
        auto call = make(Expr::Kind::kCall, peek().pos);
        call->args.push_back(std::move(e));
        parse_call_args(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  // jinja2 checks that filters and tests exist when compiling, except in the branches of an
  // if statement or expression (its "soft" frames), where a missing one fails only when run.
  // Recursive descent: a hostile template nesting brackets or blocks thousands deep must get
  // an error, not a stack overflow.
  static constexpr int kMaxDepth = 256;
  struct DepthGuard {
    DepthGuard(Parser& p, size_t pos) : parser(p) {
      if (++parser.depth_ > kMaxDepth) parser.fail(pos, "nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  struct SoftScope {
    SoftScope(bool& flag, bool value) : flag_(flag), saved_(flag) { flag_ = value; }
    ~SoftScope() { flag_ = saved_; }
    bool& flag_;
    bool saved_;
  };

  const std::vector<Token>& tokens_;
  size_t at_ = 0;
  bool soft_ = false;
  int depth_ = 0;
};

}  // namespace

Result<Body> parse(const LexedTemplate& lexed) {
  try {
    return Parser(lexed).parse_template();
  } catch (const ParseError& e) {
    return invalid_argument("chat template syntax error at " + describe_position(lexed.source, e.pos) + ": " +
                            e.message);
  }
}

}  // namespace deepinfer::recipe::jinja
