// Forced tool calls as grammars. For DeepSeek's DSML the proof is the encoder itself: the calls
// the recipe writes into a conversation's history are what the grammar must accept, byte for
// byte, after the prefill; and what the grammar accepts, the output parser reads back as a call
// whose arguments are valid.
#include "server/forced_call.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "recipe/dsv4_encoding.h"
#include "recipe/output_parser.h"

namespace deepinfer::server {
namespace {

using Json = nlohmann::ordered_json;
using recipe::PromptEncoding;

std::vector<recipe::ToolDefinition> weather_tools() {
  recipe::ToolDefinition weather;
  weather.name = "get_weather";
  weather.parameters_json = Json{
      {"type", "object"},
      {"properties",
       {{"city", {{"type", "string"}, {"description", "a city"}}},
        {"days", {{"type", "integer"}, {"minimum", 1}, {"maximum", 14}}},
        {"unit", {{"type", "string"}, {"enum", {"celsius", "fahrenheit"}}}},
        {"where", {{"$ref", "#/$defs/place"}}},
        {"code", {{"type", "string"}, {"pattern", "^[A-Z]{3}$"}}}}},
      {"required", {"city"}},
      {"$defs", {{"place", {{"type", "object"}, {"properties", {{"lat", {{"type", "number"}}}}}}}}}}.dump();
  recipe::ToolDefinition ping;
  ping.name = "ping";
  ping.parameters_json = R"({"type": "object", "properties": {}})";
  return {weather, ping};
}

std::shared_ptr<const grammar::CompiledGrammar> compile(const Constraint& c) {
  // Every byte a token, plus the DSML marker as one token (as DeepSeek's vocabulary has it).
  std::vector<std::string> pieces;
  pieces.reserve(258);
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  pieces.push_back(recipe::kDsmlToken);
  pieces.push_back("");
  const auto stop = static_cast<int32_t>(pieces.size() - 1);
  grammar::GrammarSpec spec;
  spec.kind = grammar::GrammarKind::kGbnf;
  spec.text = c.text;
  auto compiled = grammar::compile_grammar(spec, grammar::TokenIndex::from_pieces(std::move(pieces), {stop}), {});
  EXPECT_TRUE(compiled.ok()) << compiled.status().to_string() << "\n" << c.text;
  return compiled.ok() ? *compiled : nullptr;
}

// The whole text is accepted and the grammar is complete after it.
bool accepts(const std::shared_ptr<const grammar::CompiledGrammar>& g, std::string_view text) {
  grammar::Matcher m(g);
  for (char c : text) {
    if (!m.accept_bytes(std::string(1, c))) return false;
  }
  return m.is_complete();
}

// What the model writes after the prefill for these calls: the encoder's DSML block of an
// assistant turn, less its opening.
std::string written_calls(const std::vector<recipe::ToolCall>& calls, PromptEncoding encoding) {
  recipe::Conversation c;
  c.thinking_mode = false;
  c.tools = weather_tools();
  c.messages = {recipe::Message::user("Weather?"), recipe::Message::assistant("", std::nullopt, calls)};
  const std::string text = recipe::render_prompt(c, encoding).text();
  const recipe::DsmlTags tags = recipe::dsml_tags(encoding);
  const std::string open = "<" + std::string(recipe::kDsmlToken) + std::string(tags.block) + ">\n";
  const std::string close = "</" + std::string(recipe::kDsmlToken) + std::string(tags.block) + ">";
  const size_t begin = text.rfind(open);  // the system prompt shows an example block first
  const size_t end = text.find(close, begin);
  EXPECT_NE(begin, std::string::npos) << text;
  return text.substr(begin + open.size(), end + close.size() - begin - open.size());
}

recipe::ParsedOutput parse(std::string_view written) {
  recipe::ParsingOptions options;
  options.starts_in_tool_calls = true;
  recipe::OutputParser parser(options);
  recipe::ParsedOutput out;
  recipe::accumulate(parser.feed(written), out);
  recipe::accumulate(parser.finish(), out);
  return out;
}

class ForcedDsmlCall : public ::testing::TestWithParam<PromptEncoding> {};

TEST_P(ForcedDsmlCall, AcceptsWhatTheEncoderWritesAndTheParserReadsItBack) {
  auto constraint = forced_dsml_call(weather_tools(), GetParam());
  ASSERT_TRUE(constraint.ok()) << constraint.status().to_string();
  EXPECT_EQ(constraint->kind, ConstraintKind::kGbnf);
  const auto g = compile(*constraint);
  ASSERT_NE(g, nullptr);
  const std::vector<std::vector<recipe::ToolCall>> good = {
      {{"a", "get_weather", R"({"city": "Paris"})"}},
      {{"a", "get_weather", R"({"city": "Paris\n日本 <b>", "days": 3, "unit": "celsius", "where": {"lat": 48.5}, "code": "CDG"})"}},
      {{"a", "get_weather", R"({"city": "", "unit": "fahrenheit"})"}},
      {{"a", "ping", "{}"}},
      {{"a", "get_weather", R"({"city": "Oslo"})"}, {"b", "ping", "{}"}},
  };
  for (const auto& calls : good) {
    const std::string written = written_calls(calls, GetParam());
    EXPECT_TRUE(accepts(g, written)) << written;
    const recipe::ParsedOutput parsed = parse(written);
    ASSERT_EQ(parsed.tool_calls.size(), calls.size()) << written;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(parsed.tool_calls[i].name, calls[i].name);
      EXPECT_EQ(Json::parse(parsed.tool_calls[i].arguments), Json::parse(calls[i].arguments)) << written;
    }
  }
  const std::vector<std::vector<recipe::ToolCall>> bad = {
      {{"a", "get_weather", R"({"days": 3})"}},                     // city is required
      {{"a", "get_weather", R"({"city": "Paris", "days": 15})"}},   // days above its maximum
      {{"a", "get_weather", R"({"city": "Paris", "unit": "K"})"}},  // not in the enum
      {{"a", "get_weather", R"({"city": "Paris", "code": "cdg"})"}},  // pattern
      {{"a", "get_weather", R"({"city": "a｜b"})"}},                // raw text that could close the tag
      {{"a", "get_weather", R"({"city": "Paris", "extra": 1})"}},   // not a parameter
      {{"a", "get_time", "{}"}},                                    // not a tool
  };
  for (const auto& calls : bad) {
    const std::string written = written_calls(calls, GetParam());
    EXPECT_FALSE(accepts(g, written)) << written;
  }
}

TEST_P(ForcedDsmlCall, OneCallWhenParallelCallsAreOff) {
  auto constraint = forced_dsml_call(weather_tools(), GetParam(), {.one_call = true});
  ASSERT_TRUE(constraint.ok());
  const auto g = compile(*constraint);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(accepts(g, written_calls({{"a", "ping", "{}"}}, GetParam())));
  EXPECT_FALSE(accepts(g, written_calls({{"a", "ping", "{}"}, {"b", "ping", "{}"}}, GetParam())));
}

// Strict tools under tool_choice auto: the grammar starts after the block's opening, which the
// model writes itself; the strict tool's calls follow its schema, the others' take anything.
TEST_P(ForcedDsmlCall, StrictToolsUnderAutoStartAtTheBlockTheModelOpens) {
  std::vector<recipe::ToolDefinition> tools = weather_tools();
  tools[0].strict = true;
  recipe::ToolDefinition free_tool;
  free_tool.name = "note";
  free_tool.parameters_json = R"({"type": "object", "properties": {"n": {"type": "integer"}}})";
  tools.push_back(free_tool);
  auto constraint = forced_dsml_call(tools, GetParam(), {.opened_by_model = true, .strict_only = true});
  ASSERT_TRUE(constraint.ok()) << constraint.status().to_string();
  const recipe::DsmlTags tags = recipe::dsml_tags(GetParam());
  EXPECT_EQ(constraint->start_after, "<" + std::string(recipe::kDsmlToken) + std::string(tags.block) + ">");
  const auto g = compile(*constraint);
  ASSERT_NE(g, nullptr);
  auto written = [&](const std::vector<recipe::ToolCall>& calls) { return "\n" + written_calls(calls, GetParam()); };
  EXPECT_TRUE(accepts(g, written({{"a", "get_weather", R"({"city": "Paris", "days": 2})"}})));
  EXPECT_FALSE(accepts(g, written({{"a", "get_weather", R"({"city": "Paris", "days": 20})"}})));
  // Not strict: any parameters, even ones its schema does not have, and values of any type.
  EXPECT_TRUE(accepts(g, written({{"a", "note", R"({"n": "not a number", "other": [1, 2]})"}})));
  EXPECT_TRUE(accepts(g, written({{"a", "note", R"({"n": 1})"}, {"b", "get_weather", R"({"city": "Oslo"})"}})));
  EXPECT_FALSE(accepts(g, written({{"a", "get_time", "{}"}})));
}

// Anthropic's tool_choice "any": the prompt is Auto's, so the grammar writes the block's opening
// too, as the encoder writes it after an assistant's (empty) content.
TEST_P(ForcedDsmlCall, AnyToolChoiceOpensTheBlockItself) {
  auto constraint = forced_dsml_call(weather_tools(), GetParam(), {.opens_block = true});
  ASSERT_TRUE(constraint.ok()) << constraint.status().to_string();
  EXPECT_TRUE(constraint->start_after.empty());
  const auto g = compile(*constraint);
  ASSERT_NE(g, nullptr);
  const recipe::DsmlTags tags = recipe::dsml_tags(GetParam());
  const std::string opening = "\n\n<" + std::string(recipe::kDsmlToken) + std::string(tags.block) + ">\n";
  const std::string call = written_calls({{"a", "get_weather", R"({"city": "Paris"})"}}, GetParam());
  EXPECT_TRUE(accepts(g, opening + call));
  EXPECT_FALSE(accepts(g, call)) << "the opening is the grammar's";
  EXPECT_FALSE(accepts(g, "Sure! " + opening + call)) << "no text before the call";
  const recipe::ParsedOutput parsed = [&] {
    recipe::OutputParser parser(recipe::ParsingOptions{});
    recipe::ParsedOutput out;
    recipe::accumulate(parser.feed(opening + call), out);
    recipe::accumulate(parser.finish(), out);
    return out;
  }();
  ASSERT_EQ(parsed.tool_calls.size(), 1u);
  EXPECT_TRUE(parsed.content.empty()) << parsed.content;
}

INSTANTIATE_TEST_SUITE_P(Encodings, ForcedDsmlCall,
                         ::testing::Values(PromptEncoding::kDeepseekV4, PromptEncoding::kDeepseekV41),
                         [](const auto& info) { return info.param == PromptEncoding::kDeepseekV4 ? "V4" : "V41"; });

// The tagged-JSON form's strict tools under auto: after "<tool_call>" the model writes one of
// the tools' call objects (a strict tool's arguments valid against its schema) and the closing
// tag, then may open another call or stop.
TEST(StrictTaggedCalls, ACallTheModelOpensFollowsTheStrictToolsSchemas) {
  std::vector<recipe::ToolDefinition> tools = weather_tools();
  tools[0].strict = true;
  auto constraint = strict_tagged_calls(tools);
  ASSERT_TRUE(constraint.ok()) << constraint.status().to_string();
  EXPECT_EQ(constraint->start_after, "<tool_call>");
  const auto g = compile(*constraint);
  ASSERT_NE(g, nullptr);
  auto ends = [&](std::string_view text) {
    grammar::Matcher m(g);
    for (char c : text) {
      if (!m.accept_bytes(std::string(1, c))) return false;
    }
    return m.can_end();
  };
  EXPECT_TRUE(ends("\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>"));
  EXPECT_TRUE(ends(R"({"name":"ping","arguments":{"anything":[1,"x"]}}</tool_call>)"));
  EXPECT_TRUE(ends("{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
                   "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"));
  EXPECT_FALSE(ends(R"({"name": "get_weather", "arguments": {"days": 2}}</tool_call>)"));  // city required
  EXPECT_FALSE(ends(R"({"name": "get_weather", "arguments": {"city": "Oslo", "days": 99}}</tool_call>)"));
  EXPECT_FALSE(ends(R"({"name": "get_time", "arguments": {}}</tool_call>)"));
  EXPECT_FALSE(ends(R"({"name": "ping", "arguments": {}})"));  // the closing tag is part of the call
}

TEST(ForcedDsmlCallErrors, NamesDsmlCannotWriteAndBadSchemasAreRefused) {
  recipe::ToolDefinition quoted;
  quoted.name = "f";
  quoted.parameters_json = R"({"type": "object", "properties": {"a\"b": {"type": "string"}}})";
  auto refused = forced_dsml_call({quoted}, PromptEncoding::kDeepseekV4);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("quote"), std::string::npos) << refused.status().message();
  recipe::ToolDefinition not_object;
  not_object.name = "g";
  not_object.parameters_json = "[1]";
  EXPECT_EQ(forced_dsml_call({not_object}, PromptEncoding::kDeepseekV4).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deepinfer::server
