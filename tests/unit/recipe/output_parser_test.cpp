// The output parser of recipe-spec.md §3: the §3.6 DSML case in both spellings under every
// chunking, and the smaller rules around it.
#include "recipe/output_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace deepinfer::recipe {
namespace {

// Events merged across chunk boundaries: what must not depend on the chunking.
std::string describe(const std::vector<OutputEvent>& events) {
  std::vector<OutputEvent> merged;
  for (const OutputEvent& e : events) {
    if (!merged.empty() && merged.back().kind == e.kind && e.kind != OutputEvent::Kind::kToolCall) {
      merged.back().text += e.text;
    } else {
      merged.push_back(e);
    }
  }
  std::string s;
  for (const OutputEvent& e : merged)
    s += std::to_string(static_cast<int>(e.kind)) + ":" + e.text + "|";
  return s;
}

std::vector<OutputEvent> run(const ParsingOptions& o, const std::vector<std::string>& chunks) {
  OutputParser p(o);
  std::vector<OutputEvent> all;
  for (const std::string& c : chunks) {
    auto ev = p.feed(c);
    all.insert(all.end(), ev.begin(), ev.end());
  }
  auto ev = p.finish();
  all.insert(all.end(), ev.begin(), ev.end());
  return all;
}

// Splits at UTF-8 character boundaries only, as text chunks from a detokenizer are.
std::vector<size_t> char_boundaries(const std::string& s) {
  std::vector<size_t> b;
  for (size_t i = 1; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) b.push_back(i);
  }
  return b;
}

// Every chunking of §3.6: whole, every two-way split, one character at a time.
void expect_chunking_independent(const ParsingOptions& o, const std::string& text,
                                 const std::string& expected) {
  EXPECT_EQ(describe(run(o, {text})), expected);
  for (size_t at : char_boundaries(text)) {
    ASSERT_EQ(describe(run(o, {text.substr(0, at), text.substr(at)})), expected)
        << "split at " << at;
  }
  std::vector<std::string> chars;
  size_t start = 0;
  for (size_t at : char_boundaries(text)) {
    chars.push_back(text.substr(start, at - start));
    start = at;
  }
  chars.push_back(text.substr(start));
  EXPECT_EQ(describe(run(o, chars)), expected);
}

std::string ex7(bool v41) {
  const std::string sp = v41 ? " " : "";
  const std::string block = v41 ? " calls" : "tool_calls";
  return "<｜DSML｜" + block + ">\n<｜DSML｜" + sp + "invoke name=\"submit\">\n" + "<｜DSML｜" +
         sp + "parameter name=\"shipping address\" string=\"true\">Paris\n日本</｜DSML｜" + sp +
         "parameter>\n" + "<｜DSML｜" + sp +
         "parameter name=\" string= mode \" string=\"false\">{\"enabled\":true}</｜DSML｜" + sp +
         "parameter>\n" + "<｜DSML｜" + sp +
         "parameter name=\"count\" string=\"false\">2</｜DSML｜" + sp + "parameter>\n" +
         "<｜DSML｜" + sp + "parameter name=\"\" string=\"true\">empty key</｜DSML｜" + sp +
         "parameter>\n" + "</｜DSML｜" + sp + "invoke>\n</｜DSML｜" + block + ">";
}

TEST(OutputParser, Spec36QuotedParameterNamesSurviveEveryChunking) {
  for (bool v41 : {false, true}) {
    const std::string text = ex7(v41);
    std::vector<OutputEvent> events = run(ParsingOptions{}, {text});
    ParsedOutput out;
    accumulate(events, out);
    ASSERT_EQ(out.tool_calls.size(), 1u);
    EXPECT_EQ(out.tool_calls[0].name, "submit");
    auto args = nlohmann::json::parse(out.tool_calls[0].arguments);
    EXPECT_EQ(
        args,
        nlohmann::json::parse(
            R"({"shipping address":"Paris\n日本"," string= mode ":{"enabled":true},"count":2,"":"empty key"})"));
    EXPECT_TRUE(out.content.empty());
    expect_chunking_independent(ParsingOptions{}, text, describe(events));
  }
}

TEST(OutputParser, ReasoningSplitAndNewlines) {
  ParsingOptions o;
  o.thinking_initial_stage = ThinkingInitialStage::kReasoningStart;
  const std::string text = "\n\nLet me think\n\n</think>\n\nHello world";
  std::vector<OutputEvent> events = run(o, {text});
  EXPECT_EQ(describe(events), "1:Let me think|0:Hello world|");
  expect_chunking_independent(o, text, describe(events));
}

TEST(OutputParser, StrayEndOfThinkingIsDropped) {
  EXPECT_EQ(describe(run(ParsingOptions{}, {"a</think>b"})), "0:ab|");
}

TEST(OutputParser, ToolCallStraightFromReasoning) {
  ParsingOptions o;
  o.thinking_initial_stage = ThinkingInitialStage::kReasoningStart;
  const std::string text =
      "plan\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
      "<｜DSML｜parameter name=\"q\" string=\"true\">a\"b\\c</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>after";
  std::vector<OutputEvent> events = run(o, {text});
  EXPECT_EQ(describe(events), "1:plan|2:f|3:{\"q\": \"a\\\"b\\\\c\"}|");
  expect_chunking_independent(o, text, describe(events));
}

