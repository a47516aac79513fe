#include "grammar/lark.h"

#include <string>
#include <vector>

#include "grammar/gbnf.h"
#include "grammar/regex.h"
#include "grammar/utf8_ranges.h"

namespace deepinfer::grammar {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Lark: a name whose first letter is uppercase names a terminal (`_NL`, `WS`).
bool is_terminal_name(std::string_view name) {
  for (char c : name) {
    if (c != '_') return c >= 'A' && c <= 'Z';
  }
  return false;
}

// Lark's common.lark, the terminals `%import common.NAME` brings in, written in this dialect.
constexpr std::string_view kCommon = R"(
DIGIT: "0".."9"
HEXDIGIT: "a".."f" | "A".."F" | DIGIT
INT: DIGIT+
SIGNED_INT: ["+" | "-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e" | "E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+" | "-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+" | "-"] NUMBER
ESCAPED_STRING: "\"" _STRING_ESC_INNER "\""
_STRING_ESC_INNER: (/[^"\\\n]/ | "\\" /[^\n]/)*
LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_" | LETTER) ("_" | LETTER | DIGIT)*
WS_INLINE: (" " | "\t")+
WS: (" " | "\t" | "\f" | "\r" | "\n")+
CR: "\r"
LF: "\n"
NEWLINE: (CR? LF)+
SH_COMMENT: "#" /[^\n]*/
CPP_COMMENT: "//" /[^\n]*/
)";

class LarkParser {
 public:
  LarkParser(std::string_view text, std::string root) : t_(text), root_name_(std::move(root)) {}

  Result<Grammar> parse() {
    if (has_ignore()) {
      ignore_rule_ = g_.declare_rule("%ignore");
      ignore_ = g_.star(g_.call(ignore_rule_));
    }
    while (skip_blank(), !at_end()) {
      if (peek() == '%') {
        DI_RETURN_IF_ERROR(parse_directive());
      } else {
        DI_RETURN_IF_ERROR(parse_definition());
      }
      skip_inline();
      if (!at_end() && peek() != '\n') return error(std::string("unexpected '") + peek() + "'");
    }
    if (ignore_rule_ >= 0) g_.define_rule(ignore_rule_, g_.alt(std::move(ignored_)));
    const RuleId root = g_.find_rule(root_name_);
    if (root < 0 || !defined(root)) return invalid_argument("grammar has no '" + root_name_ + "' rule");
    g_.set_root(root);
    DI_RETURN_IF_ERROR(g_.validate());
    return std::move(g_);
  }

 private:
  bool at_end() const { return pos_ >= t_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < t_.size() ? t_[pos_ + ahead] : '\0'; }
  bool at(std::string_view s) const { return t_.substr(pos_, s.size()) == s; }
  Status error(const std::string& what) const {
    int line = 1;
    for (size_t i = 0; i < pos_ && i < t_.size(); ++i) line += t_[i] == '\n';
    return invalid_argument("grammar line " + std::to_string(line) + ": " + what);
  }
  bool defined(RuleId rule) const { return static_cast<size_t>(rule) < defined_.size() && defined_[rule]; }

  // Spaces, tabs and a // comment, up to the end of the line.
  void skip_inline() {
    while (!at_end()) {
      if (peek() == ' ' || peek() == '\t' || peek() == '\r') {
        ++pos_;
      } else if (at("//")) {
        while (!at_end() && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  // Whole lines too: between definitions, and inside ( ) and [ ].
  void skip_blank() {
    while (true) {
      skip_inline();
      if (at_end() || peek() != '\n') return;
      ++pos_;
    }
  }
  // Inside a group newlines are space; at the top level they end the definition.
  void skip_space(int depth) { depth > 0 ? skip_blank() : skip_inline(); }
  // At the end of a line: whether the next line that is not blank continues the definition
  // with `|`; if so, moves there.
  bool continues_with_bar() {
    const size_t saved = pos_;
    skip_blank();
    if (peek() == '|') return true;
    pos_ = saved;
    return false;
  }

  bool has_ignore() const {
    for (size_t line = 0; line < t_.size();) {
      size_t q = line;
      while (q < t_.size() && (t_[q] == ' ' || t_[q] == '\t')) ++q;
      if (t_.substr(q, 7) == "%ignore") return true;
      const size_t nl = t_.find('\n', line);
      if (nl == std::string_view::npos) break;
      line = nl + 1;
    }
    return false;
  }

  std::string read_name() {
    const size_t s = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    return std::string(t_.substr(s, pos_ - s));
  }

  Status parse_definition() {
    if (peek() == '?' || peek() == '!') ++pos_;  // inlining and keeping tokens: tree shape only
    const std::string name = read_name();
    if (name.empty()) return error(std::string("expected a rule or terminal name, found '") + peek() + "'");
    if (peek() == '.') {  // a priority, which only orders a lexer's choices
      ++pos_;
      if (!(peek() >= '0' && peek() <= '9') && peek() != '-') return error("expected a priority number after '" + name + ".'");
      ++pos_;
      while (peek() >= '0' && peek() <= '9') ++pos_;
    }
    skip_inline();
    if (peek() == '{') return error("templates ('" + name + "{...}') are not supported");
    if (peek() != ':') return error("expected ':' after '" + name + "'");
    ++pos_;
    skip_inline();
    if (peek() == '\n' && continues_with_bar()) ++pos_;  // the alternatives start on the next line
    const RuleId rule = g_.declare_rule(name);
    if (defined(rule)) return error("'" + name + "' is defined twice");
    const bool terminal = is_terminal_name(name);
    DI_ASSIGN_OR_RETURN(ExprId body, parse_alternatives(terminal, 0));
    if (name == root_name_ && !terminal && ignore_ >= 0) body = g_.seq({ignore_, body, ignore_});
    define(rule, body);
    return Status::ok_status();
  }

  void define(RuleId rule, ExprId body) {
    if (defined_.size() <= static_cast<size_t>(rule)) defined_.resize(rule + 1, 0);
    defined_[rule] = 1;
    g_.define_rule(rule, body);
  }

  Result<ExprId> parse_alternatives(bool terminal, int depth) {
    if (depth > 200) return error("groups nested too deeply");
    std::vector<ExprId> alts;
    while (true) {
      DI_ASSIGN_OR_RETURN(ExprId e, parse_sequence(terminal, depth));
      alts.push_back(e);
      skip_space(depth);
      if (at("->")) {  // an alias names the tree node; the text it matches is the same
        pos_ += 2;
        skip_inline();
        if (read_name().empty()) return error("expected a name after '->'");
        skip_space(depth);
      }
      if (peek() == '|' || (depth == 0 && peek() == '\n' && continues_with_bar())) {
        ++pos_;
        continue;
      }
      return g_.alt(std::move(alts));
    }
  }

  Result<ExprId> parse_sequence(bool terminal, int depth) {
    std::vector<ExprId> items;
    while (true) {
      skip_space(depth);
      const char c = peek();
      if (at_end() || c == '|' || c == ')' || c == ']' || c == '\n' || at("->")) break;
      DI_ASSIGN_OR_RETURN(ExprId item, parse_item(terminal, depth));
      // Between two items of a rule, what %ignore names may come (Lark's lexer skips it there).
      if (!items.empty() && !terminal && ignore_ >= 0) items.push_back(ignore_);
      items.push_back(item);
    }
    return g_.seq(std::move(items));
  }

  Result<int32_t> read_count() {
    skip_inline();
    const size_t s = pos_;
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') v = std::min<int64_t>(v * 10 + (t_[pos_++] - '0'), 1 << 30);
    if (pos_ == s) return error("expected a number after '~'");
    return static_cast<int32_t>(v);
  }

  // `atom` min..max times; in a rule, with what %ignore names between the repetitions.
  ExprId repeat(ExprId atom, int32_t min, int32_t max, bool terminal) {
    if (terminal || ignore_ < 0) return g_.repeat(atom, min, max);
    if (max == 0) return g_.empty();
    const int32_t more_max = max == kUnbounded ? kUnbounded : max - 1;
    const ExprId rest = g_.repeat(g_.seq({ignore_, atom}), std::max(min - 1, 0), more_max);
    const ExprId some = g_.seq({atom, rest});
    return min == 0 ? g_.optional(some) : some;
  }

  Result<ExprId> parse_item(bool terminal, int depth) {
    DI_ASSIGN_OR_RETURN(ExprId atom, parse_atom(terminal, depth));
    while (true) {
      skip_inline();  // Lark's own lexer skips spaces: `item ~ 3` and `item *` are items too
      const char c = peek();
      if (c == '?') {
        ++pos_;
        atom = g_.optional(atom);
      } else if (c == '*') {
        ++pos_;
        atom = repeat(atom, 0, kUnbounded, terminal);
      } else if (c == '+') {
        ++pos_;
        atom = repeat(atom, 1, kUnbounded, terminal);
      } else if (c == '~') {
        ++pos_;
        DI_ASSIGN_OR_RETURN(int32_t lo, read_count());
        int32_t hi = lo;
        if (at("..")) {
          pos_ += 2;
          DI_ASSIGN_OR_RETURN(hi, read_count());
        }
        if (hi < lo) return error("repetition bounds out of order");
        atom = repeat(atom, lo, hi, terminal);
      } else {
        return atom;
      }
    }
  }

  Result<ExprId> parse_atom(bool terminal, int depth) {
    const char c = peek();
    if (c == '(' || c == '[') {
      ++pos_;
      DI_ASSIGN_OR_RETURN(ExprId inner, parse_alternatives(terminal, depth + 1));
      skip_blank();
      const char close = c == '(' ? ')' : ']';
      if (peek() != close) return error(std::string("missing '") + close + "'");
      ++pos_;
      return c == '[' ? g_.optional(inner) : inner;
    }
    if (c == '"' || c == '\'') return parse_literal();
    if (c == '/') return parse_regex();
    if (at("%json")) {
      pos_ += 5;
      skip_inline();
      auto expr = embed_json_schema(g_, t_, &pos_, &n_json_);
      if (!expr.ok()) return error(expr.status().message());
      return *expr;
    }
    if (is_name_char(c)) {
      const std::string name = read_name();
      if (peek() == '{') return error("templates ('" + name + "{...}') are not supported");
      return g_.call(g_.declare_rule(name));
    }
    return error(std::string("unexpected '") + c + "'");
  }

  Result<uint32_t> hex(int n) {
    const std::optional<uint32_t> v = read_hex(t_, &pos_, n);
    if (!v) return error("bad hex escape");
    return *v;
  }

  // A quoted string's code points (Python's escapes), at its opening quote.
  Result<std::vector<uint32_t>> parse_string() {
    const char quote = peek();
    ++pos_;
    std::vector<uint32_t> out;
    while (peek() != quote) {
      if (at_end() || peek() == '\n') return error("unterminated string literal");
      if (peek() != '\\') {
        const std::optional<uint32_t> cp = read_utf8_char(t_, &pos_);
        if (!cp) return error("invalid UTF-8");
        out.push_back(*cp);
        continue;
      }
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'f': out.push_back('\f'); break;
        case 'v': out.push_back('\v'); break;
        case '0': out.push_back(0); break;
        case 'x': { DI_ASSIGN_OR_RETURN(uint32_t v, hex(2)); out.push_back(v); break; }
        case 'u': { DI_ASSIGN_OR_RETURN(uint32_t v, hex(4)); out.push_back(v); break; }
        case 'U': { DI_ASSIGN_OR_RETURN(uint32_t v, hex(8)); out.push_back(v); break; }
        case '\\': case '"': case '\'': out.push_back(static_cast<uint8_t>(e)); break;
        default: return error(std::string("unknown escape '\\") + e + "'");
      }
    }
    ++pos_;
    return out;
  }

  // "text", "text"i (ASCII letters in either case), or the range "a".."z".
  Result<ExprId> parse_literal() {
    DI_ASSIGN_OR_RETURN(std::vector<uint32_t> cps, parse_string());
    if (at("..")) {
      pos_ += 2;
      skip_inline();
      if (peek() != '"' && peek() != '\'') return error("expected a string after '..'");
      DI_ASSIGN_OR_RETURN(std::vector<uint32_t> hi, parse_string());
      if (cps.size() != 1 || hi.size() != 1) return error("a range's ends must be single characters");
      if (hi[0] < cps[0]) return error("character range out of order");
      CodepointSet set;
      set.add_range(cps[0], hi[0]);
      return utf8_expr(g_, set);
    }
    const bool any_case = peek() == 'i' && !is_name_char(peek(1));
    if (any_case) ++pos_;
    std::string bytes;
    std::vector<ExprId> parts;
    for (uint32_t cp : cps) {
      const bool letter = (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
      if (!any_case || !letter) {
        bytes += utf8_encode(cp);
        continue;
      }
      if (!bytes.empty()) parts.push_back(g_.bytes(bytes));
      bytes.clear();
      ByteSet both;
      both.add_range(static_cast<uint8_t>(cp | 0x20), static_cast<uint8_t>(cp | 0x20));
      both.add_range(static_cast<uint8_t>(cp & ~0x20u), static_cast<uint8_t>(cp & ~0x20u));
      parts.push_back(g_.byte_set(both));
    }
    if (!bytes.empty()) parts.push_back(g_.bytes(bytes));
    return parts.size() == 1 ? parts[0] : g_.seq(std::move(parts));
  }

  // /pattern/: the whole token matches the pattern (`\/` is a slash).
  Result<ExprId> parse_regex() {
    ++pos_;
    std::string pattern;
    while (peek() != '/') {
      if (at_end() || peek() == '\n') return error("unterminated regular expression");
      if (peek() == '\\' && peek(1) == '/') {
        pattern += '/';
        pos_ += 2;
        continue;
      }
      if (peek() == '\\') pattern += t_[pos_++];
      pattern += t_[pos_++];
    }
    ++pos_;
    if (is_name_char(peek())) return error("regular expression flags ('/.../" + read_name() + "') are not supported");
    auto expr = compile_regex(g_, pattern, RegexEncoding::kRaw, RegexMatch::kFull);
    if (!expr.ok()) return error("/" + pattern + "/: " + expr.status().message());
    return *expr;
  }

  Status parse_directive() {
    if (at("%ignore")) {
      pos_ += 7;
      DI_ASSIGN_OR_RETURN(ExprId e, parse_alternatives(/*terminal=*/true, 0));
      ignored_.push_back(e);
      return Status::ok_status();
    }
    if (at("%import")) {
      pos_ += 7;
      skip_inline();
      const std::string module = read_name();
      if (module != "common") {
        return error("only Lark's common terminals can be imported (%import common.NAME), not '" + module + "'");
      }
      if (peek() == '.') {
        ++pos_;
        const std::string name = read_name();
        skip_inline();
        std::string alias = name;
        if (at("->")) {
          pos_ += 2;
          skip_inline();
          alias = read_name();
        }
        return import_common(name, alias);
      }
      skip_inline();
      if (peek() != '(') return error("expected '.NAME' or '(NAME, ...)' after %import common");
      ++pos_;
      while (true) {
        skip_blank();
        const std::string name = read_name();
        if (name.empty()) return error("expected a terminal name in %import common (...)");
        DI_RETURN_IF_ERROR(import_common(name, name));
        skip_blank();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        if (peek() != ')') return error("expected ',' or ')' in %import common (...)");
        ++pos_;
        return Status::ok_status();
      }
    }
    if (at("%json")) return error("%json is an item: write it inside a rule");
    return error("unsupported directive (known: %import common.NAME, %ignore, %json {schema})");
  }

  Status import_common(const std::string& name, const std::string& alias) {
    if (name.empty() || alias.empty()) return error("expected a terminal name after %import common.");
    if (kCommon.find("\n" + name + ":") == std::string_view::npos) {
      return error("Lark's common terminals have no '" + name + "'");
    }
    auto common = LarkParser(kCommon, name).parse();
    if (!common.ok()) return common.status();  // a defect in kCommon, which its tests parse
    const RuleId rule = g_.declare_rule(alias);
    if (defined(rule)) return error("'" + alias + "' is defined twice");
    define(rule, g_.call(g_.import(*common, "%common." + name + "/")));
    return Status::ok_status();
  }

  std::string_view t_;
  std::string root_name_;
  size_t pos_ = 0;
  int n_json_ = 0;
  Grammar g_;
  std::vector<char> defined_;
  RuleId ignore_rule_ = -1;
  ExprId ignore_ = -1;  // (what %ignore names)*, between the items of rules
  std::vector<ExprId> ignored_;
};

}  // namespace

Result<Grammar> parse_lark(std::string_view text) { return LarkParser(text, "start").parse(); }

bool looks_like_lark(std::string_view text) {
  if (text.find("::=") != std::string_view::npos) return false;
  size_t at = 0;
  while (at < text.size()) {
    while (at < text.size() && (text[at] == ' ' || text[at] == '\t' || text[at] == '\r' || text[at] == '\n')) ++at;
    if (text.substr(at, 2) == "//") {
      at = text.find('\n', at);
      if (at == std::string_view::npos) return false;
      continue;
    }
    if (text.substr(at, 7) == "%import" || text.substr(at, 7) == "%ignore") return true;
    if (at < text.size() && (text[at] == '?' || text[at] == '!')) ++at;
    const size_t name_start = at;
    while (at < text.size() && is_name_char(text[at])) ++at;
    if (at == name_start) return false;
    if (at < text.size() && text[at] == '.') {
      ++at;
      while (at < text.size() && text[at] >= '0' && text[at] <= '9') ++at;
    }
    while (at < text.size() && (text[at] == ' ' || text[at] == '\t')) ++at;
    return at < text.size() && text[at] == ':';
  }
  return false;
}

}  // namespace deepinfer::grammar
