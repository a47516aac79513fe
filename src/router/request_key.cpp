#include "router/request_key.h"

#include <nlohmann/json.hpp>

namespace deepinfer::router {

namespace {

using json = nlohmann::json;

constexpr char kField = '\x1f';
constexpr char kRecord = '\x1e';

// A content value's text: a string as is, an array's text parts in order, anything else as
// its JSON (images, tool results: still a stable key for equal content).
void append_content(std::string& out, const json& content) {
  if (content.is_string()) {
    out += content.get_ref<const std::string&>();
    return;
  }
  if (content.is_array()) {
    for (const json& part : content) {
      if (part.is_object() && part.contains("text") && part["text"].is_string()) {
        out += part["text"].get_ref<const std::string&>();
      } else {
        out += part.dump();
      }
      out += kField;
    }
    return;
  }
  if (!content.is_null()) out += content.dump();
}

void append_messages(std::string& out, const json& messages) {
  if (!messages.is_array()) return;
  for (const json& m : messages) {
    if (!m.is_object()) continue;
    if (auto role = m.find("role"); role != m.end() && role->is_string()) out += role->get_ref<const std::string&>();
    out += kField;
    if (auto content = m.find("content"); content != m.end()) append_content(out, *content);
    if (auto calls = m.find("tool_calls"); calls != m.end()) out += calls->dump();
    out += kRecord;
  }
}

}  // namespace

RequestKey request_key(std::string_view path, std::string_view body) {
  RequestKey key;
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return key;
  if (auto s = doc.find("stream"); s != doc.end() && s->is_boolean()) key.stream = s->get<bool>();
  std::string& out = key.text;
  if (auto model = doc.find("model"); model != doc.end() && model->is_string()) out += model->get_ref<const std::string&>();
  out += kRecord;
  // NOTE: a per-request cache salt changes the replica's block keys, so it must change ours.
  if (auto salt = doc.find("cache_salt"); salt != doc.end() && salt->is_string()) {
    out += salt->get_ref<const std::string&>();
    out += kRecord;
  }
  if (auto tools = doc.find("tools"); tools != doc.end()) {
    out += tools->dump();
    out += kRecord;
  }
  if (path == "/v1/completions") {
    if (auto prompt = doc.find("prompt"); prompt != doc.end()) append_content(out, *prompt);
  } else if (path == "/v1/messages") {
    if (auto system = doc.find("system"); system != doc.end()) append_content(out, *system);
    out += kRecord;
    append_messages(out, doc.value("messages", json()));
  } else if (path == "/v1/responses") {
    if (auto instructions = doc.find("instructions"); instructions != doc.end()) append_content(out, *instructions);
    out += kRecord;
    const json input = doc.value("input", json());
    if (input.is_string()) out += input.get_ref<const std::string&>();
    else append_messages(out, input);
  } else {
    append_messages(out, doc.value("messages", json()));
  }
  return key;
}

}  // namespace deepinfer::router
