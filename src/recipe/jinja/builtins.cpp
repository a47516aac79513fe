#include "recipe/jinja/builtins.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <unordered_map>

#include "recipe/jinja/methods.h"

namespace deepinfer::recipe::jinja {

namespace {

using FilterFn = Value (*)(const Value&, CallArgs&);
using TestFn = bool (*)(const Value&, CallArgs&);

const Value kNoValue = Value::undefined();

const Value& arg(CallArgs& args, size_t index, std::string_view keyword, const Value& fallback = kNoValue) {
  return positional_or_keyword(args, index, keyword, fallback);
}

// `n` spaces (none for n < 1, as Python's ' ' * n), within the bound on a string's size.
std::string spaces(int64_t n) {
  check_string_size(repeated_size(1, n));
  return std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
}

// Python's int(float): toward zero. Beyond int64 Python's integers go on; here the render fails.
int64_t truncate_float(double d) {
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) {  // [-2^63, 2^63), exactly
    throw RenderError("integer overflow in int(): " + format_float(d));
  }
  return static_cast<int64_t>(d);
}

Value int_default(CallArgs& args) {
  const Value& d = arg(args, 0, "default");
  return d.is_undefined() ? Value::integer(0) : d;
}

// jinja2's attribute getter for filters: "a.b" walks, integers index.
Value attribute_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    // An index past int64 is past every list: the lookup by its spelling finds nothing either.
    int64_t index = 0;
    const bool fits = digits && std::from_chars(part.data(), part.data() + part.size(), index).ec == std::errc();
    Value key = fits ? Value::integer(index) : Value::string(part, true);
    Value next = get_item(cur, key);
    if (next.is_undefined() && !digits) next = get_attribute(cur, part);
    cur = next;
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

CallArgs rest_args(CallArgs& args, size_t from) {
  CallArgs rest;
  for (size_t k = from; k < args.positional.size(); ++k) rest.positional.push_back(args.positional[k]);
  return rest;
}

Value generator(List items) {
  Value v = Value::new_list(std::move(items));
  v.generator = true;
  return v;
}

Value select_filter(const Value& input, CallArgs& args, bool by_attribute, bool keep) {
  List out;
  if (!truthy(input)) return generator({});  // jinja2 yields nothing for a false sequence
  size_t test_index = by_attribute ? 1 : 0;
  std::string attr = by_attribute ? need_string(arg(args, 0, "attribute"), "selectattr").str : "";
  const Value& test = arg(args, test_index, "test");
  CallArgs test_args = rest_args(args, test_index + 1);
  for (const Value& item : iterate(input)) {
    Value probe = by_attribute ? attribute_path(item, attr) : item;
    bool pass = test.is_string() ? apply_test(test.text.str, probe, test_args) : truthy(probe);
    if (pass == keep) out.push_back(item);
  }
  return generator(std::move(out));
}

Value map_filter(const Value& input, CallArgs& args) {
  List out;
  if (!truthy(input)) return generator({});
  const Value& attribute = arg(args, SIZE_MAX, "attribute");
  if (attribute.is_string()) {
    const Value& fallback = arg(args, SIZE_MAX, "default");
    for (const Value& item : iterate(input)) {
      Value v = attribute_path(item, attribute.text.str);
      out.push_back(v.is_undefined() && !fallback.is_undefined() ? fallback : v);
    }
    return generator(std::move(out));
  }
  const Value& filter = arg(args, 0, "filter");
  std::string name = need_string(filter, "map").str;
  if (!has_filter(name)) throw RenderError("no filter named '" + name + "'");
  for (const Value& item : iterate(input)) {
    CallArgs rest = rest_args(args, 1);
    out.push_back(apply_filter(name, item, rest));
  }
  return generator(std::move(out));
}

Value tojson_filter(const Value& input, CallArgs& args) {
  // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  const Value& indent = arg(args, 1, "indent");
  const Value& separators = arg(args, 2, "separators");
  JsonOptions o;
  if (indent.kind == Value::Kind::kInt) {
    o.indented = true;
    o.indent = spaces(indent.i);
  } else if (indent.is_string()) {
    o.indented = true;
    o.indent = indent.text.str;
  }
  if (o.indented) o.item_separator = ",";
  if (separators.is_list() && separators.list->size() == 2) {
    o.item_separator = need_string((*separators.list)[0], "tojson").str;
    o.key_separator = need_string((*separators.list)[1], "tojson").str;
  }
  o.sort_keys = truthy(arg(args, 3, "sort_keys"));
  o.ensure_ascii = truthy(arg(args, 0, "ensure_ascii"));
  return Value::string(to_json(input, o));
}

Value indent_filter(const Value& input, CallArgs& args) {
  const Value& width = arg(args, 0, "width");
  Text indention = width.is_string() ? width.text : Text(spaces(int_arg(width, 4)), true);
  bool first = truthy(arg(args, 1, "first"));
  bool blank = truthy(arg(args, 2, "blank"));
  const Text& s = need_string(input, "indent");
  Text padded = s;  // jinja2 appends "\n" and then takes splitlines()
  padded.append("\n", true);
  List lines = split_text(padded, Value::string("\n", true), -1);
  lines.pop_back();
  Text out;
  for (size_t k = 0; k < lines.size(); ++k) {
    const Text& line = lines[k].text;
    if (k > 0) {
      out.append("\n", true);
      if (blank || !line.str.empty()) out.append(indention);
    }
    out.append(line);
  }
  if (first) {
    Text prefixed = indention;
    prefixed.append(out);
    out = std::move(prefixed);
  }
  return Value::string(std::move(out));
}

Value first_or_last(const Value& input, bool first) {
  List items = iterate(input);
  if (items.empty()) return Value::undefined(first ? "No first item, sequence was empty." : "No last item, sequence was empty.");
  return first ? items.front() : items.back();
}

Value sort_filter(const Value& input, CallArgs& args) {
  List items = iterate(input);
  bool reverse = truthy(arg(args, 0, "reverse"));
  bool case_sensitive = truthy(arg(args, 1, "case_sensitive"));
  const Value& attribute = arg(args, 2, "attribute");
  auto key = [&](const Value& v) {
    Value k = attribute.is_string() ? attribute_path(v, attribute.text.str) : v;
    if (!case_sensitive && k.is_string()) k = Value::string(case_map(k.text, [](int c) { return std::tolower(c); }));
    return k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    int c = compare(key(a), key(b));
    return reverse ? c > 0 : c < 0;
  });
  return Value::new_list(std::move(items));
}

