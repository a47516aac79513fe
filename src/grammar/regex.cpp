#include "grammar/regex.h"

#include <cctype>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace deepinfer::grammar {

namespace {

CodepointSet digits() {
  CodepointSet s;
  s.add_range('0', '9');
  return s;
}

CodepointSet word_chars() {
  CodepointSet s;
  s.add_range('0', '9');
  s.add_range('A', 'Z');
  s.add_range('a', 'z');
  s.add('_');
  return s;
}

// ECMAScript's WhiteSpace and LineTerminator.
CodepointSet space_chars() {
  CodepointSet s;
  for (uint32_t c : {0x09u, 0x0Au, 0x0Bu, 0x0Cu, 0x0Du, 0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu,
                     0x205Fu, 0x3000u, 0xFEFFu}) {
    s.add(c);
  }
  s.add_range(0x2000, 0x200A);
  return s;
}

CodepointSet dot_chars() {
  CodepointSet line;
  for (uint32_t c : {0x0Au, 0x0Du, 0x2028u, 0x2029u}) line.add(c);
  return line.complement();
}

std::string json_escape(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      return buf;
    }
  }
}

class RegexParser {
 public:
  RegexParser(Grammar& g, std::string_view p, RegexEncoding enc) : g_(g), p_(p), enc_(enc) {}

  Result<ExprId> parse_top(RegexMatch match) {
    std::vector<ExprId> alts;
    while (true) {
      bool start_anchor = false;
      if (peek() == '^') {
        ++pos_;
        start_anchor = true;
      }
      DI_ASSIGN_OR_RETURN(Tail body, parse_concat());
      if (peek() == ')') return error("unbalanced ')'");
      if (match == RegexMatch::kSearch) {
        const ExprId any = g_.star(any_char_expr(g_, enc_));
        alts.push_back(g_.seq({start_anchor ? g_.empty() : any, g_.alt({body.anchored, g_.seq({body.free, any})})}));
      } else {
        alts.push_back(g_.alt({body.anchored, body.free}));
      }
      if (at_end()) break;
      if (peek() == '|') {
        ++pos_;
        continue;
      }
      return error("unbalanced ')'");
    }
    return g_.alt(std::move(alts));
  }

 private:
  // What a concatenation or group matches when it ends the pattern: `anchored` where a '$'
  // ends it (nothing may follow), `free` where none does. A '$' is an anchor only at the end of
  // the pattern, possibly inside groups that end it, as in ^(a$|b): the ends are distributed.
  struct Tail {
    ExprId anchored, free;
  };

  bool at_end() const { return pos_ >= p_.size(); }
  char peek() const { return at_end() ? '\0' : p_[pos_]; }
  Status error(const std::string& what) const {
    return invalid_argument("regex '" + std::string(p_) + "': " + what + " at offset " + std::to_string(pos_));
  }

  Result<Tail> parse_alt() {
    std::vector<ExprId> anchored, free;
    while (true) {
      DI_ASSIGN_OR_RETURN(Tail e, parse_concat());
      anchored.push_back(e.anchored);
      free.push_back(e.free);
      if (peek() != '|') break;
      ++pos_;
    }
    return Tail{g_.alt(std::move(anchored)), g_.alt(std::move(free))};
  }

  // Up to '|' or ')' or the end.
  Result<Tail> parse_concat() {
    std::vector<ExprId> items;
    auto ends_here = [&] { return at_end() || peek() == '|' || peek() == ')'; };
    while (!ends_here()) {
      if (peek() == '$') {
        ++pos_;
        if (ends_here()) return Tail{g_.seq(std::move(items)), g_.nothing()};
        return error("'$' anchor inside the pattern is not supported");
      }
      if (peek() == '^') return error("'^' anchor inside the pattern is not supported");
      group_anchored_ = g_.nothing();
      const size_t atom_start = pos_;
      DI_ASSIGN_OR_RETURN(ExprId atom, parse_atom());
      const ExprId anchored = group_anchored_;
      const size_t atom_end = pos_;
      DI_ASSIGN_OR_RETURN(ExprId rep, parse_quantifiers(atom));
      if (anchored != g_.nothing()) {
        // A group with a '$' inside: only as the last item, unrepeated.
        if (pos_ != atom_end || !ends_here()) {
          pos_ = atom_start;
          return error("'$' anchor inside the pattern is not supported");
        }
        std::vector<ExprId> with_anchor = items;
        with_anchor.push_back(anchored);
        items.push_back(rep);
        return Tail{g_.seq(std::move(with_anchor)), g_.seq(std::move(items))};
      }
      items.push_back(rep);
    }
    return Tail{g_.nothing(), g_.seq(std::move(items))};
  }

