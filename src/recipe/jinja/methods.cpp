#include "recipe/jinja/methods.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <unordered_map>

#include "recipe/jinja/builtins.h"

namespace deepinfer::recipe::jinja {

namespace {

const Value kNoValue = Value::undefined();
const Value kNone = Value::none();

const Value& arg(CallArgs& args, size_t index, std::string_view keyword, const Value& fallback = kNoValue) {
  return positional_or_keyword(args, index, keyword, fallback);
}

}  // namespace

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

const Text& need_string(const Value& v, const char* what) {
  if (!v.is_string()) {
    if (v.is_undefined() && !v.hint.empty()) throw RenderError(v.hint);
    throw RenderError(std::string(what) + " expects a string, got '" + type_name(v) + "'");
  }
  return v.text;
}

static Value bool_value(bool b) { return Value::boolean(b); }

// Python's str.strip(chars) family on bytes; chars are ASCII in every template we know.
Text strip_text(const Text& t, const Value& chars, bool left, bool right) {
  auto in_set = [&](char c) {
    if (chars.is_string()) return chars.text.str.find(c) != std::string::npos;
    return is_space(c);
  };
  size_t b = 0, e = t.str.size();
  if (left) {
    while (b < e && in_set(t.str[b])) ++b;
  }
  if (right) {
    while (e > b && in_set(t.str[e - 1])) --e;
  }
  return t.slice(b, e - b);
}

Text case_map(const Text& t, int (*fn)(int)) {
  Text out = t;
  for (char& c : out.str) {
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(fn(static_cast<unsigned char>(c)));
  }
  return out;
}

Text capitalize_text(const Text& t) {
  Text out = case_map(t, [](int c) { return std::tolower(c); });
  if (!out.str.empty() && static_cast<unsigned char>(out.str[0]) < 0x80) {
    out.str[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out.str[0])));
  }
  return out;
}

// Python's str.title(): a letter after a non-letter starts a word.
static Text python_title(const Text& t) {
  Text out = t;
  bool prev_letter = false;
  for (char& c : out.str) {
    auto u = static_cast<unsigned char>(c);
    bool letter = std::isalpha(u) || u >= 0x80;
    if (u < 0x80 && letter) c = static_cast<char>(prev_letter ? std::tolower(u) : std::toupper(u));
    prev_letter = letter;
  }
  return out;
}

// jinja2's title filter: words begin after spaces, hyphens and opening brackets.
Text jinja_title(const Text& t) {
  Text out = t;
  bool word_start = true;
  for (char& c : out.str) {
    auto u = static_cast<unsigned char>(c);
    bool sep = is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      word_start = true;
    } else {
      if (u < 0x80) c = static_cast<char>(word_start ? std::toupper(u) : std::tolower(u));
      word_start = false;
    }
  }
  return out;
}

Text replace_text(const Text& t, const Text& old, const Text& with, int64_t count) {
  Text out;
  size_t pos = 0;
  int64_t done = 0;
  if (old.str.empty()) {
    // Python inserts `with` between characters (and at both ends).
    for (size_t k = 0; k <= t.str.size(); ++k) {
      if (count < 0 || done < count) {
        out.append(with);
        ++done;
      }
      if (k < t.str.size()) out.append(t.slice(k, 1));
    }
    return out;
  }
  while (count < 0 || done < count) {
    size_t hit = t.str.find(old.str, pos);
    if (hit == std::string::npos) break;
    out.append(t.slice(pos, hit - pos));
    out.append(with);
    pos = hit + old.str.size();
    ++done;
  }
  out.append(t.slice(pos, std::string::npos));
  return out;
}

