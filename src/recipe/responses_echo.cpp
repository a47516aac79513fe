// The request settings a Responses response reports (ResponsesEcho). deepseek-recipe 0.2.0
// re-serializes its typed request, so the echo is the request's values in that type's shape:
// unknown keys dropped, absent optional fields written as null, unknown tool types left out.
#include <nlohmann/json.hpp>

#include "recipe/protocol_common.h"
#include "recipe/responses_response.h"

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;

Json string_or_null(const Json& obj, const char* key) {
  if (obj.is_object() && obj.contains(key) && obj[key].is_string()) return obj[key];
  return nullptr;
}

Json function_tool(const Json& t) {
  Json j = Json::object();
  j["type"] = "function";
  j["name"] = string_or_null(t, "name");
  j["description"] = string_or_null(t, "description");
  j["parameters"] = t.contains("parameters") ? t["parameters"] : Json();
  j["strict"] = t.contains("strict") && t["strict"].is_boolean() ? t["strict"] : Json();
  return j;
}

Json web_search_tool(const Json& t, const std::string& type) {
  Json j = Json::object();
  j["type"] = type;
  j["search_context_size"] = string_or_null(t, "search_context_size");
  Json location = nullptr;
  if (t.contains("user_location") && t["user_location"].is_object()) {
    const Json& l = t["user_location"];
    location = Json::object();
    for (const char* key : {"city", "country", "region", "timezone"}) {
      location[key] = string_or_null(l, key);
    }
  }
  j["user_location"] = location;
  return j;
}

Json echo_tools(const Json& req) {
  Json tools = Json::array();
  if (!req.contains("tools") || !req["tools"].is_array()) return tools;
  for (const Json& t : req["tools"]) {
    const std::string type = t.is_object() ? t.value("type", "") : "";
    if (type == "function") {
      tools.push_back(function_tool(t));
    } else if (type == "namespace") {
      Json j = Json::object();
      j["type"] = "namespace";
      j["name"] = string_or_null(t, "name");
      j["description"] = string_or_null(t, "description");
      j["tools"] = Json::array();
      if (t.contains("tools") && t["tools"].is_array()) {
        for (const Json& f : t["tools"]) j["tools"].push_back(function_tool(f));
      }
      tools.push_back(j);
    } else if (type == "custom") {
      tools.push_back({{"type", "custom"}, {"name", string_or_null(t, "name")}});
    } else if (type.rfind("web_search", 0) == 0) {
      tools.push_back(web_search_tool(t, type));
    }
  }
  return tools;
}

Json echo_tool_choice(const Json& req) {
  if (!req.contains("tool_choice") || req["tool_choice"].is_null()) return "auto";
  const Json& c = req["tool_choice"];
  if (!c.is_object()) return c;
  const std::string type = c.value("type", "");
  if (type == "function" || type == "custom") {
    return {{"type", type}, {"name", string_or_null(c, "name")}};
  }
  return {{"type", type}};
}

Json number_or(const Json& req, const char* key, double fallback) {
  if (req.contains(key) && req[key].is_number()) return req[key].get<double>();
  return fallback;
}

}  // namespace

Result<ResponsesEcho> responses_echo(std::string_view body, ModelVersion version) {
  Json req = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded()) return invalid_argument("invalid JSON request");
  if (!req.is_object()) return malformed("expected an object");
  try {
    Json s = Json::object();
    s["instructions"] = string_or_null(req, "instructions");
    s["max_output_tokens"] =
        req.contains("max_output_tokens") && req["max_output_tokens"].is_number_integer()
            ? req["max_output_tokens"]
            : Json();
    const Json& reasoning = req.contains("reasoning") ? req["reasoning"] : Json();
    s["reasoning"] = {{"effort", string_or_null(reasoning, "effort")},
                      {"summary", string_or_null(reasoning, "summary")}};
    s["temperature"] = number_or(req, "temperature", 1.0);
    const Json& text = req.contains("text") ? req["text"] : Json();
    Json format = {{"type", "text"}};
    if (text.is_object() && text.contains("format") && text["format"].is_object()) {
      format = {{"type", text["format"].value("type", "text")}};
    }
    s["text"] = {{"format", format}, {"verbosity", string_or_null(text, "verbosity")}};
    s["tool_choice"] = echo_tool_choice(req);
    s["tools"] = echo_tools(req);
    s["top_logprobs"] = req.contains("top_logprobs") && req["top_logprobs"].is_number_integer()
                            ? req["top_logprobs"]
                            : Json(0);
    s["top_p"] = number_or(req, "top_p", 1.0);
    s["user"] = string_or_null(req, "user");

    ResponsesEcho echo;
    echo.settings_json = s.dump();
    const char* separator = version == ModelVersion::kDeepseekV4Pro ? "__" : "::";
    for (const Json& t : s["tools"]) {
      if (t["type"] == "custom" && t["name"].is_string()) {
        echo.custom_tools.insert(t["name"].get<std::string>());
      } else if (t["type"] == "namespace" && t["name"].is_string()) {
        const std::string ns = t["name"].get<std::string>();
        for (const Json& f : t["tools"]) {
          if (!f["name"].is_string()) continue;
          const std::string local = f["name"].get<std::string>();
          echo.namespace_tools.push_back({ns + separator + local, {ns, local}});
        }
      }
    }
    return echo;
  } catch (const nlohmann::json::exception&) {
    // convert_responses checked these fields' types first; never the library's words here.
    return malformed("a field has a value of the wrong type");
  }
}

}  // namespace deepinfer::recipe
