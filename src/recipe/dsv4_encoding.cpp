#include "recipe/dsv4_encoding.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "recipe/prompt_json.h"

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;

// Everything that differs between V4 and V4.1 in one place.
struct Dialect {
  bool v41;
  const char* block_tag;  // <｜DSML｜{block_tag}>
  const char* invoke_tag;
  const char* parameter_tag;
  FloatStyle tools_float_style;
  FloatStyle call_float_style;
};

constexpr Dialect kV4Dialect{false,       "tool_calls",          "invoke",
                             "parameter", FloatStyle::kRustPlus, FloatStyle::kRustPlus};
constexpr Dialect kV41Dialect{
    true, " calls", " invoke", " parameter", FloatStyle::kPython, FloatStyle::kPython};

// The effort table (recipe-spec.md §1.4). V4 shifts its texts one level down from the April
// reference: the "Absolute maximum" text is what recipe calls high.
struct EffortRow {
  ReasoningEffort effort;
  const char* v4_header;  // "" = no header
  int v41_level;          // 1..100
};

constexpr const char* kV4HighEffort =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";
constexpr const char* kV4MaxEffort =
    "Reasoning Effort: Beyond maximum \u2014 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively decompose the problem into its most fundamental components, trace every causal "
    "chain to its root, and resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple "
    "angles and are certain that no assumption remains unchecked and no error remains "
    "undiscovered.\n\n";

constexpr EffortRow kEffortTable[] = {
    {ReasoningEffort::kLow, "", 50},
    {ReasoningEffort::kHigh, kV4HighEffort, 75},
    {ReasoningEffort::kXhigh, kV4HighEffort, 75},
    {ReasoningEffort::kMax, kV4MaxEffort, 100},
};

std::string effort_header(const Conversation& conv, const Dialect& d, const RenderOptions& opts) {
  if (!conv.thinking_mode) return "";
  std::optional<ReasoningEffort> effort =
      conv.reasoning_effort ? conv.reasoning_effort : opts.default_effort;
  if (!effort) return "";
  for (const EffortRow& row : kEffortTable) {
    if (row.effort != *effort) continue;
    if (!d.v41) return row.v4_header;
    return "Reasoning Effort: " + std::to_string(row.v41_level) +
           " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
  }
  return "";
}

constexpr const char* kV4JsonModeText =
    "You are a helpful assistant designed to output JSON.\n## Response Format:\n\n"
    "Reply with JSON object ONLY.";
constexpr const char* kV41JsonModeText =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
    "{\"type\": \"json_object\"}";

// Appends pieces, keeping the special/text split.
class PieceWriter {
 public:
  void special(std::string_view token) { pieces_.push_back({true, std::string(token)}); }
  void text(std::string_view s) {
    if (s.empty()) return;
    if (!pieces_.empty() && !pieces_.back().special) {
      pieces_.back().text += s;
    } else {
      pieces_.push_back({false, std::string(s)});
    }
  }
  // Template text: the think tags and DSML markers inside it are real special tokens.
  void template_text(std::string_view s) {
    static constexpr std::string_view kMarkers[] = {kDsmlToken, kThinkStartToken, kThinkEndToken};
    size_t start = 0;
    while (start < s.size()) {
      size_t best = std::string_view::npos;
      std::string_view best_marker;
      for (std::string_view m : kMarkers) {
        size_t at = s.find(m, start);
        if (at < best) {
          best = at;
          best_marker = m;
        }
      }
      if (best == std::string_view::npos) break;
      text(s.substr(start, best - start));
      special(best_marker);
      start = best + best_marker.size();
    }
    text(s.substr(start));
  }
  // Content of a user or tool message: the first `num_images` image tokens are placeholders.
  void content_with_images(std::string_view s, size_t num_images) {
    size_t start = 0;
    for (size_t i = 0; i < num_images; ++i) {
      size_t at = s.find(kImageToken, start);
      if (at == std::string_view::npos) break;
      text(s.substr(start, at - start));
      special(kImageToken);
      start = at + std::string_view(kImageToken).size();
    }
    text(s.substr(start));
  }
  bool last_is(std::string_view special_token) const {
    return !pieces_.empty() && pieces_.back().special && pieces_.back().text == special_token;
  }
  std::vector<PromptPiece> take() { return std::move(pieces_); }

