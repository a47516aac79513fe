// Typed reads from tokenizer.json / tokenizer_config.json values that never throw: each error
// names the file (`where`) and the JSON path of the field (`field`). Internal to the tokenizer.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "deepinfer/status.h"

namespace deepinfer::hf_json {

// The member `key` of an object, or null when j is not an object or lacks it (or holds null).
inline const nlohmann::json* member(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

inline Result<std::string> get_string(const nlohmann::json& j, const char* key, const std::string& where,
                                      const std::string& field) {
  const nlohmann::json* v = member(j, key);
  if (v == nullptr) return invalid_argument(where + ": " + field + "." + key + " is missing");
  if (!v->is_string()) return invalid_argument(where + ": " + field + "." + key + " must be a string");
  return v->get<std::string>();
}

inline Result<bool> get_bool_or(const nlohmann::json& j, const char* key, bool fallback, const std::string& where,
                                const std::string& field) {
  const nlohmann::json* v = member(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return invalid_argument(where + ": " + field + "." + key + " must be true or false");
  return v->get<bool>();
}

inline Result<int64_t> get_int_or(const nlohmann::json& j, const char* key, int64_t fallback, const std::string& where,
                                  const std::string& field) {
  const nlohmann::json* v = member(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer()) return invalid_argument(where + ": " + field + "." + key + " must be an integer");
  return v->get<int64_t>();
}

// The "type" member of a component object.
inline Result<std::string> get_type(const nlohmann::json& j, const std::string& where, const std::string& field) {
  if (!j.is_object()) return invalid_argument(where + ": " + field + " must be an object");
  return get_string(j, "type", where, field);
}

}  // namespace deepinfer::hf_json