List split_text(const Text& t, const Value& sep, int64_t maxsplit) {
  List parts;
  const std::string& s = t.str;
  if (!sep.is_string()) {
    size_t k = 0;
    while (true) {
      while (k < s.size() && is_space(s[k])) ++k;
      if (k >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t e = s.size();
        while (e > k && is_space(s[e - 1])) --e;
        parts.push_back(Value::string(t.slice(k, e - k)));
        break;
      }
      size_t e = k;
      while (e < s.size() && !is_space(s[e])) ++e;
      parts.push_back(Value::string(t.slice(k, e - k)));
      k = e;
    }
    return parts;
  }
  const std::string& d = sep.text.str;
  if (d.empty()) throw RenderError("empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    size_t hit = s.find(d, pos);
    if (hit == std::string::npos) break;
    parts.push_back(Value::string(t.slice(pos, hit - pos)));
    pos = hit + d.size();
  }
  parts.push_back(Value::string(t.slice(pos, std::string::npos)));
  return parts;
}

static bool starts_or_ends(const Text& t, const Value& affix, bool start) {
  auto one = [&](const Value& a) {
    const std::string& x = need_string(a, start ? "startswith" : "endswith").str;
    if (x.size() > t.str.size()) return false;
    return start ? t.str.compare(0, x.size(), x) == 0 : t.str.compare(t.str.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) return std::any_of(affix.list->begin(), affix.list->end(), one);
  return one(affix);
}

Value join_values(const List& items, const Text& sep) {
  Text out;
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) out.append(sep);
    out.append(to_text(items[k]));
  }
  return Value::string(std::move(out));
}

int64_t int_arg(const Value& v, int64_t fallback) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (v.kind == Value::Kind::kInt) return v.i;
  if (v.kind == Value::Kind::kBool) return v.b;
  throw RenderError(std::string("expected an integer argument, got '") + type_name(v) + "'");
}

// A bound method: the receiver captured, jinja2's sandbox allowing only reading methods.
static Value method(const Value& self, Value (*fn)(const Value&, CallArgs&)) {
  return Value::callable([self, fn](CallArgs& args) { return fn(self, args); });
}

// str.format with plain fields ({}, {0}, {name}); format specs and conversions are refused.
static Value format_method(const Value& self, CallArgs& args) {
  const Text& f = self.text;
  Text out;
  size_t auto_index = 0;
  for (size_t k = 0; k < f.str.size(); ++k) {
    char c = f.str[k];
    if ((c == '{' || c == '}') && k + 1 < f.str.size() && f.str[k + 1] == c) {
      out.append(f.slice(k, 1));
      ++k;
      continue;
    }
    if (c == '}') throw RenderError("Single '}' encountered in format string");
    if (c != '{') {
      out.append(f.slice(k, 1));
      continue;
    }
    size_t end = f.str.find('}', k);
    if (end == std::string::npos) throw RenderError("Single '{' encountered in format string");
    std::string field = f.str.substr(k + 1, end - k - 1);
    if (field.find_first_of(":!.[") != std::string::npos) throw RenderError("str.format field '" + field + "' is not supported");
    const Value* v = nullptr;
    bool is_index = std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; });
    if (is_index) {
      size_t index = auto_index;
      if (field.empty()) {
        ++auto_index;
      } else if (std::from_chars(field.data(), field.data() + field.size(), index).ec != std::errc()) {
        throw RenderError("Replacement index " + field + " out of range for positional args tuple");
      }
      if (index >= args.positional.size()) throw RenderError("Replacement index " + std::to_string(index) + " out of range for positional args tuple");
      v = &args.positional[index];
    } else {
      for (const auto& [kw, value] : args.keywords) {
        if (kw == field) v = &value;
      }
      if (!v) throw RenderError("'" + field + "'");
    }
    out.append(to_text(*v));
    k = end;
  }
  return Value::string(std::move(out));
}

