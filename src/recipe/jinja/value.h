// Values of the Jinja2 subset chat templates use, with Python's semantics for printing,
// comparing and JSON dumping, and with per-byte trust so that text from the input stays marked
// as untrusted through every string operation.
//
// Values are cheap to copy: lists, dicts and callables are shared (Python reference semantics,
// which namespace attribute sets rely on). Owned by one render call; not shared across threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer::recipe::jinja {

// Every render-time failure travels as this exception inside the interpreter; ChatTemplate
// converts it to a Status at its boundary.
struct RenderError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A string and, for each byte, whether the template's own text wrote it, kept as runs so that
// copying input text (one untrusted run) costs no more than copying the string. Slicing,
// splitting and replacing keep each byte's origin.
struct Text {
  struct Run {
    size_t end;  // one past the run's last byte; runs tile [0, str.size())
    bool trusted;
  };
  std::string str;
  std::vector<Run> runs;  // adjacent runs differ in trust

  Text() = default;
  Text(std::string s, bool trusted) : str(std::move(s)) {
    if (!str.empty()) runs.push_back({str.size(), trusted});
  }

  void append(std::string_view s, bool trusted) {
    if (s.empty()) return;
    str += s;
    if (!runs.empty() && runs.back().trusted == trusted) runs.back().end = str.size();
    else runs.push_back({str.size(), trusted});
  }
  void append(const Text& other) {
    size_t begin = 0;
    for (const Run& r : other.runs) {
      append(std::string_view(other.str).substr(begin, r.end - begin), r.trusted);
      begin = r.end;
    }
  }
  Text slice(size_t pos, size_t len) const {
    Text t;
    if (pos >= str.size()) return t;
    len = std::min(len, str.size() - pos);
    size_t begin = 0;
    for (const Run& r : runs) {
      size_t lo = std::max(begin, pos), hi = std::min(r.end, pos + len);
      if (lo < hi) t.append(std::string_view(str).substr(lo, hi - lo), r.trusted);
      begin = r.end;
      if (begin >= pos + len) break;
    }
    return t;
  }
  bool trusted_at(size_t pos) const {
    for (const Run& r : runs) {
      if (pos < r.end) return r.trusted;
    }
    return false;
  }
  bool all_trusted() const {
    for (const Run& r : runs) {
      if (!r.trusted) return false;
    }
    return true;
  }
};

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<Value, Value>>;  // insertion order, as Python dicts keep

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
};
using Callable = std::function<Value(CallArgs&)>;

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  Text text;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // kDict and kNamespace
  std::shared_ptr<Callable> fn;
  std::string hint;  // kUndefined: what was missing, for the error when it is used
  bool tuple = false;  // kList made as a Python tuple (literals, items()): prints with ( )
  // kList standing for a Python generator (what map, select, ... return): always true, no
  // len(), not JSON; `|list` makes it a list.
  bool generator = false;
  // kString marked safe (jinja2's Markup, from |safe or |e): `+` HTML-escapes a plain string
  // joined to it, as Markup.__add__ does.
  bool markup = false;

  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(Text t);
  static Value string(std::string s, bool trusted);
  static Value new_list(List items = {});
  static Value new_tuple(List items);
  static Value new_dict(Dict items = {});
  static Value new_namespace();
  static Value callable(Callable fn);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kBool || kind == Kind::kInt || kind == Kind::kFloat; }
  bool is_mapping() const { return kind == Kind::kDict; }
  bool is_list() const { return kind == Kind::kList; }
};

// Bounds on what one render may build, so that a hostile template (a repetition, a string
// doubled in a loop, a vast indent) fails with an error before it exhausts memory. Both are far
// above what a chat prompt needs (a 128K-token prompt is about 0.5 MiB); the string bound is the
// default output limit (RenderLimits), so nothing a template could print is refused.
constexpr uint64_t kMaxStringBytes = uint64_t{64} << 20;
constexpr uint64_t kMaxListItems = uint64_t{1} << 20;
// RenderError when a string of `n` bytes (a list of `n` items) would pass its bound.
void check_string_size(uint64_t n);
void check_list_size(uint64_t n);
// The size of `count` copies of something of `size` (bytes or items), saturated rather than
// overflowing, for the checks above; 0 for a count below 1, as Python's repetition gives.
uint64_t repeated_size(uint64_t size, int64_t count);

// Strings are indexed, sliced, counted and iterated by character: a byte other than a UTF-8
// continuation byte (or the string's first byte) with the continuation bytes after it.
inline bool is_continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Input data (always untrusted) as template values.
Value from_json(const nlohmann::ordered_json& j, bool trusted = false);

bool truthy(const Value& v);
const char* type_name(const Value& v);  // Python's: "str", "int", "dict", ...
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);  // <0, 0, >0; RenderError when Python would raise
double as_double(const Value& v);

// Python's str() and repr(), keeping the trust of the strings they contain.
Text to_text(const Value& v);
Text repr(const Value& v);
std::string format_float(double d);  // Python's repr(float)
Text html_escape(const Text& t);     // markupsafe's escape: & < > " '

struct JsonOptions {
  std::string indent;  // empty: one line
  bool indented = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // \uXXXX for every non-ASCII code point
};
// json.dumps as transformers' tojson calls it.
Text to_json(const Value& v, const JsonOptions& options);

// Lookups with jinja2's rules: `a.b` and `a[b]` on dicts and lists; missing entries are
// undefined, never errors (using the undefined later may be).
const Value* dict_find(const Dict& d, std::string_view key);
Value get_item(const Value& container, const Value& key);
// A list to iterate: lists, dict keys, string characters; undefined iterates as empty.
List iterate(const Value& v);
int64_t length(const Value& v);

}  // namespace deepinfer::recipe::jinja