 private:
  std::vector<PromptPiece> pieces_;
};

std::string tool_schema_line(const ToolDefinition& tool, FloatStyle style) {
  Json line = Json::object();
  line["name"] = tool.name;
  line["description"] = tool.description.value_or("");
  Json params = Json::parse(tool.parameters_json, nullptr, /*allow_exceptions=*/false);
  line["parameters"] = params.is_discarded() ? Json() : params;
  return dump_prompt_json(line, style);
}

// The fixed text of the tools block before the schemas: its DSML and think markers are real
// special tokens (as in 0.2.0).
std::string tools_block_intro(const Dialect& d) {
  const std::string b = d.block_tag, i = d.invoke_tag, p = d.parameter_tag;
  const std::string dsml = kDsmlToken;
  std::string s =
      "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
      "invoke tools by writing a \"<" +
      dsml + b +
      ">\" block like the following:\n\n"
      "<" +
      dsml + b +
      ">\n"
      "<" +
      dsml + i +
      " name=\"$TOOL_NAME\">\n"
      "<" +
      dsml + p + " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + dsml + p +
      ">\n...\n"
      "</" +
      dsml + i +
      ">\n"
      "<" +
      dsml + i +
      " name=\"$TOOL_NAME2\">\n...\n"
      "</" +
      dsml + i +
      ">\n"
      "</" +
      dsml + b +
      ">\n\n"
      "String parameters should be specified as is and set `string=\"true\"`. For all other "
      "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
      "`string=\"false\"`.\n\n"
      "If thinking_mode is enabled (triggered by <think>), you MUST output your complete "
      "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
      "Otherwise, output directly after </think> with tool calls or final response.\n\n"
      "### Available Tool Schemas\n\n";
  return s;
}

// The tools block. The schema lines are the client's text (names, descriptions, schemas) and
// stay plain text, as in 0.2.0: a "<think>" or "｜DSML｜" in a tool description is not a token.
void write_tools_block(const std::vector<ToolDefinition>& tools, const Dialect& d,
                       PieceWriter& w) {
  w.template_text(tools_block_intro(d));
  for (size_t k = 0; k < tools.size(); ++k) {
    if (k) w.text("\n");
    w.text(tool_schema_line(tools[k], d.tools_float_style));
  }
  w.text(
      "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
      "tool calls.\n");
}

void write_tool_calls(const std::vector<ToolCall>& calls, const Dialect& d, PieceWriter& w) {
  auto tag = [&](std::string_view before, std::string_view after) {
    w.text(before);
    w.special(kDsmlToken);
    w.text(after);
  };
  tag("\n\n<", std::string(d.block_tag) + ">\n");
  for (size_t k = 0; k < calls.size(); ++k) {
    const ToolCall& call = calls[k];
    if (k) w.text("\n");
    tag("<", std::string(d.invoke_tag) + " name=\"");
    w.text(call.name);
    w.text("\">\n");
    Json args = Json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
    std::vector<std::pair<std::string, Json>> params;
    if (args.is_object()) {
      for (const auto& [key, value] : args.items()) params.emplace_back(key, value);
    } else {
      // Not a JSON object: the raw text travels as one string parameter.
      params.emplace_back("arguments", Json(call.arguments));
    }
    for (size_t j = 0; j < params.size(); ++j) {
      const auto& [key, value] = params[j];
      if (j && d.v41) w.text("\n");
      tag("<", std::string(d.parameter_tag) + " name=\"");
      w.text(key);
      w.text(value.is_string() ? "\" string=\"true\">" : "\" string=\"false\">");
      if (value.is_string()) {
        w.text(value.get_ref<const std::string&>());
      } else {
        w.text(dump_prompt_json(value, d.call_float_style));
      }
      tag("</", std::string(d.parameter_tag) + ">");
      if (!d.v41) w.text("\n");
    }
    if (d.v41) w.text("\n");
    tag("</", std::string(d.invoke_tag) + ">");
  }
  tag("\n</", std::string(d.block_tag) + ">");
}

// The messages in rendering order. The conversation's own messages are referred to, not
// copied (a long conversation is megabytes of text); only a merged system prompt is owned.
// Not movable: `msgs` may point into it.
struct Normalized {
  Normalized() = default;
  Normalized(const Normalized&) = delete;
  Normalized& operator=(const Normalized&) = delete;

