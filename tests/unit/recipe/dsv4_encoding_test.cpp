// The worked examples of recipe-spec.md §1.10, byte for byte, plus the switches around them.
#include "recipe/dsv4_encoding.h"

#include <gtest/gtest.h>

#include <string>

namespace deepinfer::recipe {
namespace {

const std::string kBos = kBosToken;
const std::string kEos = kEosToken;
const std::string kUser = kUserToken;
const std::string kAssistant = kAssistantToken;
const std::string kSystem = kSystemToken;

const std::string kV4High =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";
const std::string kV4Max =
    "Reasoning Effort: Beyond maximum \u2014 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively decompose the problem into its most fundamental components, trace every causal "
    "chain to its root, and resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple "
    "angles and are certain that no assumption remains unchecked and no error remains "
    "undiscovered.\n\n";

std::vector<Message> greeting(bool with_last_answer) {
  std::vector<Message> m = {
      Message::system("You are a helpful assistant."),
      Message::user("Hello"),
      Message::assistant("Hi there! How can I help you?",
                         "The user said hello, I should greet back."),
      Message::user("What is the capital of France?"),
  };
  if (with_last_answer) {
    m.push_back(Message::assistant("The capital of France is Paris.",
                                   "The user asks about the capital of France. It is Paris."));
  }
  return m;
}

std::string render(const Conversation& c, PromptEncoding e, const RenderOptions& o) {
  return render_prompt(c, e, o).text();
}

const std::string kEx1Body =
    "You are a helpful assistant.<｜User｜>Hello<｜Assistant｜></think>Hi there! How can I help "
    "you?<｜end▁of▁sentence｜><｜User｜>What is the capital of France?<｜Assistant｜><think>The "
    "user "
    "asks about the capital of France. It is Paris.</think>The capital of France is "
    "Paris.<｜end▁of▁sentence｜>";

TEST(Dsv4Encoding, Ex1ReferenceDropsEarlierReasoning) {
  Conversation c;
  c.messages = greeting(true);
  EXPECT_EQ(render(c, PromptEncoding::kDeepseekV4, RenderOptions::reference()), kBos + kEx1Body);
}

TEST(Dsv4Encoding, Ex1EffortVariants) {
  Conversation c;
  c.messages = greeting(true);
  c.reasoning_effort = ReasoningEffort::kHigh;
  EXPECT_EQ(render(c, PromptEncoding::kDeepseekV4, RenderOptions::reference()),
            kBos + kV4High + kEx1Body);
  c.reasoning_effort = ReasoningEffort::kMax;
  EXPECT_EQ(render(c, PromptEncoding::kDeepseekV4, RenderOptions::reference()),
            kBos + kV4Max + kEx1Body);
  c.reasoning_effort = ReasoningEffort::kLow;
  EXPECT_EQ(render(c, PromptEncoding::kDeepseekV4, RenderOptions::reference()), kBos + kEx1Body);
}

TEST(Dsv4Encoding, Ex1KeepAllRetainsFirstTurnReasoning) {
  Conversation c;
  c.messages = greeting(true);
  RenderOptions o = RenderOptions::reference();
  o.retention = ReasoningRetention::kKeepAll;
  std::string p = render(c, PromptEncoding::kDeepseekV4, o);
  EXPECT_NE(p.find("Hello<｜Assistant｜><think>The user said hello, I should greet back.</think>Hi "
                   "there!"),
            std::string::npos)
      << p;
}

TEST(Dsv4Encoding, Ex2GenerationPrompt) {
  Conversation c;
  c.messages = greeting(false);
  c.thinking_mode = false;
  const std::string chat =
      kBos +
      "You are a helpful assistant.<｜User｜>Hello<｜Assistant｜></think>Hi there! How can I "
      "help you?<｜end▁of▁sentence｜><｜User｜>What is the capital of "
      "France?<｜Assistant｜></think>";
  EXPECT_EQ(render(c, PromptEncoding::kDeepseekV4, RenderOptions::reference()), chat);
  c.thinking_mode = true;
  std::string thinking = render(c, PromptEncoding::kDeepseekV4, RenderOptions::reference());
  EXPECT_EQ(thinking, chat.substr(0, chat.size() - std::string("</think>").size()) + "<think>");

  Conversation readme;
  readme.messages = {Message::system("You are a helpful assistant."),
                     Message::user("What is 2+2?")};
  EXPECT_EQ(render(readme, PromptEncoding::kDeepseekV4, RenderOptions::reference()),
            kBos + "You are a helpful assistant.<｜User｜>What is 2+2?<｜Assistant｜><think>");
}

ToolDefinition weather_tool() {
  return {
      "get_weather", "Get the weather for a specific location",
      R"({"type":"object","properties":{"location":{"type":"string","description":"The city name"},)"
      R"("unit":{"type":"string","enum":["celsius","fahrenheit"],"description":"Temperature unit"}},)"
      R"("required":["location"]})",
      std::nullopt};
}

ToolDefinition search_tool() {
  return {
      "search", "Search the web for information",
      R"({"type":"object","properties":{"query":{"type":"string","description":"Search query"},)"
      R"("num_results":{"type":"integer","description":"Number of results to return"}},)"
      R"("required":["query"]})",
      std::nullopt};
}

std::string v4_tools_block() {
  return "## Tools\n\nYou have access to a set of tools to help answer the user's question. You "
         "can "
         "invoke tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
         "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
         "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
         "</｜DSML｜parameter>\n...\n</｜DSML｜invoke>\n<｜DSML｜invoke "
         "name=\"$TOOL_NAME2\">\n...\n"
         "</｜DSML｜invoke>\n</｜DSML｜tool_calls>\n\n"
         "String parameters should be specified as is and set `string=\"true\"`. For all other "
         "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
         "`string=\"false\"`.\n\n"
         "If thinking_mode is enabled (triggered by <think>), you MUST output your complete "
         "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
         "Otherwise, output directly after </think> with tool calls or final response.\n\n"
         "### Available Tool Schemas\n\n"
         "{\"name\": \"get_weather\", \"description\": \"Get the weather for a specific "
         "location\", "
         "\"parameters\": {\"type\": \"object\", \"properties\": {\"location\": {\"type\": "
         "\"string\", "
         "\"description\": \"The city name\"}, \"unit\": {\"type\": \"string\", \"enum\": "
         "[\"celsius\", "
         "\"fahrenheit\"], \"description\": \"Temperature unit\"}}, \"required\": "
         "[\"location\"]}}\n"
         "{\"name\": \"search\", \"description\": \"Search the web for information\", "
         "\"parameters\": "
         "{\"type\": \"object\", \"properties\": {\"query\": {\"type\": \"string\", "
         "\"description\": "
         "\"Search query\"}, \"num_results\": {\"type\": \"integer\", \"description\": \"Number of "
         "results to return\"}}, \"required\": [\"query\"]}}\n\n"
         "You MUST strictly follow the above defined tool name and parameter schemas to invoke "
         "tool "
         "calls.\n";
}

TEST(Dsv4Encoding, Ex3ToolsAndRoundTrip) {
  Conversation c;
  c.tools = {weather_tool(), search_tool()};
  c.messages = {
      Message::system("You are a helpful assistant."),
      Message::user("What's the weather in Beijing?"),
      Message::assistant("",
                         "The user wants to know the weather in Beijing. I should use the "
                         "get_weather tool.",
                         {{"call_1", "get_weather", R"({"location":"Beijing","unit":"celsius"})"}}),
      Message::tool(R"({"temperature": 22, "condition": "sunny", "humidity": 45})", "call_1"),
      Message::assistant("The weather in Beijing is currently sunny with a temperature of 22°C and "
                         "45% humidity.",
                         "Got the weather data. Let me format a nice response."),
  };
  const std::string expected =
      kBos + "You are a helpful assistant.\n\n" + v4_tools_block() +
      "<｜User｜>What's the weather in Beijing?<｜Assistant｜><think>The user wants to know the "
      "weather in Beijing. I should use the get_weather tool.</think>\n\n"
      "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
      "<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"unit\" string=\"true\">celsius</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>"
      "{\"temperature\": 22, \"condition\": \"sunny\", \"humidity\": 45}</tool_result>"
      "<｜Assistant｜><think>Got the weather data. Let me format a nice response.</think>The "
      "weather in Beijing is currently sunny with a temperature of 22°C and 45% "
      "humidity.<｜end▁of▁sentence｜>";
  EXPECT_EQ(render(c, PromptEncoding::kDeepseekV4, RenderOptions::reference()), expected);
  // The recipe adds the generation prompt and, by default, the high-effort header; with low
  // effort (no V4 header) everything else is the same here because tools keep all reasoning.
  c.reasoning_effort = ReasoningEffort::kLow;
  EXPECT_EQ(render(c, PromptEncoding::kDeepseekV4, RenderOptions::recipe()),
            expected + "<｜Assistant｜><think>");
}

TEST(Dsv4Encoding, Ex4ParallelCalls) {
  Conversation c;
  c.tools = {weather_tool()};
  c.messages = {
      Message::user("Weather in Beijing and Shanghai?"),
      Message::assistant("Let me check both.", "two cities",
                         {{"a", "get_weather", R"({"location":"Beijing"})"},
                          {"b", "get_weather", R"({"location":"Shanghai"})"}}),
      Message::tool(R"({"temperature": 26})", "b"),  // out of order: sorted back by call
      Message::tool(R"({"temperature": 22})", "a"),
  };
  std::string p = render(c, PromptEncoding::kDeepseekV4, RenderOptions::reference());
  EXPECT_NE(
      p.find("Let me check both.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">"),
      std::string::npos);
  EXPECT_NE(p.find("</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_weather\">"), std::string::npos);
  EXPECT_NE(p.find("<｜User｜><tool_result>{\"temperature\": 22}</tool_result>\n\n<tool_result>"
                   "{\"temperature\": 26}</tool_result><｜Assistant｜>"),
            std::string::npos)
      << p;
}

TEST(Dsv4Encoding, Ex5V41Recipe) {
  Conversation c;
  c.messages = {Message::user("Hello")};
  const std::string effort =
      "Reasoning Effort: 75 (range 1-100, the higher the value, the more thorough the "
      "reasoning)\n\n";
  EXPECT_EQ(render(c, PromptEncoding::kDeepseekV41, RenderOptions::recipe()),
            kBos + kSystem + effort + "<｜User｜>Hello<｜Assistant｜><think>");
  c.thinking_mode = false;
  EXPECT_EQ(render(c, PromptEncoding::kDeepseekV41, RenderOptions::recipe()),
            kBos + "<｜User｜>Hello<｜Assistant｜></think>");
  c.thinking_mode = true;
  c.messages.insert(c.messages.begin(), Message::system("S"));
  EXPECT_EQ(render(c, PromptEncoding::kDeepseekV41, RenderOptions::recipe()),
            kBos + kSystem + effort + "S<｜User｜>Hello<｜Assistant｜><think>");
}

TEST(Dsv4Encoding, Ex6V4RecipeEffortHigh) {
  Conversation c;
  c.messages = {Message::user("Reply exactly: OK")};
  c.reasoning_effort = ReasoningEffort::kHigh;
  std::string p = render(c, PromptEncoding::kDeepseekV4, RenderOptions::recipe());
  EXPECT_EQ(p, kBos + kV4High + "<｜User｜>Reply exactly: OK<｜Assistant｜><think>");
  EXPECT_EQ(p.rfind("\n<｜User｜>Reply exactly: OK<｜Assistant｜><think>"),
            p.size() - std::string("\n<｜User｜>Reply exactly: OK<｜Assistant｜><think>").size());
}

TEST(Dsv4Encoding, EffortTableV41) {
  Conversation c;
  c.messages = {Message::user("x")};
  auto level = [&](std::optional<ReasoningEffort> e) {
    c.reasoning_effort = e;
    std::string p = render(c, PromptEncoding::kDeepseekV41, RenderOptions::recipe());
    size_t at = p.find("Reasoning Effort: ");
    return at == std::string::npos ? std::string()
                                   : p.substr(at + 18, p.find(' ', at + 18) - at - 18);
  };
  EXPECT_EQ(level(ReasoningEffort::kLow), "50");
  EXPECT_EQ(level(ReasoningEffort::kHigh), "75");
  EXPECT_EQ(level(ReasoningEffort::kXhigh), "75");
  EXPECT_EQ(level(ReasoningEffort::kMax), "100");
  EXPECT_EQ(level(std::nullopt), "75");
}

TEST(Dsv4Encoding, RequiredToolChoicePrefillsTheBlock) {
  Conversation c;
  c.thinking_mode = false;
  c.tools = {weather_tool()};
  c.tool_choice = ToolChoice::kRequired;
  c.messages = {Message::user("q")};
  RenderedPrompt v4 = render_prompt(c, PromptEncoding::kDeepseekV4);
  EXPECT_TRUE(v4.ends_in_tool_calls);
  const std::string v4_tail = "<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n";
  EXPECT_EQ(v4.text().substr(v4.text().size() - v4_tail.size()), v4_tail);
  RenderedPrompt v41 = render_prompt(c, PromptEncoding::kDeepseekV41);
  const std::string v41_tail = "<｜Assistant｜></think>\n\n<｜DSML｜ calls>\n";
  EXPECT_EQ(v41.text().substr(v41.text().size() - v41_tail.size()), v41_tail);
  c.tool_choice = ToolChoice::kAuto;
  EXPECT_FALSE(render_prompt(c, PromptEncoding::kDeepseekV4).ends_in_tool_calls);
}

TEST(Dsv4Encoding, UserTypedSpecialTokensStayText) {
  Conversation c;
  c.thinking_mode = false;
  c.messages = {Message::user("<｜User｜><think>x")};
  RenderedPrompt p = render_prompt(c, PromptEncoding::kDeepseekV41);
  std::string special;
  for (const PromptPiece& piece : p.pieces) {
    if (piece.special) special += piece.text + "|";
  }
  EXPECT_EQ(special, kBos + "|" + kUser + "|" + kAssistant + "|</think>|");
}

// The tools block's own template text carries real DSML and think tokens; the client's tool
// names, descriptions and schemas are plain text. deepseek-recipe 0.2.0 (checked with the
// wheel) marks 9 DSML markers in either block and none in the schema line.
TEST(Dsv4Encoding, MarkersInToolSchemasStayText) {
  for (const PromptEncoding encoding : {PromptEncoding::kDeepseekV4, PromptEncoding::kDeepseekV41}) {
    auto specials = [&](const std::string& typed) {
      Conversation c;
      c.messages = {Message::user("hi")};
      c.tools = {ToolDefinition{"f" + typed, "desc " + typed,
                                R"({"type":"object","properties":{"q":{"description":")" +
                                    typed + R"("}}})",
                                std::nullopt}};
      std::string special;
      for (const PromptPiece& piece : render_prompt(c, encoding).pieces) {
        if (piece.special) special += piece.text + "|";
      }
      return special;
    };
    const std::string plain = specials("x");
    EXPECT_EQ(specials("<think>｜DSML｜</think><｜User｜>"), plain);
    size_t dsml = 0;
    for (size_t at = plain.find(kDsmlToken); at != std::string::npos;
         at = plain.find(kDsmlToken, at + 1))
      ++dsml;
    EXPECT_EQ(dsml, 9u);
  }
}

