#include "recipe/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace deepinfer::recipe::jinja {

Value Value::undefined(std::string hint) {
  Value v;
  v.hint = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.b = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.i = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = f;
  return v;
}
Value Value::string(Text t) {
  Value v;
  v.kind = Kind::kString;
  v.text = std::move(t);
  return v;
}
Value Value::string(std::string s, bool trusted) { return string(Text(std::move(s), trusted)); }
Value Value::new_list(List items) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::new_tuple(List items) {
  Value v = new_list(std::move(items));
  v.tuple = true;
  return v;
}
Value Value::new_dict(Dict items) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<Dict>(std::move(items));
  return v;
}
Value Value::new_namespace() {
  Value v = new_dict();
  v.kind = Kind::kNamespace;
  return v;
}
Value Value::callable(Callable fn) {
  Value v;
  v.kind = Kind::kCallable;
  v.fn = std::make_shared<Callable>(std::move(fn));
  return v;
}

Value from_json(const nlohmann::ordered_json& j, bool trusted) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value::integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::json::value_t::string: return Value::string(j.get<std::string>(), trusted);
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, trusted));
      return Value::new_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        items.emplace_back(Value::string(it.key(), trusted), from_json(it.value(), trusted));
      }
      return Value::new_dict(std::move(items));
    }
    default: return Value::none();
  }
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.b;
    case Value::Kind::kInt: return v.i != 0;
    case Value::Kind::kFloat: return v.f != 0;
    case Value::Kind::kString: return !v.text.str.empty();
    case Value::Kind::kList: return v.generator || !v.list->empty();
    case Value::Kind::kDict: return !v.dict->empty();
    default: return true;
  }
}

const char* type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    default: return "function";
  }
}

double as_double(const Value& v) {
  if (v.kind == Value::Kind::kFloat) return v.f;
  if (v.kind == Value::Kind::kInt) return static_cast<double>(v.i);
  return v.b ? 1.0 : 0.0;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat) {
      return (a.kind == Value::Kind::kInt ? a.i : a.b) == (b.kind == Value::Kind::kInt ? b.i : b.b);
    }
    return as_double(a) == as_double(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.text.str == b.text.str;
    case Value::Kind::kList: {
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i) {
        if (!equals((*a.list)[i], (*b.list)[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* other = k.is_string() ? dict_find(*b.dict, k.text.str) : nullptr;
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default: return a.dict == b.dict && a.fn == b.fn;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    double x = as_double(a), y = as_double(b);
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) return a.text.str.compare(b.text.str);
  if (a.is_list() && b.is_list()) {
    size_t n = std::min(a.list->size(), b.list->size());
    for (size_t i = 0; i < n; ++i) {
      if (!equals((*a.list)[i], (*b.list)[i])) return compare((*a.list)[i], (*b.list)[i]);
    }
    return a.list->size() < b.list->size() ? -1 : (a.list->size() > b.list->size() ? 1 : 0);
  }
  throw RenderError(std::string("'<' not supported between instances of '") + type_name(a) +
                    "' and '" + type_name(b) + "'");
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: fixed for exponents in [-4, 16),
  // scientific with a two-digit exponent otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exponent = std::stoi(sci.substr(e + 1));
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  // Built by appending: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string here.
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0.";
      out.append(-exponent - 1, '0');
      out += digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out += digits;
      out.append(exponent + 1 - digits.size(), '0');
      out += ".0";
    } else {
      out.append(digits, 0, exponent + 1);
      out += '.';
      out.append(digits, exponent + 1, std::string::npos);
    }
  } else {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp_buf;
  }
  return out;
}

namespace {

// Decodes one character at s[i] and advances i past it. A character is a byte with the UTF-8
// continuation bytes after it, however many (length, indexing, slicing and iteration all count
// so, and invalid UTF-8 cannot make them disagree); a malformed one decodes as U+FFFD, a lone
// byte as itself.
uint32_t next_code_point(std::string_view s, size_t& i) {
  auto c = static_cast<unsigned char>(s[i]);
  const size_t extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
  size_t end = i + 1;
  while (end < s.size() && is_continuation_byte(s[end])) ++end;
  uint32_t cp = c;
  if (end - i == extra + 1 && extra > 0) {
    cp = c & (0x3F >> extra);
    for (size_t k = i + 1; k < end; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[k]) & 0x3F);
  } else if (end - i > 1) {
    cp = 0xFFFD;
  }
  i = end;
  return cp;
}

// Python's str.isprintable() for the code points chat text meets: control and format
// characters, separators other than the ASCII space, private use.
bool printable(uint32_t cp) {
  if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0xA0) || cp == 0xAD) return false;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F)) return false;
  if ((cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF) return false;
  if ((cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F || cp == 0x180E) return false;
  if ((cp >= 0xD800 && cp <= 0xF8FF) || (cp >= 0xFFF9 && cp <= 0xFFFB)) return false;
  return true;
}

Text repr_string(const Text& t) {
  const std::string& s = t.str;
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  bool trusted = t.all_trusted();
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    uint32_t cp = next_code_point(s, i);
    char buf[16];
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (printable(cp)) {
      out.append(s, start, i - start);
    } else {
      std::snprintf(buf, sizeof buf, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
      out += buf;
    }
  }
  out += quote;
  return Text(std::move(out), trusted);
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    char ch = s[i];
    auto c = static_cast<unsigned char>(ch);
    if (ensure_ascii && c >= 0x80) {
      uint32_t cp = next_code_point(s, i);
      char buf[16];
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      }
      out += buf;
      continue;
    }
    ++i;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

bool all_strings_trusted(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString: return v.text.all_trusted();
    case Value::Kind::kList:
      return std::all_of(v.list->begin(), v.list->end(), all_strings_trusted);
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      return std::all_of(v.dict->begin(), v.dict->end(), [](const auto& kv) {
        return all_strings_trusted(kv.first) && all_strings_trusted(kv.second);
      });
    default: return true;
  }
}