  // {n}, {n,}, {n,m}; nullopt (position unchanged) when the brace is a literal.
  std::optional<std::pair<int32_t, int32_t>> parse_braces() {
    size_t q = pos_ + 1;
    auto number = [&](int64_t* out) {
      const size_t s = q;
      int64_t v = 0;
      while (q < p_.size() && p_[q] >= '0' && p_[q] <= '9') {
        v = std::min<int64_t>(v * 10 + (p_[q] - '0'), 1 << 30);
        ++q;
      }
      *out = v;
      return q > s;
    };
    int64_t lo = 0, hi = 0;
    if (!number(&lo)) return std::nullopt;
    hi = lo;
    if (q < p_.size() && p_[q] == ',') {
      ++q;
      if (!number(&hi)) hi = kUnbounded;
    }
    if (q >= p_.size() || p_[q] != '}') return std::nullopt;
    pos_ = q + 1;
    return std::make_pair(static_cast<int32_t>(lo), static_cast<int32_t>(hi));
  }

  Result<ExprId> parse_quantifiers(ExprId atom) {
    while (!at_end()) {
      const char c = peek();
      int32_t lo, hi;
      if (c == '*') {
        lo = 0, hi = kUnbounded, ++pos_;
      } else if (c == '+') {
        lo = 1, hi = kUnbounded, ++pos_;
      } else if (c == '?') {
        lo = 0, hi = 1, ++pos_;
      } else if (c == '{') {
        auto b = parse_braces();
        if (!b) return atom;
        lo = b->first, hi = b->second;
        if (hi != kUnbounded && hi < lo) return error("quantifier {" + std::to_string(lo) + "," + std::to_string(hi) + "} out of order");
      } else {
        return atom;
      }
      if (peek() == '?') ++pos_;  // lazy: same language
      atom = g_.repeat(atom, lo, hi);
    }
    return atom;
  }