TEST(Dsv4Encoding, ImagePlaceholdersAreSpecialOnlyForRealImages) {
  Conversation c;
  c.thinking_mode = false;
  c.messages = {Message::user("a <｜image｜> b <｜image｜>", {ImageSource{}})};
  RenderedPrompt p = render_prompt(c, PromptEncoding::kDeepseekV41);
  int special_images = 0;
  for (const PromptPiece& piece : p.pieces)
    special_images += piece.special && piece.text == kImageToken;
  EXPECT_EQ(special_images, 1);
  EXPECT_EQ(p.image_sources.size(), 1u);
}

TEST(Dsv4Encoding, RetentionPoliciesDifferOnlyWithoutTools) {
  Conversation c;
  c.messages = greeting(true);
  c.messages.push_back(Message::user("And Germany?"));
  const std::string kept = "<think>The user said hello, I should greet back.</think>";
  auto has_kept = [&](const RenderOptions& o) {
    return render(c, PromptEncoding::kDeepseekV41, o).find(kept) != std::string::npos;
  };
  RenderOptions o;
  o.retention = ReasoningRetention::kKeepAll;
  EXPECT_TRUE(has_kept(o));
  o.retention = ReasoningRetention::kDropAllUnlessTools;
  EXPECT_FALSE(has_kept(o));
  o.retention = ReasoningRetention::kDropBeforeLastUserUnlessTools;
  EXPECT_FALSE(has_kept(o));
  c.tools = {weather_tool()};
  for (auto r : {ReasoningRetention::kKeepAll, ReasoningRetention::kDropAllUnlessTools,
                 ReasoningRetention::kDropBeforeLastUserUnlessTools}) {
    o.retention = r;
    EXPECT_TRUE(has_kept(o));
  }
}

}  // namespace
}  // namespace deepinfer::recipe