static std::optional<Value> string_method(const Value& s, const std::string& name) {
  using M = Value (*)(const Value&, CallArgs&);
  static const std::unordered_map<std::string, M> kMethods = {
      {"startswith", [](const Value& v, CallArgs& a) { return bool_value(starts_or_ends(v.text, arg(a, 0, "prefix"), true)); }},
      {"endswith", [](const Value& v, CallArgs& a) { return bool_value(starts_or_ends(v.text, arg(a, 0, "suffix"), false)); }},
      {"split", [](const Value& v, CallArgs& a) {
         return Value::new_list(split_text(v.text, arg(a, 0, "sep"), int_arg(arg(a, 1, "maxsplit"), -1)));
       }},
      {"strip", [](const Value& v, CallArgs& a) { return Value::string(strip_text(v.text, arg(a, 0, "chars"), true, true)); }},
      {"lstrip", [](const Value& v, CallArgs& a) { return Value::string(strip_text(v.text, arg(a, 0, "chars"), true, false)); }},
      {"rstrip", [](const Value& v, CallArgs& a) { return Value::string(strip_text(v.text, arg(a, 0, "chars"), false, true)); }},
      {"upper", [](const Value& v, CallArgs&) { return Value::string(case_map(v.text, [](int c) { return std::toupper(c); })); }},
      {"lower", [](const Value& v, CallArgs&) { return Value::string(case_map(v.text, [](int c) { return std::tolower(c); })); }},
      {"title", [](const Value& v, CallArgs&) { return Value::string(python_title(v.text)); }},
      {"capitalize", [](const Value& v, CallArgs&) { return Value::string(capitalize_text(v.text)); }},
      {"replace", [](const Value& v, CallArgs& a) {
         return Value::string(replace_text(v.text, need_string(arg(a, 0, "old"), "replace"),
                                           need_string(arg(a, 1, "new"), "replace"), int_arg(arg(a, 2, "count"), -1)));
       }},
      {"find", [](const Value& v, CallArgs& a) {
         size_t hit = v.text.str.find(need_string(arg(a, 0, "sub"), "find").str);
         if (hit == std::string::npos) return Value::integer(-1);
         return Value::integer(length(Value::string(v.text.slice(0, hit))));
       }},
      {"count", [](const Value& v, CallArgs& a) {
         const std::string& sub = need_string(arg(a, 0, "sub"), "count").str;
         int64_t n = 0;
         if (sub.empty()) return Value::integer(length(v) + 1);
         for (size_t p = v.text.str.find(sub); p != std::string::npos; p = v.text.str.find(sub, p + sub.size())) ++n;
         return Value::integer(n);
       }},
      {"join", [](const Value& v, CallArgs& a) { return join_values(iterate(arg(a, 0, "iterable")), v.text); }},
      {"format", format_method},
      {"isdigit", [](const Value& v, CallArgs&) {
         const std::string& s = v.text.str;
         return bool_value(!s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }));
       }},
  };
  auto it = kMethods.find(name);
  if (it == kMethods.end()) return std::nullopt;
  return method(s, it->second);
}

List dict_items(const Value& d) {
  List items;
  for (const auto& [k, v] : *d.dict) items.push_back(Value::new_tuple({k, v}));
  return items;
}

static std::optional<Value> dict_method(const Value& d, const std::string& name) {
  if (name == "items") return method(d, [](const Value& v, CallArgs&) { return Value::new_list(dict_items(v)); });
  if (name == "keys") return method(d, [](const Value& v, CallArgs&) { return Value::new_list(iterate(v)); });
  if (name == "values") {
    return method(d, [](const Value& v, CallArgs&) {
      List values;
      for (const auto& kv : *v.dict) values.push_back(kv.second);
      return Value::new_list(std::move(values));
    });
  }
  if (name == "get") {
    return method(d, [](const Value& v, CallArgs& a) {
      const Value& key = arg(a, 0, "key");
      for (const auto& kv : *v.dict) {
        if (equals(kv.first, key)) return kv.second;
      }
      return arg(a, 1, "default", kNone);
    });
  }
  return std::nullopt;
}

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    if (auto m = string_method(obj, name)) return *m;
    return Value::undefined();
  }
  if (obj.is_mapping()) {
    if (auto m = dict_method(obj, name)) return *m;
    if (const Value* v = dict_find(*obj.dict, name)) return *v;
    return Value::undefined();
  }
  if (obj.kind == Value::Kind::kNamespace) {
    if (const Value* v = dict_find(*obj.dict, name)) return *v;
    return Value::undefined();
  }
  return Value::undefined();
}

}  // namespace deepinfer::recipe::jinja