void dump_json(const Value& v, const JsonOptions& o, int depth, std::string& out) {
  auto newline = [&](int level) {
    if (!o.indented) return;
    const uint64_t pad = repeated_size(o.indent.size(), level);
    check_string_size(pad);
    check_string_size(out.size() + 1 + pad);
    out += '\n';
    for (int k = 0; k < level; ++k) out += o.indent;
  };
  switch (v.kind) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.b ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.i); return;
    case Value::Kind::kFloat:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += format_float(v.f);
      return;
    case Value::Kind::kString: append_json_string(out, v.text.str, o.ensure_ascii); return;
    case Value::Kind::kList: {
      if (v.generator) throw RenderError("Object of type generator is not JSON serializable");
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += o.item_separator;
        newline(depth + 1);
        dump_json((*v.list)[k], o, depth + 1, out);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.dict->empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& kv : *v.dict) entries.push_back(&kv);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](auto* a, auto* b) { return compare(a->first, b->first) < 0; });
      }
      out += '{';
      for (size_t k = 0; k < entries.size(); ++k) {
        if (k) out += o.item_separator;
        newline(depth + 1);
        const Value& key = entries[k]->first;
        if (key.is_string()) append_json_string(out, key.text.str, o.ensure_ascii);
        else append_json_string(out, to_text(key).str, o.ensure_ascii);
        out += o.key_separator;
        dump_json(entries[k]->second, o, depth + 1, out);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      throw RenderError(std::string("Object of type ") + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

Text html_escape(const Text& in) {
  Text out;
  size_t begin = 0;
  for (const Text::Run& r : in.runs) {
    for (size_t k = begin; k < r.end; ++k) {
      const char* rep = nullptr;
      switch (in.str[k]) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&#34;"; break;
        case '\'': rep = "&#39;"; break;
        default: break;
      }
      out.append(rep ? std::string_view(rep) : std::string_view(in.str).substr(k, 1), r.trusted);
    }
    begin = r.end;
  }
  return out;
}

Text repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString: return repr_string(v.text);
    case Value::Kind::kList: {
      Text out(v.tuple ? "(" : "[", true);
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out.append(", ", true);
        out.append(repr((*v.list)[k]));
      }
      if (v.tuple && v.list->size() == 1) out.append(",", true);
      out.append(v.tuple ? ")" : "]", true);
      return out;
    }
    case Value::Kind::kDict: {
      Text out("{", true);
      bool first = true;
      for (const auto& [key, value] : *v.dict) {
        if (!first) out.append(", ", true);
        first = false;
        out.append(repr(key));
        out.append(": ", true);
        out.append(repr(value));
      }
      out.append("}", true);
      return out;
    }
    default: return to_text(v);
  }
}

