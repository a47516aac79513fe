// The filters, tests, methods and global functions of jinja2 (and transformers' additions)
// that chat templates use.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "recipe/jinja/value.h"

namespace deepinfer::recipe::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);

// Filters and tests by name; map() and select() reach each other through these.
Value apply_filter(std::string_view name, const Value& input, CallArgs& args);
bool apply_test(std::string_view name, const Value& input, CallArgs& args);

// `obj.name`: a bound method for strings and dicts, else the dict entry; undefined if none.
Value get_attribute(const Value& obj, const std::string& name);

// The clock strftime_now reads; tests pin it.
using Clock = std::function<std::chrono::system_clock::time_point()>;

// range, namespace, dict, raise_exception, strftime_now.
Value make_global(std::string_view name, const Clock& clock);

// An argument by keyword, else by position (SIZE_MAX: keyword only), else the fallback.
const Value& positional_or_keyword(CallArgs& args, size_t index, std::string_view keyword,
                                   const Value& fallback);

}  // namespace deepinfer::recipe::jinja
