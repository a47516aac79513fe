#include "grammar/gbnf.h"

#include <string>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/utf8_ranges.h"

namespace deepinfer::grammar {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view t) : t_(t) {}

  Result<Grammar> parse() {
    skip_space();
    while (!at_end()) {
      const std::string name = read_name();
      if (name.empty()) return error("expected a rule name");
      skip_space();
      if (t_.substr(pos_, 3) != "::=") return error("expected '::=' after '" + name + "'");
      pos_ += 3;
      const RuleId rule = g_.declare_rule(name);
      if (defined_.size() <= static_cast<size_t>(rule)) defined_.resize(rule + 1, 0);
      if (defined_[rule]) return error("rule '" + name + "' is defined twice");
      defined_[rule] = 1;
      DI_ASSIGN_OR_RETURN(ExprId body, parse_alt(0));
      g_.define_rule(rule, body);
      skip_space();
    }
    const RuleId root = g_.find_rule("root");
    if (root < 0) return invalid_argument("grammar has no 'root' rule");
    g_.set_root(root);
    DI_RETURN_IF_ERROR(g_.validate());
    return std::move(g_);
  }

 private:
  bool at_end() const { return pos_ >= t_.size(); }
  char peek() const { return at_end() ? '\0' : t_[pos_]; }
  Status error(const std::string& what) const {
    int line = 1;
    for (size_t i = 0; i < pos_ && i < t_.size(); ++i) line += t_[i] == '\n';
    return invalid_argument("grammar line " + std::to_string(line) + ": " + what);
  }
  void skip_space() {
    while (!at_end()) {
      const char c = peek();
      if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }
  std::string read_name() {
    const size_t s = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    return std::string(t_.substr(s, pos_ - s));
  }
  // A name followed by ::= starts the next rule.
  bool at_rule_start() const {
    size_t q = pos_;
    while (q < t_.size() && is_name_char(t_[q])) ++q;
    if (q == pos_) return false;
    while (q < t_.size() && (t_[q] == ' ' || t_[q] == '\t' || t_[q] == '\n' || t_[q] == '\r')) ++q;
    return t_.substr(q, 3) == "::=";
  }

  Result<ExprId> parse_alt(int depth) {
    if (depth > 200) return error("groups nested too deeply");
    std::vector<ExprId> alts;
    while (true) {
      DI_ASSIGN_OR_RETURN(ExprId e, parse_seq(depth));
      alts.push_back(e);
      skip_space();
      if (peek() != '|') break;
      ++pos_;
    }
    return g_.alt(std::move(alts));
  }

  Result<ExprId> parse_seq(int depth) {
    std::vector<ExprId> items;
    while (true) {
      skip_space();
      if (at_end() || peek() == '|' || peek() == ')' || at_rule_start()) break;
      DI_ASSIGN_OR_RETURN(ExprId atom, parse_atom(depth));
      DI_ASSIGN_OR_RETURN(ExprId rep, parse_quantifier(atom));
      items.push_back(rep);
    }
    return g_.seq(std::move(items));
  }

  Result<ExprId> parse_quantifier(ExprId atom) {
    while (!at_end()) {
      const char c = peek();
      if (c == '*') { ++pos_; atom = g_.star(atom); continue; }
      if (c == '+') { ++pos_; atom = g_.plus(atom); continue; }
      if (c == '?') { ++pos_; atom = g_.optional(atom); continue; }
      if (c != '{') break;
      ++pos_;
      auto number = [&](int32_t* out) {
        const size_t s = pos_;
        int64_t v = 0;
        while (!at_end() && peek() >= '0' && peek() <= '9') v = std::min<int64_t>(v * 10 + (t_[pos_++] - '0'), 1 << 30);
        *out = static_cast<int32_t>(v);
        return pos_ > s;
      };
      int32_t lo = 0, hi = 0;
      skip_space();
      if (!number(&lo)) return error("expected a number after '{'");
      skip_space();
      hi = lo;
      if (peek() == ',') {
        ++pos_;
        skip_space();
        if (!number(&hi)) hi = kUnbounded;
        skip_space();
      }
      if (peek() != '}') return error("expected '}'");
      ++pos_;
      if (hi != kUnbounded && hi < lo) return error("repetition bounds out of order");
      atom = g_.repeat(atom, lo, hi);
    }
    return atom;
  }

  Result<uint32_t> hex(int n) {
    const std::optional<uint32_t> v = read_hex(t_, &pos_, n);
    if (!v) return error("bad hex escape");
    return *v;
  }

  // One character of a literal or class (after its escape).
  Result<uint32_t> parse_char() {
    if (at_end()) return error("unexpected end of grammar");
    if (peek() == '\\') {
      ++pos_;
      const char c = peek();
      ++pos_;
      switch (c) {
        case 'n': return uint32_t{'\n'};
        case 'r': return uint32_t{'\r'};
        case 't': return uint32_t{'\t'};
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<uint32_t>(c);
        default: return error(std::string("unknown escape '\\") + c + "'");
      }
    }
    const std::optional<uint32_t> cp = read_utf8_char(t_, &pos_);
    if (!cp) return error("invalid UTF-8");
    return *cp;
  }

  // A "..." literal's bytes (at its opening quote; past its closing one after).
  Result<std::string> parse_literal() {
    ++pos_;
    std::string bytes;
    while (peek() != '"') {
      if (at_end() || peek() == '\n') return error("unterminated string literal");
      DI_ASSIGN_OR_RETURN(uint32_t cp, parse_char());
      bytes += utf8_encode(cp);
    }
    ++pos_;
    return bytes;
  }

  Result<ExprId> parse_atom(int depth) {
    const char c = peek();
    if (c == '"') {
      DI_ASSIGN_OR_RETURN(std::string bytes, parse_literal());
      return g_.bytes(bytes);
    }
    if (c == '[') {
      ++pos_;
      bool negate = false;
      if (peek() == '^') {
        negate = true;
        ++pos_;
      }
      CodepointSet set;
      while (peek() != ']') {
        if (at_end()) return error("unterminated character class");
        DI_ASSIGN_OR_RETURN(uint32_t lo, parse_char());
        uint32_t hi = lo;
        if (peek() == '-' && pos_ + 1 < t_.size() && t_[pos_ + 1] != ']') {
          ++pos_;
          DI_ASSIGN_OR_RETURN(hi, parse_char());
        }
        if (hi < lo) return error("character range out of order");
        set.add_range(lo, hi);
      }
      ++pos_;
      return utf8_expr(g_, negate ? set.complement() : set);
    }
    if (c == '.') {
      ++pos_;
      return any_char_expr(g_, RegexEncoding::kRaw);
    }
    if (c == '(') {
      ++pos_;
      DI_ASSIGN_OR_RETURN(ExprId inner, parse_alt(depth + 1));
      skip_space();
      if (peek() != ')') return error("missing ')'");
      ++pos_;
      return inner;
    }
    if (c == '%') return parse_directive();
    if (c == '<') return error("token references (<[id]>) are not supported");
    if (is_name_char(c)) {
      const std::string name = read_name();
      return g_.call(g_.declare_rule(name));
    }
    return error(std::string("unexpected '") + c + "'");
  }

  Result<ExprId> parse_directive() {
    if (t_.substr(pos_, 5) == "%json") return parse_json_schema();
    if (t_.substr(pos_, 8) == "%pattern") return parse_pattern();
    return error("unknown directive (known: %json {schema}, %pattern \"regex\")");
  }

  // `%pattern "regex"`: the texts a JSON Schema `pattern` accepts (some substring matches,
  // unless ^ or $ anchor an end), as raw UTF-8.
  Result<ExprId> parse_pattern() {
    pos_ += 8;
    skip_space();
    if (peek() != '"') return error("expected a string literal after %pattern");
    DI_ASSIGN_OR_RETURN(std::string pattern, parse_literal());
    auto expr = compile_regex(g_, pattern, RegexEncoding::kRaw, RegexMatch::kSearch);
    if (!expr.ok()) return error("%pattern: " + expr.status().message());
    return *expr;
  }

  // `%json {...}`: the JSON texts valid against the schema object that follows.
  Result<ExprId> parse_json_schema() {
    pos_ += 5;
    skip_space();
    auto expr = embed_json_schema(g_, t_, &pos_, &n_json_);
    if (!expr.ok()) return error(expr.status().message());
    return *expr;
  }

  std::string_view t_;
  size_t pos_ = 0;
  int n_json_ = 0;
  Grammar g_;
  std::vector<char> defined_;
};

}  // namespace

