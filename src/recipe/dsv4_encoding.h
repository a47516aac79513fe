// DeepSeek V4 and V4.1 prompt encoders: Conversation -> prompt text (recipe-spec.md §1).
//
// The output is a list of pieces, each either one explicit special token or plain text, so that
// a tokenizer can give special ids only to what the encoder placed: a user who types
// "<｜User｜>" gets the ids of its characters. The flat prompt is the concatenation of the
// pieces. Rendering is a pure function of its inputs and is safe to call from any thread.
//
// Defaults follow deepseek-recipe 0.2.0 (the golden reference); RenderOptions::reference()
// reproduces DeepSeek's own encoding_dsv4.py, which the published V4 examples come from.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/conversation.h"

namespace deepinfer::recipe {

enum class PromptEncoding { kDeepseekV4, kDeepseekV41 };

// Which historical assistant turns keep their reasoning in thinking mode. Dropped reasoning
// renders as a bare "</think>" before the content.
enum class ReasoningRetention {
  kKeepAll,  // deepseek-recipe 0.1.x: every assistant turn keeps its reasoning
  // deepseek-recipe 0.2.0: all turns keep reasoning while tools are offered (tool round trips
  // need it); otherwise none does. A prefix-continued turn always keeps it.
  kDropAllUnlessTools,
  // encoding_dsv4.py and the official API: turns before the last user message lose their
  // reasoning unless some tool is defined.
  kDropBeforeLastUserUnlessTools,
};

struct RenderOptions {
  ReasoningRetention retention = ReasoningRetention::kDropAllUnlessTools;
  // The recipe always ends with "<｜Assistant｜>" + think token; the reference encoder adds it
  // only when the conversation does not already end with an assistant turn.
  bool generation_prompt_after_assistant = true;
  // Effort assumed in thinking mode when the conversation names none: the recipe assumes kHigh,
  // the reference encoder writes no effort header at all.
  std::optional<ReasoningEffort> default_effort = ReasoningEffort::kHigh;
  // recipe 0.2.0's V4 encoder (not its V4.1 one) renders an absent reasoning as "</think>" even
  // in thinking mode, and shows kept reasoning even with thinking off.
  bool v4_quirks = true;

  static RenderOptions recipe() { return {}; }
  static RenderOptions recipe_0_1() {
    RenderOptions o;
    o.retention = ReasoningRetention::kKeepAll;
    o.v4_quirks = false;
    return o;
  }
  static RenderOptions reference() {
    RenderOptions o;
    o.retention = ReasoningRetention::kDropBeforeLastUserUnlessTools;
    o.generation_prompt_after_assistant = false;
    o.default_effort = std::nullopt;
    o.v4_quirks = false;
    return o;
  }
};

struct PromptPiece {
  bool special = false;  // true: exactly one special token's spelling
  std::string text;
};

struct RenderedPrompt {
  std::vector<PromptPiece> pieces;         // adjacent text pieces are never merged or split
  std::vector<ImageSource> image_sources;  // in the order of their placeholders
  // True when the prompt ends inside the DSML block (tool_choice required): the output parser
  // must start in its tool-call stage.
  bool ends_in_tool_calls = false;

  std::string text() const;
  // Byte ranges [begin, end) of the special pieces, ascending.
  std::vector<std::pair<size_t, size_t>> special_ranges() const;
};

// The DSML tags of an encoding: <｜DSML｜{block}>, <｜DSML｜{invoke} name="...">,
// <｜DSML｜{parameter} name="..." string="true|false"> (V4.1's carry a leading space).
struct DsmlTags {
  std::string_view block, invoke, parameter;
};
DsmlTags dsml_tags(PromptEncoding encoding);

RenderedPrompt render_prompt(const Conversation& conversation, PromptEncoding encoding,
                             const RenderOptions& options = RenderOptions::recipe());

// Special token spellings (bars are U+FF5C, the space-like mark U+2581).
inline constexpr const char* kBosToken = "<｜begin▁of▁sentence｜>";
inline constexpr const char* kEosToken = "<｜end▁of▁sentence｜>";
inline constexpr const char* kSystemToken = "<｜System｜>";
inline constexpr const char* kUserToken = "<｜User｜>";
inline constexpr const char* kAssistantToken = "<｜Assistant｜>";
inline constexpr const char* kThinkStartToken = "<think>";
inline constexpr const char* kThinkEndToken = "</think>";
inline constexpr const char* kLatestReminderToken = "<｜latest_reminder｜>";
inline constexpr const char* kDsmlToken = "｜DSML｜";
inline constexpr const char* kImageToken = "<｜image｜>";

}  // namespace deepinfer::recipe