  // One UTF-8 character of the pattern.
  Result<uint32_t> next_codepoint() {
    const auto b0 = static_cast<uint8_t>(p_[pos_]);
    int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + n > p_.size()) return error("invalid UTF-8");
    uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int i = 1; i < n; ++i) {
      const auto b = static_cast<uint8_t>(p_[pos_ + i]);
      if ((b >> 6) != 2) return error("invalid UTF-8");
      cp = cp << 6 | (b & 0x3F);
    }
    pos_ += n;
    return cp;
  }

  Result<uint32_t> hex(int n) {
    if (pos_ + n > p_.size()) return error("truncated hex escape");
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      const char c = p_[pos_ + i];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return error("bad hex digit in escape");
      v = v * 16 + d;
    }
    pos_ += n;
    return v;
  }

  // After a backslash: a class escape fills `set` and returns true; a character escape sets `cp`.
  Result<bool> parse_escape(bool in_class, CodepointSet* set, uint32_t* cp) {
    if (at_end()) return error("pattern ends with a backslash");
    const char c = p_[pos_++];
    switch (c) {
      case 'd': *set = digits(); return true;
      case 'D': *set = digits().complement(); return true;
      case 'w': *set = word_chars(); return true;
      case 'W': *set = word_chars().complement(); return true;
      case 's': *set = space_chars(); return true;
      case 'S': *set = space_chars().complement(); return true;
      case 't': *cp = '\t'; return false;
      case 'n': *cp = '\n'; return false;
      case 'r': *cp = '\r'; return false;
      case 'f': *cp = '\f'; return false;
      case 'v': *cp = '\v'; return false;
      case '0': *cp = 0; return false;
      case 'b':
        if (in_class) { *cp = '\b'; return false; }
        return error("word boundary \\b is not supported");
      case 'B': return error("\\B is not supported");
      case 'c': {
        if (at_end() || !std::isalpha(static_cast<unsigned char>(peek()))) return error("bad \\c escape");
        *cp = static_cast<uint32_t>(p_[pos_++]) % 32;
        return false;
      }
      case 'x': {
        DI_ASSIGN_OR_RETURN(*cp, hex(2));
        return false;
      }
      case 'u': {
        if (peek() == '{') {
          ++pos_;
          uint32_t v = 0;
          int n = 0;
          while (!at_end() && peek() != '}') {
            DI_ASSIGN_OR_RETURN(uint32_t d, hex(1));
            v = v * 16 + d;
            if (++n > 6 || v > kMaxCodepoint) return error("\\u{...} beyond U+10FFFF");
          }
          if (at_end() || n == 0) return error("bad \\u{...} escape");
          ++pos_;
          *cp = v;
          return false;
        }
        DI_ASSIGN_OR_RETURN(uint32_t v, hex(4));
        if (v >= 0xD800 && v <= 0xDBFF && pos_ + 6 <= p_.size() && p_[pos_] == '\\' && p_[pos_ + 1] == 'u') {
          const size_t save = pos_;
          pos_ += 2;
          auto lo = hex(4);
          if (lo.ok() && *lo >= 0xDC00 && *lo <= 0xDFFF) {
            *cp = 0x10000 + ((v - 0xD800) << 10) + (*lo - 0xDC00);
            return false;
          }
          pos_ = save;
        }
        *cp = v;
        return false;
      }
      case 'p':
      case 'P': return error("Unicode property escapes (\\p{...}) are not supported");
      case 'k': return error("named backreferences are not supported");
      default:
        if (c >= '1' && c <= '9') return error("backreferences are not supported");
        --pos_;
        DI_ASSIGN_OR_RETURN(*cp, next_codepoint());
        return false;
    }
  }

  Result<ExprId> parse_class() {
    ++pos_;  // '['
    bool negate = false;
    if (peek() == '^') {
      negate = true;
      ++pos_;
    }
    CodepointSet set;
    bool first = true;
    while (true) {
      if (at_end()) return error("unterminated character class");
      if (peek() == ']' && !first) break;
      if (peek() == ']' && first) {  // ECMAScript: [] matches nothing, [^] anything
        break;
      }
      first = false;
      uint32_t lo;
      CodepointSet esc_set;
      if (peek() == '\\') {
        ++pos_;
        DI_ASSIGN_OR_RETURN(bool is_set, parse_escape(true, &esc_set, &lo));
        if (is_set) {
          set.add_set(esc_set);
          continue;
        }
      } else {
        DI_ASSIGN_OR_RETURN(lo, next_codepoint());
      }
      if (peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi;
        if (peek() == '\\') {
          ++pos_;
          DI_ASSIGN_OR_RETURN(bool is_set, parse_escape(true, &esc_set, &hi));
          if (is_set) return error("a class escape cannot end a range");
        } else {
          DI_ASSIGN_OR_RETURN(hi, next_codepoint());
        }
        if (hi < lo) return error("character range out of order");
        set.add_range(lo, hi);
      } else {
        set.add(lo);
      }
    }
    ++pos_;  // ']'
    return codepoints_expr(g_, negate ? set.complement() : set, enc_);
  }

  Result<ExprId> parse_atom() {
    const char c = peek();
    switch (c) {
      case '(': {
        ++pos_;
        if (peek() == '?') {
          ++pos_;
          if (peek() == ':') {
            ++pos_;
          } else if (peek() == '<' && pos_ + 1 < p_.size() && p_[pos_ + 1] != '=' && p_[pos_ + 1] != '!') {
            while (!at_end() && peek() != '>') ++pos_;
            if (at_end()) return error("unterminated group name");
            ++pos_;
          } else if (peek() == '=' || peek() == '!' || peek() == '<') {
            return error("lookaround assertions are not supported");
          } else {
            return error("inline flags are not supported");
          }
        }
        DI_ASSIGN_OR_RETURN(Tail inner, parse_alt());
        if (peek() != ')') return error("missing ')'");
        ++pos_;
        group_anchored_ = inner.anchored;  // for the concatenation around it
        return inner.free;
      }
      case '[': return parse_class();
      case '.': ++pos_; return codepoints_expr(g_, dot_chars(), enc_);
      case '*':
      case '+':
      case '?': return error(std::string("nothing to repeat before '") + c + "'");
      case '\\': {
        ++pos_;
        CodepointSet set;
        uint32_t cp;
        DI_ASSIGN_OR_RETURN(bool is_set, parse_escape(false, &set, &cp));
        if (!is_set) set.add(cp);
        return codepoints_expr(g_, set, enc_);
      }
      default: {
        if (c == '{' && parse_braces()) return error("nothing to repeat before '{'");
        DI_ASSIGN_OR_RETURN(uint32_t cp, next_codepoint());
        CodepointSet set;
        set.add(cp);
        return codepoints_expr(g_, set, enc_);
      }
    }
  }

  Grammar& g_;
  ExprId group_anchored_ = -1;  // the last group parse_atom read: its Tail::anchored
  std::string_view p_;
  RegexEncoding enc_;
  size_t pos_ = 0;
};

}  // namespace

ExprId codepoints_expr(Grammar& g, const CodepointSet& set, RegexEncoding encoding) {
  if (encoding == RegexEncoding::kRaw) return utf8_expr(g, set);
  CodepointSet special;
  special.add_range(0, 0x1F);
  special.add('"');
  special.add('\\');
  std::vector<ExprId> alts = {utf8_expr(g, set.minus(special))};
  for (const auto& [lo, hi] : set.ranges()) {
    for (uint32_t cp = lo; cp <= hi && cp <= '\\'; ++cp) {
      if (special.contains(cp)) alts.push_back(g.bytes(json_escape(cp)));
    }
  }
  return g.alt(std::move(alts));
}

ExprId any_char_expr(Grammar& g, RegexEncoding encoding) {
  CodepointSet all;
  all.add_range(0, kMaxCodepoint);
  return codepoints_expr(g, all, encoding);
}

Result<ExprId> compile_regex(Grammar& g, std::string_view pattern, RegexEncoding encoding, RegexMatch match) {
  return RegexParser(g, pattern, encoding).parse_top(match);
}

}  // namespace deepinfer::grammar