Value dictsort_filter(const Value& input, CallArgs& args) {
  if (!input.is_mapping()) throw RenderError("dictsort expects a mapping");
  bool case_sensitive = truthy(arg(args, 0, "case_sensitive"));
  const Value& by = arg(args, 1, "by");
  bool by_value = by.is_string() && by.text.str == "value";
  if (by.is_string() && !by_value && by.text.str != "key") throw RenderError("You can only sort by either \"key\" or \"value\"");
  bool reverse = truthy(arg(args, 2, "reverse"));
  List items = dict_items(input);
  auto key = [&](const Value& pair) {
    Value k = (*pair.list)[by_value ? 1 : 0];
    if (!case_sensitive && k.is_string()) k = Value::string(case_map(k.text, [](int c) { return std::tolower(c); }));
    return k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    int c = compare(key(a), key(b));
    return reverse ? c > 0 : c < 0;
  });
  return Value::new_list(std::move(items));
}

Value extreme(const Value& input, bool largest) {
  List items = iterate(input);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  Value best = items[0];
  for (const Value& item : items) {
    int c = compare(item, best);
    if (largest ? c > 0 : c < 0) best = item;
  }
  return best;
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> kFilters = {
      {"trim", [](const Value& v, CallArgs& a) { return Value::string(strip_text(to_text(v), arg(a, 0, "chars"), true, true)); }},
      {"tojson", tojson_filter},
      {"length", [](const Value& v, CallArgs&) { return Value::integer(length(v)); }},
      {"count", [](const Value& v, CallArgs&) { return Value::integer(length(v)); }},
      {"upper", [](const Value& v, CallArgs&) { return Value::string(case_map(to_text(v), [](int c) { return std::toupper(c); })); }},
      {"lower", [](const Value& v, CallArgs&) { return Value::string(case_map(to_text(v), [](int c) { return std::tolower(c); })); }},
      {"title", [](const Value& v, CallArgs&) { return Value::string(jinja_title(to_text(v))); }},
      {"capitalize", [](const Value& v, CallArgs&) { return Value::string(capitalize_text(to_text(v))); }},
      {"replace", [](const Value& v, CallArgs& a) {
         return Value::string(replace_text(to_text(v), to_text(arg(a, 0, "old")), to_text(arg(a, 1, "new")),
                                           int_arg(arg(a, 2, "count"), -1)));
       }},
      {"join", [](const Value& v, CallArgs& a) {
         const Value& attribute = arg(a, 1, "attribute");
         List items = iterate(v);
         if (attribute.is_string()) {
           for (Value& item : items) item = attribute_path(item, attribute.text.str);
         }
         const Value& sep = arg(a, 0, "d");
         return join_values(items, sep.is_undefined() ? Text() : to_text(sep));
       }},
      {"first", [](const Value& v, CallArgs&) { return first_or_last(v, true); }},
      {"last", [](const Value& v, CallArgs&) { return first_or_last(v, false); }},
      {"default", [](const Value& v, CallArgs& a) {
         bool use_default = v.is_undefined() || (truthy(arg(a, 1, "boolean")) && !truthy(v));
         if (!use_default) return v;
         const Value& d = arg(a, 0, "default_value");
         return d.is_undefined() ? Value::string("", true) : d;
       }},
      {"string", [](const Value& v, CallArgs&) { return Value::string(to_text(v)); }},
      {"int", [](const Value& v, CallArgs& a) {
         if (v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool) return Value::integer(v.kind == Value::Kind::kInt ? v.i : v.b);
         if (v.kind == Value::Kind::kFloat) return std::isnan(v.f) ? int_default(a) : Value::integer(truncate_float(v.f));
         if (v.is_string()) {
           std::string s = strip_text(v.text, kNoValue, true, true).str;
           char* end = nullptr;
           long long n = std::strtoll(s.c_str(), &end, 10);
           if (!s.empty() && *end == '\0') return Value::integer(n);
           double d = std::strtod(s.c_str(), &end);
           if (!s.empty() && *end == '\0' && !std::isnan(d)) return Value::integer(truncate_float(d));
         }
         return int_default(a);
       }},
      {"float", [](const Value& v, CallArgs& a) {
         if (v.is_number()) return Value::number(as_double(v));
         if (v.is_string()) {
           std::string s = strip_text(v.text, kNoValue, true, true).str;
           char* end = nullptr;
           double d = std::strtod(s.c_str(), &end);
           if (!s.empty() && *end == '\0') return Value::number(d);
         }
         const Value& d = arg(a, 0, "default");
         return d.is_undefined() ? Value::number(0.0) : d;
       }},
      {"abs", [](const Value& v, CallArgs&) {
         if (v.kind == Value::Kind::kFloat) return Value::number(std::fabs(v.f));
         if (v.is_number()) return Value::integer(std::llabs(v.kind == Value::Kind::kInt ? v.i : v.b));
         throw RenderError(std::string("bad operand type for abs(): '") + type_name(v) + "'");
       }},
      {"list", [](const Value& v, CallArgs&) { return Value::new_list(iterate(v)); }},
      {"items", [](const Value& v, CallArgs&) {
         if (v.is_undefined()) return Value::new_list();
         if (!v.is_mapping()) throw RenderError("Can only get item pairs from a mapping.");
         return generator(dict_items(v));
       }},
      {"selectattr", [](const Value& v, CallArgs& a) { return select_filter(v, a, true, true); }},
      {"rejectattr", [](const Value& v, CallArgs& a) { return select_filter(v, a, true, false); }},
      {"select", [](const Value& v, CallArgs& a) { return select_filter(v, a, false, true); }},
      {"reject", [](const Value& v, CallArgs& a) { return select_filter(v, a, false, false); }},
      {"map", map_filter},
      {"safe", [](const Value& v, CallArgs&) {
         Value out = v.is_string() ? v : Value::string(to_text(v));
         out.markup = true;
         return out;
       }},
      {"indent", indent_filter},
      {"reverse", [](const Value& v, CallArgs&) {
         if (v.is_string()) {
           List chars = iterate(v);
           std::reverse(chars.begin(), chars.end());
           return join_values(chars, Text());
         }
         List items = iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::new_list(std::move(items));
       }},
      {"sort", sort_filter},
      {"dictsort", dictsort_filter},
      {"max", [](const Value& v, CallArgs&) { return extreme(v, true); }},
      {"min", [](const Value& v, CallArgs&) { return extreme(v, false); }},
      {"unique", [](const Value& v, CallArgs&) {
         List out;
         for (const Value& item : iterate(v)) {
           if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return equals(o, item); })) out.push_back(item);
         }
         return generator(std::move(out));
       }},
      {"e", [](const Value& v, CallArgs&) {
         if (v.markup) return v;
         Value out = Value::string(html_escape(to_text(v)));
         out.markup = true;
         return out;
       }},
  };
  return kFilters;
}

