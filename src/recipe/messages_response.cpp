#include "recipe/messages_response.h"

#include <nlohmann/json.hpp>

#include "recipe/prompt_json.h"

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;

Json usage_json(const Usage& u) {
  Json j = Json::object();
  j["input_tokens"] = u.prompt_tokens - u.prompt_cache_hit_tokens;
  j["cache_creation_input_tokens"] = 0;
  j["cache_read_input_tokens"] = u.prompt_cache_hit_tokens;
  j["output_tokens"] = u.completion_tokens;
  j["service_tier"] = "standard";
  return j;
}

MessagesEvent event(const std::string& type, Json j) { return {type, j.dump()}; }

}  // namespace

const char* messages_stop_reason(BackendFinish finish, bool has_tool_calls, bool stop_sequence) {
  if (stop_sequence) return "stop_sequence";
  switch (finish) {
    case BackendFinish::kLength:
      return "max_tokens";
    case BackendFinish::kContentFilter:
      return "refusal";
    case BackendFinish::kStop:
      return has_tool_calls ? "tool_use" : "end_turn";
    case BackendFinish::kEndOfStream:
      return "end_turn";
  }
  return "end_turn";
}

MessagesWriter::MessagesWriter(MessagesResponseSettings settings) : settings_(std::move(settings)) {
  if (!settings_.signature) settings_.signature = settings_.id;
  if (!settings_.tool_call_id) settings_.tool_call_id = random_tool_call_id;
}

void MessagesWriter::open(Block block, const std::string& tool_name,
                          std::vector<MessagesEvent>& out) {
  block_ = block;
  ++index_;
  Json content = Json::object();
  switch (block) {
    case Block::kThinking:
      content["type"] = "thinking";
      content["thinking"] = "";
      content["signature"] = "";
      body_blocks_.push_back({Block::kThinking, "", 0});
      break;
    case Block::kText:
      content["type"] = "text";
      content["text"] = "";
      body_blocks_.push_back({Block::kText, "", 0});
      break;
    case Block::kToolUse:
      call_ids_.push_back(settings_.tool_call_id(call_ids_.size()));
      content["type"] = "tool_use";
      content["id"] = call_ids_.back();
      content["name"] = tool_name;
      content["input"] = Json::object();
      body_blocks_.push_back({Block::kToolUse, "", call_ids_.size() - 1});
      break;
    case Block::kNone:
      return;
  }
  out.push_back(
      event("content_block_start",
            {{"type", "content_block_start"}, {"index", index_}, {"content_block", content}}));
  if (index_ == 0) out.push_back(event("ping", {{"type", "ping"}}));
}

void MessagesWriter::close(std::vector<MessagesEvent>& out) {
  if (block_ == Block::kNone) return;
  if (block_ == Block::kThinking) {
    out.push_back(
        event("content_block_delta",
              {{"type", "content_block_delta"},
               {"index", index_},
               {"delta", {{"type", "signature_delta"}, {"signature", *settings_.signature}}}}));
  }
  out.push_back(event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}}));
  block_ = Block::kNone;
}

std::vector<MessagesEvent> MessagesWriter::start(const Usage& prompt_usage) {
  Json message = Json::object();
  message["id"] = settings_.id;
  message["type"] = "message";
  message["role"] = "assistant";
  message["model"] = settings_.model;
  message["content"] = Json::array();
  message["stop_reason"] = nullptr;
  message["stop_sequence"] = nullptr;
  Usage u = prompt_usage;
  u.completion_tokens = 0;
  message["usage"] = usage_json(u);
  std::vector<MessagesEvent> out;
  out.push_back(event("message_start", {{"type", "message_start"}, {"message", message}}));
  // In thinking mode the thinking block opens at once, even if no reasoning follows.
  if (settings_.thinking) open(Block::kThinking, "", out);
  return out;
}

std::vector<MessagesEvent> MessagesWriter::events(const std::vector<OutputEvent>& events) {
  std::vector<MessagesEvent> out;
  for (const OutputEvent& e : events) {
    Json delta = Json::object();
    switch (e.kind) {
      case OutputEvent::Kind::kReasoning:
        if (block_ != Block::kThinking) {
          close(out);
          open(Block::kThinking, "", out);
        }
        delta = {{"type", "thinking_delta"}, {"thinking", e.text}};
        body_blocks_.back().text += e.text;
        break;
      case OutputEvent::Kind::kContent:
        if (block_ != Block::kText) {
          close(out);
          open(Block::kText, "", out);
        }
        delta = {{"type", "text_delta"}, {"text", e.text}};
        body_blocks_.back().text += e.text;
        break;
      case OutputEvent::Kind::kToolCall:
        close(out);
        open(Block::kToolUse, e.text, out);
        continue;
      case OutputEvent::Kind::kToolArguments:
        if (block_ != Block::kToolUse) continue;  // the parser never sends arguments outside a call
        delta = {{"type", "input_json_delta"}, {"partial_json", e.text}};
        break;
    }
    out.push_back(event("content_block_delta",
                        {{"type", "content_block_delta"}, {"index", index_}, {"delta", delta}}));
  }
  accumulate(events, parsed_);
  return out;
}

std::vector<MessagesEvent> MessagesWriter::finish(BackendFinish finish, const Usage& usage,
                                                  const std::optional<std::string>& stop_sequence) {
  std::vector<MessagesEvent> out;
  close(out);
  Json delta = Json::object();
  delta["stop_reason"] =
      messages_stop_reason(finish, !parsed_.tool_calls.empty(), stop_sequence.has_value());
  delta["stop_sequence"] = stop_sequence ? Json(*stop_sequence) : Json();
  out.push_back(event("message_delta",
                      {{"type", "message_delta"}, {"delta", delta}, {"usage", usage_json(usage)}}));
  out.push_back(event("message_stop", {{"type", "message_stop"}}));
  return out;
}

std::string MessagesWriter::body(BackendFinish finish, const Usage& usage,
                                 const std::optional<std::string>& stop_sequence) const {
  Json content = Json::array();
  for (const BodyBlock& b : body_blocks_) {
    Json block = Json::object();
    if (b.kind == Block::kThinking) {
      block["type"] = "thinking";
      block["thinking"] = b.text;
      block["signature"] = *settings_.signature;
    } else if (b.kind == Block::kText) {
      block["type"] = "text";
      block["text"] = b.text;
    } else {
      block["type"] = "tool_use";
      block["id"] = call_ids_[b.call];
      block["name"] = parsed_.tool_calls[b.call].name;
      // Arguments that are not a JSON object become an empty input.
      Json input = Json::parse(parsed_.tool_calls[b.call].arguments, nullptr, false);
      block["input"] = input.is_object() ? input : Json::object();
    }
    content.push_back(block);
  }
  Json j = Json::object();
  j["id"] = settings_.id;
  j["type"] = "message";
  j["role"] = "assistant";
  j["model"] = settings_.model;
  j["content"] = content;
  j["stop_reason"] =
      messages_stop_reason(finish, !parsed_.tool_calls.empty(), stop_sequence.has_value());
  j["stop_sequence"] = stop_sequence ? Json(*stop_sequence) : Json();
  j["usage"] = usage_json(usage);
  // Written by hand rather than by nlohmann: tool inputs keep serde's float spelling ("2.5e-7").
  return dump_compact_json(j);
}

}  // namespace deepinfer::recipe