Text to_text(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return Text();
    case Value::Kind::kNone: return Text("None", true);
    case Value::Kind::kBool: return Text(v.b ? "True" : "False", true);
    case Value::Kind::kInt: return Text(std::to_string(v.i), true);
    case Value::Kind::kFloat: return Text(format_float(v.f), true);
    case Value::Kind::kString: return v.text;
    case Value::Kind::kList: return v.generator ? Text("<generator object>", true) : repr(v);
    case Value::Kind::kDict: return repr(v);
    case Value::Kind::kNamespace: return Text("<Namespace>", true);
    default: return Text("<function>", true);
  }
}

Text to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  dump_json(v, options, 0, out);
  // The punctuation is the filter's, but the whole dump is only as trusted as its strings.
  return Text(std::move(out), all_strings_trusted(v));
}

const Value* dict_find(const Dict& d, std::string_view key) {
  for (const auto& [k, v] : d) {
    if (k.is_string() && k.text.str == key) return &v;
  }
  return nullptr;
}

Value get_item(const Value& container, const Value& key) {
  if (container.kind == Value::Kind::kDict || container.kind == Value::Kind::kNamespace) {
    for (const auto& [k, v] : *container.dict) {
      if (equals(k, key)) return v;
    }
    return Value::undefined("'dict object' has no attribute '" + to_text(key).str + "'");
  }
  if (container.is_list() && container.generator) throw RenderError("'generator' object is not subscriptable");
  if ((container.is_list() || container.is_string()) && key.kind == Value::Kind::kInt) {
    int64_t n = length(container);
    int64_t idx = key.i < 0 ? key.i + n : key.i;
    if (idx < 0 || idx >= n) {
      return Value::undefined(std::string("'") + type_name(container) +
                              " object' has no element " + std::to_string(key.i));
    }
    if (container.is_list()) return (*container.list)[idx];
    return iterate(container)[idx];
  }
  if (container.is_undefined()) {
    throw RenderError(container.hint.empty() ? "undefined value has no item " + to_text(key).str
                                             : container.hint);
  }
  return Value::undefined(std::string("'") + type_name(container) + " object' has no attribute '" +
                          to_text(key).str + "'");
}

List iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return *v.list;
    case Value::Kind::kDict: {
      List keys;
      for (const auto& kv : *v.dict) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      List chars;
      const std::string& s = v.text.str;
      for (size_t i = 0; i < s.size();) {
        size_t start = i;
        next_code_point(s, i);
        chars.push_back(Value::string(v.text.slice(start, i - start)));
      }
      return chars;
    }
    default: throw RenderError(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

void check_string_size(uint64_t n) {
  if (n > kMaxStringBytes) throw RenderError("template string exceeds " + std::to_string(kMaxStringBytes) + " bytes");
}

void check_list_size(uint64_t n) {
  if (n > kMaxListItems) throw RenderError("template list exceeds " + std::to_string(kMaxListItems) + " items");
}

uint64_t repeated_size(uint64_t size, int64_t count) {
  if (count <= 0) return 0;
  uint64_t total = 0;
  return __builtin_mul_overflow(size, static_cast<uint64_t>(count), &total) ? UINT64_MAX : total;
}

int64_t length(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: {
      const std::string& s = v.text.str;
      int64_t n = 0;
      for (size_t i = 0; i < s.size(); ++i) n += i == 0 || !is_continuation_byte(s[i]);
      return n;
    }
    case Value::Kind::kList:
      if (v.generator) throw RenderError("object of type 'generator' has no len()");
      return static_cast<int64_t>(v.list->size());
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: return static_cast<int64_t>(v.dict->size());
    default: throw RenderError(std::string("object of type '") + type_name(v) + "' has no len()");
  }
}

}  // namespace deepinfer::recipe::jinja