bool compare_test(const Value& v, CallArgs& a, bool (*pred)(int)) { return pred(compare(v, arg(a, 0, "other"))); }

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> kTests = {
      {"defined", [](const Value& v, CallArgs&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, CallArgs&) { return v.is_undefined(); }},
      {"none", [](const Value& v, CallArgs&) { return v.is_none(); }},
      {"string", [](const Value& v, CallArgs&) { return v.is_string(); }},
      {"mapping", [](const Value& v, CallArgs&) { return v.is_mapping(); }},
      {"iterable", [](const Value& v, CallArgs&) { return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping(); }},
      {"sequence", [](const Value& v, CallArgs&) { return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping(); }},
      {"number", [](const Value& v, CallArgs&) { return v.is_number(); }},
      {"integer", [](const Value& v, CallArgs&) { return v.kind == Value::Kind::kInt; }},
      {"float", [](const Value& v, CallArgs&) { return v.kind == Value::Kind::kFloat; }},
      {"boolean", [](const Value& v, CallArgs&) { return v.kind == Value::Kind::kBool; }},
      {"true", [](const Value& v, CallArgs&) { return v.kind == Value::Kind::kBool && v.b; }},
      {"false", [](const Value& v, CallArgs&) { return v.kind == Value::Kind::kBool && !v.b; }},
      {"callable", [](const Value& v, CallArgs&) { return v.kind == Value::Kind::kCallable; }},
      {"equalto", [](const Value& v, CallArgs& a) { return equals(v, arg(a, 0, "other")); }},
      {"eq", [](const Value& v, CallArgs& a) { return equals(v, arg(a, 0, "other")); }},
      {"==", [](const Value& v, CallArgs& a) { return equals(v, arg(a, 0, "other")); }},
      {"ne", [](const Value& v, CallArgs& a) { return !equals(v, arg(a, 0, "other")); }},
      {"!=", [](const Value& v, CallArgs& a) { return !equals(v, arg(a, 0, "other")); }},
      {"lt", [](const Value& v, CallArgs& a) { return compare_test(v, a, [](int c) { return c < 0; }); }},
      {"<", [](const Value& v, CallArgs& a) { return compare_test(v, a, [](int c) { return c < 0; }); }},
      {"le", [](const Value& v, CallArgs& a) { return compare_test(v, a, [](int c) { return c <= 0; }); }},
      {"<=", [](const Value& v, CallArgs& a) { return compare_test(v, a, [](int c) { return c <= 0; }); }},
      {"gt", [](const Value& v, CallArgs& a) { return compare_test(v, a, [](int c) { return c > 0; }); }},
      {">", [](const Value& v, CallArgs& a) { return compare_test(v, a, [](int c) { return c > 0; }); }},
      {"ge", [](const Value& v, CallArgs& a) { return compare_test(v, a, [](int c) { return c >= 0; }); }},
      {">=", [](const Value& v, CallArgs& a) { return compare_test(v, a, [](int c) { return c >= 0; }); }},
      {"in", [](const Value& v, CallArgs& a) {
         const Value& seq = arg(a, 0, "seq");
         if (seq.is_string()) return v.is_string() && seq.text.str.find(v.text.str) != std::string::npos;
         if (seq.is_mapping()) return dict_find(*seq.dict, v.is_string() ? v.text.str : "") != nullptr;
         for (const Value& item : iterate(seq)) {
           if (equals(item, v)) return true;
         }
         return false;
       }},
      {"odd", [](const Value& v, CallArgs&) { return int_arg(v, 0) % 2 != 0; }},
      {"even", [](const Value& v, CallArgs&) { return int_arg(v, 0) % 2 == 0; }},
      {"divisibleby", [](const Value& v, CallArgs& a) {
         int64_t d = int_arg(arg(a, 0, "num"), 1);
         if (d == 0) throw RenderError("integer division or modulo by zero");
         return int_arg(v, 0) % d == 0;
       }},
      {"lower", [](const Value& v, CallArgs&) {
         return v.is_string() && std::none_of(v.text.str.begin(), v.text.str.end(), [](char c) { return std::isupper(static_cast<unsigned char>(c)); });
       }},
      {"upper", [](const Value& v, CallArgs&) {
         return v.is_string() && std::none_of(v.text.str.begin(), v.text.str.end(), [](char c) { return std::islower(static_cast<unsigned char>(c)); });
       }},
      {"sameas", [](const Value& v, CallArgs& a) {
         const Value& o = arg(a, 0, "other");
         if (v.kind != o.kind) return false;
         if (v.is_list()) return v.list == o.list;
         if (v.is_mapping() || v.kind == Value::Kind::kNamespace) return v.dict == o.dict;
         return equals(v, o);
       }},
  };
  return kTests;
}