  std::optional<Message> merged_system;          // V4: every system message in one
  Message empty_system = Message::system("");    // the system prompt extras need when none is
  std::vector<const Message*> msgs;
};

// V4's tool-result order (recipe 0.2.0, found by experiment; docs/recipe.md). Consecutive user
// messages count as one. After each assistant with N tool calls, taken at its position before
// any reordering, the next N messages (only when that many follow) are stably sorted: tool
// results without an id first, then tool results by id (byte order, not call order), then
// everything else (user, reminder, assistant).
void order_tool_results_v4(std::vector<const Message*>& msgs) {
  struct Unit {  // one message, or a run of consecutive user messages
    size_t begin, end;
  };
  std::vector<Unit> units;
  for (size_t k = 0; k < msgs.size(); ++k) {
    const bool joins = !units.empty() && msgs[k]->role == Role::kUser &&
                       msgs[units.back().begin]->role == Role::kUser;
    if (joins) {
      units.back().end = k + 1;
    } else {
      units.push_back({k, k + 1});
    }
  }
  auto rank = [&](const Unit& u) {
    const Message& m = *msgs[u.begin];
    if (m.role != Role::kTool) return 2;
    return m.tool_call_id ? 1 : 0;
  };
  auto before = [&](const Unit& a, const Unit& b) {
    const int ra = rank(a), rb = rank(b);
    if (ra != rb) return ra < rb;
    return ra == 1 && *msgs[a.begin]->tool_call_id < *msgs[b.begin]->tool_call_id;
  };
  const std::vector<Unit> original = units;
  for (size_t i = 0; i < original.size(); ++i) {
    const Message& m = *msgs[original[i].begin];
    const size_t n = m.role == Role::kAssistant ? m.tool_calls.size() : 0;
    if (n == 0 || i + n >= units.size()) continue;
    std::stable_sort(units.begin() + i + 1, units.begin() + i + 1 + n, before);
  }
  std::vector<const Message*> ordered;
  ordered.reserve(msgs.size());
  for (const Unit& u : units) {
    ordered.insert(ordered.end(), msgs.begin() + u.begin, msgs.begin() + u.end);
  }
  msgs = std::move(ordered);
}

// V4.1's tool-result order (recipe-spec.md §1.2, checked against recipe 0.2.0). In each run of
// user and tool messages, the tool results that carry an id are stably sorted by the position
// of that id in the tool calls of the latest assistant that made any (an unknown id counts as
// position 0); user messages and id-less results keep their slots.
void order_tool_results_v41(std::vector<const Message*>& msgs) {
  const std::vector<ToolCall>* calls = nullptr;
  std::vector<size_t> slots;
  std::vector<const Message*> results;
  auto in_run = [&](size_t k) {
    return k < msgs.size() && (msgs[k]->role == Role::kTool || msgs[k]->role == Role::kUser);
  };
  auto position = [&](const Message* m) -> size_t {
    for (size_t k = 0; k < calls->size(); ++k) {
      if ((*calls)[k].id == *m->tool_call_id) return k;
    }
    return 0;
  };
  for (size_t i = 0; i < msgs.size();) {
    if (msgs[i]->role == Role::kAssistant && !msgs[i]->tool_calls.empty()) {
      calls = &msgs[i]->tool_calls;
    }
    if (!in_run(i)) {
      ++i;
      continue;
    }
    size_t end = i;
    while (in_run(end)) ++end;
    if (calls) {
      slots.clear();
      results.clear();
      for (size_t k = i; k < end; ++k) {
        if (msgs[k]->role == Role::kTool && msgs[k]->tool_call_id) {
          slots.push_back(k);
          results.push_back(msgs[k]);
        }
      }
      std::stable_sort(results.begin(), results.end(), [&](const Message* a, const Message* b) {
        return position(a) < position(b);
      });
      for (size_t k = 0; k < slots.size(); ++k) msgs[slots[k]] = results[k];
    }
    i = end;
  }
}