Result<Grammar> parse_gbnf(std::string_view text) { return GbnfParser(text).parse(); }

std::optional<uint32_t> read_utf8_char(std::string_view text, size_t* pos) {
  if (*pos >= text.size()) return std::nullopt;
  const auto b0 = static_cast<uint8_t>(text[*pos]);
  const size_t n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
  if (n == 0 || *pos + n > text.size()) return std::nullopt;
  uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t i = 1; i < n; ++i) cp = cp << 6 | (static_cast<uint8_t>(text[*pos + i]) & 0x3F);
  *pos += n;
  return cp;
}

std::optional<uint32_t> read_hex(std::string_view text, size_t* pos, int digits) {
  uint32_t v = 0;
  for (int i = 0; i < digits; ++i) {
    const char c = *pos < text.size() ? text[*pos] : '\0';
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v * 16 + static_cast<uint32_t>(d);
    ++*pos;
  }
  return v;
}

Result<ExprId> embed_json_schema(Grammar& g, std::string_view text, size_t* pos, int* n_embedded) {
  if (*pos >= text.size() || text[*pos] != '{') return invalid_argument("expected a JSON Schema object after %json");
  const size_t start = *pos;
  int depth = 0;
  bool in_string = false;
  size_t at = start;
  for (; at < text.size(); ++at) {
    const char b = text[at];
    if (in_string) {
      if (b == '\\') ++at;
      else if (b == '"') in_string = false;
    } else if (b == '"') {
      in_string = true;
    } else if (b == '{' || b == '[') {
      ++depth;
    } else if ((b == '}' || b == ']') && --depth == 0) {
      break;
    }
  }
  if (at >= text.size()) return invalid_argument("unterminated JSON Schema after %json");
  *pos = at + 1;
  auto lowered = json_schema_to_grammar(text.substr(start, *pos - start), JsonSchemaOptions{});
  if (!lowered.ok()) return invalid_argument("%json: " + lowered.status().message());
  // Joined in under names neither dialect can write.
  return g.call(g.import(*lowered, "%json" + std::to_string(++*n_embedded) + "/"));
}

}  // namespace deepinfer::grammar