Value range_fn(CallArgs& args) {
  int64_t start = 0, stop = 0, step = 1;
  if (args.positional.size() == 1) {
    stop = int_arg(args.positional[0], 0);
  } else if (args.positional.size() >= 2) {
    start = int_arg(args.positional[0], 0);
    stop = int_arg(args.positional[1], 0);
    if (args.positional.size() > 2) step = int_arg(args.positional[2], 1);
  } else {
    throw RenderError("range expected at least 1 argument, got 0");
  }
  if (step == 0) throw RenderError("range() arg 3 must not be zero");
  // jinja2's sandbox refuses ranges above MAX_RANGE (100000) items. In 128 bits: the span of
  // two int64 bounds, or a vast step, overflows int64.
  const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 stride = step > 0 ? static_cast<__int128>(step) : -static_cast<__int128>(step);
  const __int128 n128 = span > 0 ? (span + stride - 1) / stride : 0;
  const auto n = static_cast<int64_t>(std::min<__int128>(n128, 100001));
  if (n > 100000) throw RenderError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  List items;
  items.reserve(n);
  for (int64_t k = 0; k < n; ++k) items.push_back(Value::integer(start + k * step));
  return Value::new_list(std::move(items));
}

Value dict_fn(CallArgs& args, Value result) {
  for (const Value& p : args.positional) {
    if (!p.is_mapping()) throw RenderError("dict() positional argument must be a mapping");
    for (const auto& kv : *p.dict) result.dict->push_back(kv);
  }
  for (auto& [k, v] : args.keywords) {
    if (result.kind == Value::Kind::kNamespace && !k.empty() && k[0] == '_') {
      throw RenderError("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + k + "'.");
    }
    result.dict->emplace_back(Value::string(k, true), v);
  }
  return result;
}

std::string strftime_string(const std::string& format, std::chrono::system_clock::time_point now) {
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::string out(format.size() * 4 + 64, '\0');
  size_t n = std::strftime(out.data(), out.size(), format.c_str(), &tm);
  out.resize(n);
  return out;
}

}  // namespace

