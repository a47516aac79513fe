#include "recipe/jinja/lexer.h"

#include <cctype>
#include <cstring>
#include <optional>

namespace deepinfer::recipe::jinja {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalize_newlines(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Python's "unicode-escape" decoding, which jinja2 applies to string literals.
std::string unescape(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out += body[i];
      continue;
    }
    char e = body[++i];
    auto hex = [&](int n) -> int64_t {
      if (i + n >= body.size()) return -1;
      uint32_t v = 0;
      for (int k = 1; k <= n; ++k) {
        char h = body[i + k];
        if (!std::isxdigit(static_cast<unsigned char>(h))) return -1;
        v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      i += n;
      return v;
    };
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '0': out += '\0'; break;
      case '\n': break;
      case 'x':
      case 'u':
      case 'U': {
        int64_t cp = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
        if (cp < 0) {
          out += '\\';
          out += e;
        } else {
          append_utf8(out, static_cast<uint32_t>(cp));
        }
        break;
      }
      default:
        out += '\\';
        out += e;
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) { out_.source = std::move(source); }

  Result<LexedTemplate> run() {
    const std::string& s = out_.source;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s.size()) {
      size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        push(TokenKind::kData, s.substr(pos), pos);
        break;
      }
      char kind = s[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < s.size() ? s[tag + 2] : '\0';
      std::string text = s.substr(pos, tag - pos);
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && is_space(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: only blanks between the line start and a block or comment tag go.
        size_t line_start = text.rfind('\n');
        line_start = line_start == std::string::npos ? 0 : line_start + 1;
        if ((line_start > 0 || line_starting) && line_start < text.size()) {
          bool blank = true;
          for (size_t k = line_start; k < text.size(); ++k) blank = blank && is_space(text[k]);
          if (blank) text.resize(line_start);
        }
      }
      if (!text.empty()) push(TokenKind::kData, text, pos);
      size_t body = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      Result<size_t> next = kind == '#'   ? comment(tag, body)
                            : kind == '%' ? block(tag, body)
                                          : expression(tag, body, /*block=*/false);
      if (!next.ok()) return next.status();
      pos = *next;
      line_starting = pos > 0 && s[pos - 1] == '\n';
    }
    push(TokenKind::kEnd, "", s.size());
    return std::move(out_);
  }

 private:
  size_t find_tag(size_t from) const {
    const std::string& s = out_.source;
    for (size_t p = s.find('{', from); p != std::string::npos; p = s.find('{', p + 1)) {
      if (p + 1 < s.size() && (s[p + 1] == '{' || s[p + 1] == '%' || s[p + 1] == '#')) return p;
    }
    return std::string::npos;
  }

  void push(TokenKind kind, std::string text, size_t pos) { out_.tokens.push_back({kind, std::move(text), pos}); }

  Status error(size_t pos, const std::string& what) const {
    return invalid_argument("chat template syntax error at " + describe_position(out_.source, pos) + ": " + what);
  }

  // After a block or comment end: "-" eats all following whitespace, "+" keeps it, and
  // otherwise trim_blocks removes one newline.
  size_t after_block_end(size_t end_pos, char sign) const {
    const std::string& s = out_.source;
    if (sign == '-') {
      while (end_pos < s.size() && is_space(s[end_pos])) ++end_pos;
    } else if (sign != '+' && end_pos < s.size() && s[end_pos] == '\n') {
      ++end_pos;
    }
    return end_pos;
  }

  Result<size_t> comment(size_t tag, size_t body) {
    size_t end = out_.source.find("#}", body);
    if (end == std::string::npos) return error(tag, "missing end of comment tag");
    char sign = end > body ? out_.source[end - 1] : '\0';
    return after_block_end(end + 2, sign);
  }

  // {% raw %} ... {% endraw %}: the body is text.
  std::optional<size_t> raw_block(size_t tag, size_t body) {
    const std::string& s = out_.source;
    size_t p = body;
    while (p < s.size() && is_space(s[p])) ++p;
    if (s.compare(p, 3, "raw") != 0) return std::nullopt;
    p += 3;
    while (p < s.size() && is_space(s[p])) ++p;
    char sign = '\0';
    if (p < s.size() && (s[p] == '-' || s[p] == '+')) sign = s[p++];
    if (s.compare(p, 2, "%}") != 0) return std::nullopt;
    p = sign == '-' ? after_block_end(p + 2, '-') : p + 2;
    for (size_t q = s.find("{%", p); q != std::string::npos; q = s.find("{%", q + 1)) {
      size_t r = q + 2;
      char open_sign = r < s.size() && (s[r] == '-' || s[r] == '+') ? s[r++] : '\0';
      while (r < s.size() && is_space(s[r])) ++r;
      if (s.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < s.size() && is_space(s[r])) ++r;
      char close_sign = r < s.size() && (s[r] == '-' || s[r] == '+') ? s[r++] : '\0';
      if (s.compare(r, 2, "%}") != 0) continue;
      std::string text = s.substr(p, q - p);
      if (open_sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      }
      if (!text.empty()) push(TokenKind::kData, text, p);
      return after_block_end(r + 2, close_sign);
    }
    return std::nullopt;
  }