// Step 1 of §1.2: system placement, tool-result order.
void normalize(const Conversation& conv, const Dialect& d, Normalized& n) {
  std::vector<const Message*>& out = n.msgs;
  out.reserve(conv.messages.size() + 1);
  if (!d.v41) {
    // V4 has no system token, so every system message is hoisted into the one system prompt.
    bool any_system = false;
    Message merged = Message::system("");
    for (const Message& m : conv.messages) {
      if (m.role != Role::kSystem) continue;
      any_system = true;
      if (m.content.empty()) continue;
      if (!merged.content.empty()) merged.content += "\n\n";
      merged.content += m.content;
      merged.image_sources.insert(merged.image_sources.end(), m.image_sources.begin(),
                                  m.image_sources.end());
    }
    if (any_system) {
      n.merged_system = std::move(merged);
      out.push_back(&*n.merged_system);
    }
    for (const Message& m : conv.messages) {
      if (m.role != Role::kSystem) out.push_back(&m);
    }
    order_tool_results_v4(out);
  } else {
    for (const Message& m : conv.messages) out.push_back(&m);
    order_tool_results_v41(out);
  }
}

// `last_user`: index of the last user message, or npos when there is none.
bool keeps_reasoning(const std::vector<const Message*>& msgs, size_t index, size_t last_user,
                     bool tools_defined, const RenderOptions& opts) {
  switch (opts.retention) {
    case ReasoningRetention::kKeepAll:
      return true;
    case ReasoningRetention::kDropAllUnlessTools:
      return tools_defined || msgs[index]->prefix;
    case ReasoningRetention::kDropBeforeLastUserUnlessTools:
      return tools_defined || last_user == std::string::npos || index > last_user;
  }
  return true;
}

// The think part after "<｜Assistant｜>": "<think>reasoning</think>", or "</think>" alone when
// the reasoning is not shown.
void write_think_part(const Message& m, size_t index, bool open_turn, bool keep,
                      const Conversation& conv, const Dialect& d, const RenderOptions& opts,
                      PieceWriter& w) {
  const bool bare = m.content.empty() && m.tool_calls.empty();
  if (d.v41 || !opts.v4_quirks) {
    if (conv.thinking_mode && index > 0 && keep) {
      w.special(kThinkStartToken);
      w.text(m.reasoning.value_or(""));
      // A continued turn with only reasoning is still thinking.
      if (!(open_turn && bare)) w.special(kThinkEndToken);
    } else {
      w.special(kThinkEndToken);
    }
    return;
  }
  // recipe 0.2.0's V4 encoder: an absent reasoning is not an empty one, and kept reasoning is
  // shown even with thinking off.
  if (index > 0 && keep && m.reasoning) {
    w.special(kThinkStartToken);
    w.text(*m.reasoning);
    if (!(open_turn && conv.thinking_mode && bare)) w.special(kThinkEndToken);
  } else if (open_turn && conv.thinking_mode && m.content.empty()) {
    // The model decides itself whether to think.
  } else {
    w.special(kThinkEndToken);
  }
}

}  // namespace

std::string RenderedPrompt::text() const {
  size_t size = 0;
  for (const PromptPiece& p : pieces) size += p.text.size();
  std::string s;
  s.reserve(size);
  for (const PromptPiece& p : pieces) s += p.text;
  return s;
}

std::vector<std::pair<size_t, size_t>> RenderedPrompt::special_ranges() const {
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t at = 0;
  for (const PromptPiece& p : pieces) {
    if (p.special) ranges.emplace_back(at, at + p.text.size());
    at += p.text.size();
  }
  return ranges;
}