const Value& positional_or_keyword(CallArgs& args, size_t index, std::string_view keyword, const Value& fallback) {
  for (const auto& [k, v] : args.keywords) {
    if (k == keyword) return v;
  }
  if (index < args.positional.size()) return args.positional[index];
  return fallback;
}

bool has_filter(std::string_view name) { return filters().count(name) || name == "d" || name == "escape"; }
bool has_test(std::string_view name) { return tests().count(name) > 0; }

Value apply_filter(std::string_view name, const Value& input, CallArgs& args) {
  if (name == "d") name = "default";
  if (name == "escape") name = "e";
  auto it = filters().find(name);
  if (it == filters().end()) throw RenderError("no filter named '" + std::string(name) + "'");
  return it->second(input, args);
}

bool apply_test(std::string_view name, const Value& input, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw RenderError("no test named '" + std::string(name) + "'");
  return it->second(input, args);
}

Value make_global(std::string_view name, const Clock& clock) {
  if (name == "range") return Value::callable(range_fn);
  if (name == "namespace") return Value::callable([](CallArgs& a) { return dict_fn(a, Value::new_namespace()); });
  if (name == "dict") return Value::callable([](CallArgs& a) { return dict_fn(a, Value::new_dict()); });
  if (name == "raise_exception") {
    return Value::callable([](CallArgs& a) -> Value { throw RenderError(to_text(arg(a, 0, "message")).str); });
  }
  if (name == "strftime_now") {
    return Value::callable([clock](CallArgs& a) {
      const Text& format = need_string(arg(a, 0, "format"), "strftime_now");
      // The date is the template's, the text around it the format's: a format from the input
      // (its characters pass through) makes the result untrusted.
      return Value::string(strftime_string(format.str, clock ? clock() : std::chrono::system_clock::now()),
                           format.all_trusted());
    });
  }
  return Value::undefined();
}

}  // namespace deepinfer::recipe::jinja