TEST(OutputParser, RequiredPrefillStartsInsideTheBlock) {
  ParsingOptions o;
  o.starts_in_tool_calls = true;
  o.thinking_initial_stage = ThinkingInitialStage::kReasoningStart;  // overridden
  std::vector<OutputEvent> events =
      run(o, {"<｜DSML｜ invoke name=\"g\">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"});
  EXPECT_EQ(describe(events), "2:g|3:{}|");
}

TEST(OutputParser, StopSequenceAcrossThreeChunks) {
  ParsingOptions o;
  o.stop_sequences = {"STOP"};
  OutputParser p(o);
  std::vector<OutputEvent> all;
  for (const char* c : {"abc S", "T", "OP tail"}) {
    auto ev = p.feed(c);
    all.insert(all.end(), ev.begin(), ev.end());
  }
  auto ev = p.finish();
  all.insert(all.end(), ev.begin(), ev.end());
  EXPECT_EQ(describe(all), "0:abc |");
  ASSERT_TRUE(p.stop_sequence().has_value());
  EXPECT_EQ(*p.stop_sequence(), "STOP");
}

TEST(OutputParser, JsonModeFencedAndRaw) {
  ParsingOptions o;
  o.parse_json_output = true;
  EXPECT_EQ(describe(run(o, {"Here:\n```json\n{\"a\": 1}\n```\nbye"})), "0: {\"a\": 1} |");
  EXPECT_EQ(describe(run(o, {"{\"a\": [1]}"})), "0:{\"a\": [1]}|");
}

// The byte at which finished() first turns true when `text` is fed one character at a time,
// or npos; and for every two-way split, finished() after the first part must agree with it.
size_t json_end_at_every_split(const ParsingOptions& o, const std::string& text) {
  size_t end = std::string::npos;
  {
    OutputParser p(o);
    size_t start = 0;
    std::vector<size_t> cuts = char_boundaries(text);
    cuts.push_back(text.size());
    for (size_t at : cuts) {
      p.feed(text.substr(start, at - start));
      start = at;
      if (p.finished()) {
        end = at;
        break;
      }
    }
  }
  for (size_t at : char_boundaries(text)) {
    OutputParser p(o);
    p.feed(text.substr(0, at));
    EXPECT_EQ(p.finished(), end != std::string::npos && at >= end) << "split at " << at;
  }
  return end;
}

// JSON mode ends with the top-level value, so that a server stops the model there instead of
// letting it run to max_tokens: brackets inside strings and escaped quotes do not count.
TEST(OutputParser, JsonModeFinishesWhenTheTopLevelValueCloses) {
  ParsingOptions o;
  o.parse_json_output = true;
  const std::string object = R"({"a": {"b": "}]"}, "c": [1, "\"}", "\\"], "d": "日本"})";
  EXPECT_EQ(json_end_at_every_split(o, object + "\n\nmore text"), object.size());
  EXPECT_EQ(json_end_at_every_split(o, "Sure: " + object + " ok"), 6 + object.size());
  EXPECT_EQ(json_end_at_every_split(o, "```json\n" + object + "\n```\nbye"), 8 + object.size());
  EXPECT_EQ(json_end_at_every_split(o, "```\n [[1], {\"x\": []}]\n```"), 21u);
  EXPECT_EQ(json_end_at_every_split(o, "[1, 2] then"), 6u);
  // With tools, a DSML block before the JSON is still read first.
  o.parse_tool_calls = true;
  const std::string call =
      "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"q\" "
      "string=\"false\">{\"k\": 1}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  EXPECT_EQ(json_end_at_every_split(o, call), call.size());  // the block's own end
  // Not finished: the value is open, a string holds the bracket, or the fence holds a scalar
  // (whose end cannot be told while streaming).
  EXPECT_EQ(json_end_at_every_split(o, R"({"a": [1, 2})"), std::string::npos);
  EXPECT_EQ(json_end_at_every_split(o, R"({"a": "}]})"), std::string::npos);
  EXPECT_EQ(json_end_at_every_split(o, "```json\n42\n```\n{}"), std::string::npos);
  // Outside JSON mode braces mean nothing.
  EXPECT_EQ(json_end_at_every_split(ParsingOptions{}, object), std::string::npos);
}

// Text after the value is still read as deepseek-recipe 0.2.0 reads it (checked against the
// 0.2.0 wheel: kept as content, or one space after a closing fence), so the events of any
// output stay the reference's; the finish only tells the caller to stop.
TEST(OutputParser, JsonModeTextAfterTheValueIsReadAsTheReferenceDoes) {
  ParsingOptions o;
  o.parse_json_output = true;
  OutputParser p(o);
  std::vector<OutputEvent> all = p.feed("{\"a\": 1} trailing text");
  EXPECT_TRUE(p.finished());
  const std::vector<OutputEvent>& tail = p.finish();
  all.insert(all.end(), tail.begin(), tail.end());
  EXPECT_EQ(describe(all), "0:{\"a\": 1} trailing text|");
  EXPECT_EQ(describe(run(o, {"```json\n{\"a\": 1}\n```\nafter"})), "0:{\"a\": 1} |");
}