RenderedPrompt render_prompt(const Conversation& conv, PromptEncoding encoding,
                             const RenderOptions& opts) {
  const Dialect& d = encoding == PromptEncoding::kDeepseekV41 ? kV41Dialect : kV4Dialect;
  Normalized normalized;
  normalize(conv, d, normalized);
  std::vector<const Message*>& msgs = normalized.msgs;

  const bool tools_active = !conv.tools.empty() && conv.tool_choice != ToolChoice::kNone;
  const bool json_mode = conv.response_format == ResponseFormat::kJsonObject;
  // Extras appended to the system prompt (the tools block, the JSON-mode text), which therefore
  // must exist.
  size_t extra_at = msgs.size();  // index of the system message that gets the extras
  if (tools_active || json_mode) {
    if (msgs.empty() || msgs[0]->role != Role::kSystem)
      msgs.insert(msgs.begin(), &normalized.empty_system);
    extra_at = 0;
  }

  size_t last_user = std::string::npos;
  for (size_t k = 0; k < msgs.size(); ++k) {
    if (msgs[k]->role == Role::kUser) last_user = k;
  }

  RenderedPrompt result;
  PieceWriter w;
  w.special(kBosToken);
  const std::string effort = effort_header(conv, d, opts);
  if (msgs.empty() && !d.v41) w.text(effort);
  for (size_t i = 0; i < msgs.size(); ++i) {
    const Message& m = *msgs[i];
    const Role prev = i ? msgs[i - 1]->role : Role::kSystem;
    if (i == 0 && (!effort.empty() || m.role == Role::kSystem)) {
      if (d.v41) w.special(kSystemToken);
      w.text(effort);
    }
    switch (m.role) {
      case Role::kSystem:
        if (d.v41 && i > 0) w.special(kSystemToken);
        w.content_with_images(m.content, m.image_sources.size());
        result.image_sources.insert(result.image_sources.end(), m.image_sources.begin(),
                                    m.image_sources.end());
        if (i == extra_at && tools_active) {
          w.text("\n\n");
          write_tools_block(conv.tools, d, w);
        }
        if (i == extra_at && json_mode) {
          w.text("\n\n");
          w.text(d.v41 ? kV41JsonModeText : kV4JsonModeText);
        }
        if (d.v41 && m.tools) {
          w.text("\n\n### Updated Tool Schemas\n\n");
          for (size_t k = 0; k < m.tools->size(); ++k) {
            if (k) w.text("\n");
            w.text(tool_schema_line((*m.tools)[k], d.tools_float_style));
          }
        }
        break;
      case Role::kUser:
        if (i > 0 && (prev == Role::kUser || prev == Role::kTool)) {
          // V4 joins only non-empty parts.
          if (d.v41 || prev == Role::kTool || (!m.content.empty() && !w.last_is(kUserToken))) {
            w.text("\n\n");
          }
        } else {
          w.special(kUserToken);
        }
        w.content_with_images(m.content, m.image_sources.size());
        result.image_sources.insert(result.image_sources.end(), m.image_sources.begin(),
                                    m.image_sources.end());
        break;
      case Role::kTool:
        if (i > 0 && (prev == Role::kTool || (d.v41 && prev == Role::kUser))) {
          w.text("\n\n");
        } else {
          w.special(kUserToken);
        }
        w.text("<tool_result>");
        w.content_with_images(m.content, m.image_sources.size());
        w.text("</tool_result>");
        result.image_sources.insert(result.image_sources.end(), m.image_sources.begin(),
                                    m.image_sources.end());
        break;
      case Role::kLatestReminder:
        w.special(kLatestReminderToken);
        w.text(m.content);
        break;
      case Role::kAssistant: {
        w.special(kAssistantToken);
        const bool open_turn = m.prefix && i + 1 == msgs.size();
        write_think_part(m, i, open_turn, keeps_reasoning(msgs, i, last_user, tools_active, opts),
                         conv, d, opts, w);
        w.text(m.content);
        if (!m.tool_calls.empty()) write_tool_calls(m.tool_calls, d, w);
        if (!open_turn) w.special(kEosToken);
        break;
      }
    }
  }
  const bool ends_open =
      !msgs.empty() && msgs.back()->role == Role::kAssistant && msgs.back()->prefix;
  const bool ends_with_assistant = !msgs.empty() && msgs.back()->role == Role::kAssistant;
  if (!ends_open && (opts.generation_prompt_after_assistant || !ends_with_assistant)) {
    w.special(kAssistantToken);
    w.special(conv.thinking_mode ? kThinkStartToken : kThinkEndToken);
    if (conv.tool_choice == ToolChoice::kRequired && tools_active) {
      w.text("\n\n<");
      w.special(kDsmlToken);
      w.text(std::string(d.block_tag) + ">\n");
      result.ends_in_tool_calls = true;
    }
  }
  result.pieces = w.take();
  return result;
}

DsmlTags dsml_tags(PromptEncoding encoding) {
  const Dialect& d = encoding == PromptEncoding::kDeepseekV4 ? kV4Dialect : kV41Dialect;
  return {d.block_tag, d.invoke_tag, d.parameter_tag};
}

}  // namespace deepinfer::recipe
