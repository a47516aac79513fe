// Python's string operations as templates use them, keeping each byte's trust (slices of the
// input stay untrusted, text the template supplies keeps its own origin), and the bound
// methods of strings and dicts (`s.strip()`, `d.items()`).
#pragma once

#include <cstdint>
#include <string>

#include "recipe/jinja/value.h"

namespace deepinfer::recipe::jinja {

bool is_space(char c);  // Python's ASCII whitespace
// The string in `v`, or a RenderError naming `what` (the undefined's own message if undefined).
const Text& need_string(const Value& v, const char* what);
int64_t int_arg(const Value& v, int64_t fallback);  // None and undefined give the fallback

// str.strip/lstrip/rstrip; `chars` undefined or None strips whitespace.
Text strip_text(const Text& t, const Value& chars, bool left, bool right);
Text case_map(const Text& t, int (*fn)(int));  // ASCII letters only
Text capitalize_text(const Text& t);
Text jinja_title(const Text& t);  // jinja2's title filter (not str.title)
Text replace_text(const Text& t, const Text& old, const Text& with, int64_t count);  // count < 0: all
List split_text(const Text& t, const Value& sep, int64_t maxsplit);  // str.split
Value join_values(const List& items, const Text& sep);
List dict_items(const Value& d);  // (key, value) tuples

}  // namespace deepinfer::recipe::jinja
