// Anthropic Messages responses from parser events (recipe-spec.md §2.10): the SSE event
// sequence of a streamed response and the body of a complete one, as deepseek-recipe 0.2.0
// writes them. One writer per response, used from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "recipe/chat_response.h"
#include "recipe/output_parser.h"

namespace deepinfer::recipe {

struct MessagesEvent {
  std::string type;  // the SSE event name: "message_start", "content_block_delta", ...
  std::string json;
  std::string sse() const { return "event: " + type + "\ndata: " + json + "\n\n"; }
};

struct MessagesResponseSettings {
  std::string id;
  std::string model;
  bool thinking = true;
  std::optional<std::string> signature;             // closes each thinking block; default: the id
  std::function<std::string(size_t)> tool_call_id;  // default as ChatResponseSettings
};

// "end_turn", "max_tokens", "stop_sequence", "tool_use" or "refusal".
const char* messages_stop_reason(BackendFinish finish, bool has_tool_calls, bool stop_sequence);

class MessagesWriter {
 public:
  explicit MessagesWriter(MessagesResponseSettings settings);

  std::vector<MessagesEvent> start(const Usage& prompt_usage);
  std::vector<MessagesEvent> events(const std::vector<OutputEvent>& events);
  std::vector<MessagesEvent> finish(BackendFinish finish, const Usage& usage,
                                    const std::optional<std::string>& stop_sequence);
  // The complete message, from everything passed to events().
  std::string body(BackendFinish finish, const Usage& usage,
                   const std::optional<std::string>& stop_sequence) const;

 private:
  enum class Block { kNone, kThinking, kText, kToolUse };
  void open(Block block, const std::string& tool_name, std::vector<MessagesEvent>& out);
  void close(std::vector<MessagesEvent>& out);

  MessagesResponseSettings settings_;
  Block block_ = Block::kNone;
  int index_ = -1;
  ParsedOutput parsed_;
  std::vector<std::string> call_ids_;
  // Content blocks in order, for the complete body: kind and index into parsed_ lists.
  struct BodyBlock {
    Block kind;
    std::string text;  // thinking / text
    size_t call = 0;   // tool_use
  };
  std::vector<BodyBlock> body_blocks_;
};

}  // namespace deepinfer::recipe
