// OpenAI Chat Completions responses from parser events (recipe-spec.md §2.8-2.9): the SSE chunk
// sequence of a streamed response and the body of a complete one, as deepseek-recipe 0.2.0
// writes them. One writer per response, used from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "recipe/output_parser.h"

namespace deepinfer::recipe {

// Why generation ended, as the backend reports it.
enum class BackendFinish { kStop, kLength, kContentFilter, kEndOfStream };

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t prompt_cache_hit_tokens = 0;
  int64_t completion_tokens = 0;
};

// "stop", "length", "content_filter" or "tool_calls": a parsed tool call turns a backend stop
// into "tool_calls"; a stop sequence or a missing finish is a plain "stop".
const char* chat_finish_reason(BackendFinish finish, bool has_tool_calls);

// "call_{k:02}_" + 24 random alphanumerics: 0.2.0's tool call ids, shared by the protocols.
std::string random_tool_call_id(size_t k);

struct ChatResponseSettings {
  std::string id;
  std::string model;
  int64_t created = 0;  // unix seconds
  std::optional<std::string> system_fingerprint;
  bool thinking = true;       // reasoning_content fields appear only in thinking mode
  bool include_usage = true;  // streamed chunks carry "usage": null until the last one
  // Id of the k-th tool call; the default is "call_{k:02}_" + 24 random alphanumerics.
  std::function<std::string(size_t)> tool_call_id;
};

class ChatCompletionWriter {
 public:
  explicit ChatCompletionWriter(ChatResponseSettings settings);

  // Streamed: one "chat.completion.chunk" JSON per call result entry (SSE: "data: " + json).
  std::string start_chunk();
  std::vector<std::string> event_chunks(const std::vector<OutputEvent>& events);
  std::string finish_chunk(BackendFinish finish, const Usage& usage);

  // Complete response: every event seen so far (through event_chunks or add_events).
  void add_events(const std::vector<OutputEvent>& events);
  std::string body(BackendFinish finish, const Usage& usage) const;

 private:
  std::string chunk(const std::string& delta_json, const char* finish_reason,
                    const std::string& usage_json) const;

  ChatResponseSettings settings_;
  ParsedOutput parsed_;
  std::vector<std::string> call_ids_;
};

}  // namespace deepinfer::recipe