TEST(OutputParser, TextAfterTheBlockIsDropped) {
  std::vector<OutputEvent> events =
      run(ParsingOptions{}, {"hi<｜DSML｜tool_calls>\n<｜DSML｜invoke "
                             "name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls> more"});
  EXPECT_EQ(describe(events), "0:hi|2:f|3:{}|");
}

// Random text built from marker fragments, cut at random: the merged events never depend on
// the cutting, under every parser configuration.
TEST(OutputParser, RandomTextAndRandomChunkings) {
  static const char* kPieces[] = {"<｜DSML｜",
                                  "tool_calls>",
                                  " calls>",
                                  "</｜DSML｜",
                                  "invoke name=\"",
                                  "parameter name=\"",
                                  "\" string=\"",
                                  "true\">",
                                  "false\">",
                                  "</think>",
                                  "<think>",
                                  "\n",
                                  "\n\n",
                                  "\"",
                                  "{",
                                  "[",
                                  "```json\n",
                                  "\n```",
                                  "STOP",
                                  "ST",
                                  "x",
                                  "日本",
                                  "\\",
                                  " ",
                                  "<",
                                  "｜"};
  std::mt19937 rng(11);
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) text += kPieces[rng() % (sizeof kPieces / sizeof kPieces[0])];
    ParsingOptions o;
    o.parse_tool_calls = rng() % 4 != 0;
    o.parse_json_output = rng() % 4 == 0;
    o.starts_in_tool_calls = rng() % 8 == 0;
    if (rng() % 2) o.thinking_initial_stage = ThinkingInitialStage::kReasoningStart;
    if (rng() % 3 == 0) o.stop_sequences = {"STOP"};
    const std::string whole = describe(run(o, {text}));
    std::vector<size_t> cuts = char_boundaries(text);
    std::vector<std::string> chunks;
    size_t start = 0;
    for (size_t at : cuts) {
      if (rng() % 3 == 0) {
        chunks.push_back(text.substr(start, at - start));
        start = at;
      }
    }
    chunks.push_back(text.substr(start));
    ASSERT_EQ(describe(run(o, chunks)), whole) << "text " << nlohmann::json(text).dump();
  }
}


// --- <tool_call> JSON blocks (ToolCallFormat::kTaggedJson) ----------------------------------

ParsingOptions tagged_options() {
  ParsingOptions o;
  o.tool_call_format = ToolCallFormat::kTaggedJson;
  return o;
}

TEST(TaggedToolCalls, NestedUnicodeAndEmptyNamesUnderEveryChunking) {
  const std::string text =
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Z\\u00fcrich \xE6\x97\xA5\xE6\x9C\xAC\", \"\": [1, {\"a\": null}], \"x y\": 2.5}}\n"
      "</tool_call>\n<tool_call>\n{\"arguments\": {}, \"name\": \"search\"}\n</tool_call>";
  expect_chunking_independent(
      tagged_options(), text,
      "0:Let me look.|2:get_weather|3:{\"city\": \"Z\xC3\xBCrich \xE6\x97\xA5\xE6\x9C\xAC\", "
      "\"\": [1, {\"a\": null}], \"x y\": 2.5}|2:search|3:{}|");
}

TEST(TaggedToolCalls, StringArgumentsAndParametersKey) {
  EXPECT_EQ(describe(run(tagged_options(),
                         {"<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}"
                          "</tool_call>"})),
            "2:f|3:{\"a\": 1}|");
  EXPECT_EQ(describe(run(tagged_options(),
                         {"<tool_call>{\"name\": \"f\", \"parameters\": {\"b\": true}}</tool_call>"})),
            "2:f|3:{\"b\": true}|");
  EXPECT_EQ(describe(run(tagged_options(), {"<tool_call>[{\"name\": \"f\", \"arguments\": {}}, "
                                            "{\"name\": \"g\"}]</tool_call>"})),
            "2:f|3:{}|2:g|3:{}|");
}

TEST(TaggedToolCalls, MalformedAndUnclosedBlocksStayText) {
  EXPECT_EQ(describe(run(tagged_options(), {"a<tool_call>{\"nam</tool_call>b"})),
            "0:a<tool_call>{\"nam</tool_call>b|");
  expect_chunking_independent(tagged_options(), "a <tool_call>{\"name\": \"f\"",
                              "0:a <tool_call>{\"name\": \"f\"|");
}

TEST(TaggedToolCalls, OnlyWhereSelected) {
  const std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  ParsingOptions off = tagged_options();
  off.parse_tool_calls = false;
  EXPECT_EQ(describe(run(off, {text})), "0:" + text + "|");
  // The DSML format leaves the tags alone.
  EXPECT_EQ(describe(run(ParsingOptions{}, {text})), "0:" + text + "|");
}

}  // namespace
}  // namespace deepinfer::recipe
