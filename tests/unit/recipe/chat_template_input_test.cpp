// template_input: a Conversation as the Hugging Face messages and tools a template reads.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "recipe/chat_template.h"

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;

Conversation tool_conversation() {
  Conversation c;
  c.messages.push_back(Message::system("Be brief."));
  c.messages.push_back(Message::user("Weather in Paris?"));
  c.messages.push_back(Message::assistant("", std::string("need the tool"),
                                          {ToolCall{"call_1", "get_weather", R"({"city":"Paris","days":2})"},
                                           ToolCall{"call_2", "raw", "not json"}}));
  c.messages.push_back(Message::tool("21 C", "call_1"));
  c.messages.push_back(Message::tool("?", "call_2"));
  c.messages.push_back(Message::latest_reminder("Answer in French."));
  ToolDefinition weather;
  weather.name = "get_weather";
  weather.description = "Current weather";
  weather.parameters_json = R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})";
  c.tools.push_back(weather);
  ToolDefinition bare;
  bare.name = "raw";
  c.tools.push_back(bare);
  c.thinking_mode = false;
  return c;
}

TEST(ChatTemplateInput, MessagesInHuggingFaceForm) {
  ChatTemplateInput input = template_input(tool_conversation(), /*add_generation_prompt=*/true);
  EXPECT_TRUE(input.add_generation_prompt);
  const Json want = Json::parse(R"([
    {"role":"system","content":"Be brief."},
    {"role":"user","content":"Weather in Paris?"},
    {"role":"assistant","content":"","reasoning_content":"need the tool","tool_calls":[
      {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris","days":2}}},
      {"id":"call_2","type":"function","function":{"name":"raw","arguments":"not json"}}]},
    {"role":"tool","content":"21 C","tool_call_id":"call_1","name":"get_weather"},
    {"role":"tool","content":"?","tool_call_id":"call_2","name":"raw"},
    {"role":"user","content":"Answer in French."}
  ])");
  EXPECT_EQ(input.messages.dump(), want.dump());
}

TEST(ChatTemplateInput, ToolsKeepTheClientsKeyOrder) {
  ChatTemplateInput input = template_input(tool_conversation(), /*add_generation_prompt=*/false);
  EXPECT_FALSE(input.add_generation_prompt);
  EXPECT_EQ(input.tools.dump(),
            R"([{"type":"function","function":{"name":"get_weather","description":"Current weather","parameters":)"
            R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},)"
            R"({"type":"function","function":{"name":"raw","parameters":null}}])");
  EXPECT_EQ(input.extra["enable_thinking"], false);
}

TEST(ChatTemplateInput, NoToolsIsNull) {
  Conversation c;
  c.messages.push_back(Message::user("hi"));
  ChatTemplateInput input = template_input(c, /*add_generation_prompt=*/true);
  EXPECT_TRUE(input.tools.is_null());
  EXPECT_EQ(input.extra["enable_thinking"], true);
}

TEST(ChatTemplateInput, RendersThroughAToolTemplate) {
  // The shape of Qwen-style templates: tool schemas as JSON, arguments as a mapping.
  auto tmpl = ChatTemplate::parse(
      "{% for t in tools %}{{ t.function.name }}:{{ t.function.parameters|tojson }}\n{% endfor %}"
      "{% for m in messages %}{{ m.role }}>{{ m.content }}"
      "{% for c in m.tool_calls|default([]) %}[{{ c.function.name }} {{ c.function.arguments|tojson }}]{% endfor %}"
      "{% if m.role == 'tool' %}({{ m.name }}){% endif %}\n{% endfor %}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
  auto out = tmpl->render(template_input(tool_conversation(), /*add_generation_prompt=*/true));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(*out,
            "get_weather:{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}\n"
            "raw:null\n"
            // trim_blocks eats the newline after {% endif %}
            "system>Be brief.user>Weather in Paris?"
            "assistant>[get_weather {\"city\": \"Paris\", \"days\": 2}][raw \"not json\"]"
            "tool>21 C(get_weather)tool>?(raw)user>Answer in French.");
}

}  // namespace
}  // namespace deepinfer::recipe
