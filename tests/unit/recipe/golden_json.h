// Reading tests/golden/recipe/prompts.json (written by tools/golden/make_recipe_golden.py)
// into recipe types, and a canonical JSON view of a Conversation for comparisons.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "recipe/conversation.h"

namespace deepinfer::recipe::golden {

using Json = nlohmann::ordered_json;

inline Json load_golden() {
  std::ifstream in(std::string(DEEPINFER_TEST_DATA) + "/golden/recipe/prompts.json");
  EXPECT_TRUE(in.good()) << "missing tests/golden/recipe/prompts.json";
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

inline std::optional<std::string> opt_string(const Json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return j[key].get<std::string>();
}

inline ToolDefinition tool_from_json(const Json& j) {
  ToolDefinition t;
  t.name = j.at("name").get<std::string>();
  t.description = opt_string(j, "description");
  t.parameters_json = j.contains("parameters") ? j["parameters"].dump() : "null";
  if (j.contains("strict")) t.strict = j["strict"].get<bool>();
  return t;
}

inline ImageSource image_from_json(const Json& j) {
  ImageSource s;
  std::string kind = j.at("kind").get<std::string>();
  if (kind == "url") {
    s.kind = ImageSource::Kind::kUrl;
    s.location = j.at("url").get<std::string>();
  } else if (kind == "data_url") {
    s.kind = ImageSource::Kind::kDataUrl;
    s.location = j.at("data_url").get<std::string>();
  } else {
    s.kind = ImageSource::Kind::kBytes;
    s.location = j.at("hex").get<std::string>();
  }
  s.detail = parse_image_detail(j.value("detail", "high")).value_or(ImageDetail::kHigh);
  return s;
}

inline Conversation conversation_from_json(const Json& j) {
  Conversation c;
  for (const Json& mj : j.at("messages")) {
    Message m;
    m.role = *parse_role(mj.at("role").get<std::string>());
    m.content = mj.at("content").get<std::string>();
    if (mj.contains("images")) {
      for (const Json& ij : mj["images"]) m.image_sources.push_back(image_from_json(ij));
    }
    m.reasoning = opt_string(mj, "reasoning");
    if (mj.contains("tool_calls")) {
      for (const Json& cj : mj["tool_calls"]) {
        m.tool_calls.push_back({cj.at("id").get<std::string>(), cj.at("name").get<std::string>(),
                                cj.at("arguments").get<std::string>()});
      }
    }
    m.tool_call_id = opt_string(mj, "tool_call_id");
    m.prefix = mj.value("prefix", false);
    if (mj.contains("tools")) {
      m.tools.emplace();
      for (const Json& tj : mj["tools"]) m.tools->push_back(tool_from_json(tj));
    }
    c.messages.push_back(std::move(m));
  }
  c.thinking_mode = j.value("thinking", true);
  if (j.contains("tools")) {
    for (const Json& tj : j["tools"]) c.tools.push_back(tool_from_json(tj));
  }
  c.tool_choice = *parse_tool_choice(j.value("tool_choice", "auto"));
  if (j.contains("effort"))
    c.reasoning_effort = parse_reasoning_effort(j["effort"].get<std::string>());
  if (j.value("response_format", "text") == "json_object")
    c.response_format = ResponseFormat::kJsonObject;
  return c;
}

// Every field, in a fixed order; tool schemas keep their key order (it reaches the prompt).
inline Json tool_view(const ToolDefinition& t) {
  Json j = Json::object();
  j["name"] = t.name;
  j["description"] = t.description ? Json(*t.description) : Json();
  j["parameters"] = Json::parse(t.parameters_json);
  j["strict"] = t.strict ? Json(*t.strict) : Json();
  return j;
}

inline Json conversation_view(const Conversation& c) {
  Json j = Json::object();
  Json msgs = Json::array();
  for (const Message& m : c.messages) {
    Json mj = Json::object();
    mj["role"] = role_name(m.role);
    mj["content"] = m.content;
    Json images = Json::array();
    for (const ImageSource& s : m.image_sources) {
      images.push_back({static_cast<int>(s.kind), s.location, static_cast<int>(s.detail)});
    }
    mj["images"] = images;
    mj["reasoning"] = m.reasoning ? Json(*m.reasoning) : Json();
    Json calls = Json::array();
    for (const ToolCall& tc : m.tool_calls) calls.push_back({tc.id, tc.name, tc.arguments});
    mj["tool_calls"] = calls;
    mj["tool_call_id"] = m.tool_call_id ? Json(*m.tool_call_id) : Json();
    mj["prefix"] = m.prefix;
    if (m.tools) {
      Json tools = Json::array();
      for (const ToolDefinition& t : *m.tools) tools.push_back(tool_view(t));
      mj["tools"] = tools;
    }
    msgs.push_back(mj);
  }
  j["messages"] = msgs;
  j["thinking"] = c.thinking_mode;
  Json tools = Json::array();
  for (const ToolDefinition& t : c.tools) tools.push_back(tool_view(t));
  j["tools"] = tools;
  j["tool_choice"] = static_cast<int>(c.tool_choice);
  j["effort"] = c.reasoning_effort ? Json(reasoning_effort_name(*c.reasoning_effort)) : Json();
  j["response_format"] = static_cast<int>(c.response_format);
  return j;
}

// The text around byte `at`, JSON-quoted so newlines show; a cut UTF-8 sequence is replaced.
inline std::string excerpt(const std::string& s, size_t at) {
  return Json(s.substr(at > 40 ? at - 40 : 0, 160))
      .dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace deepinfer::recipe::golden