  Result<size_t> block(size_t tag, size_t body) {
    if (auto end = raw_block(tag, body)) return *end;
    return expression(tag, body, /*block=*/true);
  }

  Result<size_t> expression(size_t tag, size_t body, bool block) {
    const std::string& s = out_.source;
    push(block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", tag);
    const char close = block ? '%' : '}';
    std::string open;  // closers of the open brackets: "}}" inside a dict literal does not end the tag
    size_t p = body;
    while (true) {
      while (p < s.size() && is_space(s[p])) ++p;
      if (p >= s.size()) return error(tag, block ? "missing end of block tag '%}'" : "missing end of expression '}}'");
      if (open.empty()) {
        char sign = s[p] == '-' || s[p] == '+' ? s[p] : '\0';
        size_t q = p + (sign ? 1 : 0);
        if (q + 1 < s.size() && s[q] == close && s[q + 1] == '}' && (block || sign != '+')) {
          push(block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", p);
          if (block) return after_block_end(q + 2, sign);
          size_t end = q + 2;
          if (sign == '-') {
            while (end < s.size() && is_space(s[end])) ++end;
          }
          return end;
        }
      }
      char c = s[p];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t q = p;
        while (q < s.size() && (std::isdigit(static_cast<unsigned char>(s[q])) || s[q] == '_')) ++q;
        bool after_dot = p > 0 && s[p - 1] == '.';
        bool is_float = false;
        if (!after_dot && q + 1 < s.size() && s[q] == '.' && std::isdigit(static_cast<unsigned char>(s[q + 1]))) {
          is_float = true;
          ++q;
          while (q < s.size() && (std::isdigit(static_cast<unsigned char>(s[q])) || s[q] == '_')) ++q;
        }
        if (!after_dot && q < s.size() && (s[q] == 'e' || s[q] == 'E')) {
          size_t r = q + 1;
          if (r < s.size() && (s[r] == '+' || s[r] == '-')) ++r;
          if (r < s.size() && std::isdigit(static_cast<unsigned char>(s[r]))) {
            is_float = true;
            q = r;
            while (q < s.size() && std::isdigit(static_cast<unsigned char>(s[q]))) ++q;
          }
        }
        std::string num;
        for (size_t k = p; k < q; ++k) {
          if (s[k] != '_') num += s[k];
        }
        push(is_float ? TokenKind::kFloat : TokenKind::kInteger, num, p);
        p = q;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < s.size() && (std::isalnum(static_cast<unsigned char>(s[q])) || s[q] == '_')) ++q;
        push(TokenKind::kName, s.substr(p, q - p), p);
        p = q;
      } else if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < s.size() && s[q] != c) q += s[q] == '\\' ? 2 : 1;
        if (q >= s.size()) return error(p, "unterminated string");
        push(TokenKind::kString, unescape(std::string_view(s).substr(p + 1, q - p - 1)), p);
        p = q + 1;
      } else {
        static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* two : kTwo) {
          if (s.compare(p, 2, two) == 0) op = two;
        }
        if (op.empty()) {
          if (!std::strchr("+-/*%~[](){}<>=.:|,;", c)) return error(p, std::string("unexpected char '") + c + "'");
          op = std::string(1, c);
        }
        if (op == "(") open += ')';
        if (op == "[") open += ']';
        if (op == "{") open += '}';
        if (op == ")" || op == "]" || op == "}") {
          if (open.empty()) return error(p, "unexpected '" + op + "'");
          if (open.back() != op[0]) return error(p, "unexpected '" + op + "', expected '" + open.back() + "'");
          open.pop_back();
        }
        push(TokenKind::kOperator, op, p);
        p += op.size();
      }
    }
  }

  LexedTemplate out_;
};

}  // namespace

std::string describe_position(const std::string& source, size_t pos) {
  size_t line = 1, line_start = 0;
  for (size_t k = 0; k < pos && k < source.size(); ++k) {
    if (source[k] == '\n') {
      ++line;
      line_start = k + 1;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(pos - line_start + 1);
}

Result<LexedTemplate> lex(const std::string& source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace deepinfer::recipe::jinja
