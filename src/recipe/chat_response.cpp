#include "recipe/chat_response.h"

#include <nlohmann/json.hpp>
#include <random>

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;

}  // namespace

std::string random_tool_call_id(size_t k) {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  if (k < 10) id += '0';
  id += std::to_string(k) + "_";
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof kAlnum - 1)];
  return id;
}

namespace {

Json usage_json(const Usage& u) {
  Json j = Json::object();
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["prompt_tokens_details"] = {{"cached_tokens", u.prompt_cache_hit_tokens}};
  j["prompt_cache_hit_tokens"] = u.prompt_cache_hit_tokens;
  j["prompt_cache_miss_tokens"] = u.prompt_tokens - u.prompt_cache_hit_tokens;
  return j;
}

}  // namespace

const char* chat_finish_reason(BackendFinish finish, bool has_tool_calls) {
  switch (finish) {
    case BackendFinish::kLength:
      return "length";
    case BackendFinish::kContentFilter:
      return "content_filter";
    case BackendFinish::kStop:
      return has_tool_calls ? "tool_calls" : "stop";
    case BackendFinish::kEndOfStream:
      return "stop";
  }
  return "stop";
}

ChatCompletionWriter::ChatCompletionWriter(ChatResponseSettings settings)
    : settings_(std::move(settings)) {
  if (!settings_.tool_call_id) settings_.tool_call_id = random_tool_call_id;
}

std::string ChatCompletionWriter::chunk(const std::string& delta_json, const char* finish_reason,
                                        const std::string& usage_json) const {
  Json j = Json::object();
  j["id"] = settings_.id;
  j["object"] = "chat.completion.chunk";
  j["created"] = settings_.created;
  j["model"] = settings_.model;
  if (settings_.system_fingerprint) j["system_fingerprint"] = *settings_.system_fingerprint;
  Json choice = Json::object();
  choice["index"] = 0;
  choice["delta"] = Json::parse(delta_json);
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason ? Json(finish_reason) : Json();
  j["choices"] = Json::array({choice});
  if (!usage_json.empty()) {
    j["usage"] = Json::parse(usage_json);
  } else if (settings_.include_usage) {
    j["usage"] = nullptr;
  }
  return j.dump();
}

std::string ChatCompletionWriter::start_chunk() {
  Json delta = Json::object();
  delta["role"] = "assistant";
  if (settings_.thinking) {
    delta["content"] = nullptr;
    delta["reasoning_content"] = "";
  } else {
    delta["content"] = "";
  }
  return chunk(delta.dump(), nullptr, "");
}

std::vector<std::string> ChatCompletionWriter::event_chunks(
    const std::vector<OutputEvent>& events) {
  std::vector<std::string> out;
  for (const OutputEvent& e : events) {
    Json delta = Json::object();
    switch (e.kind) {
      case OutputEvent::Kind::kContent:
        delta["content"] = e.text;
        if (settings_.thinking) delta["reasoning_content"] = nullptr;
        break;
      case OutputEvent::Kind::kReasoning:
        delta["content"] = nullptr;
        delta["reasoning_content"] = e.text;
        break;
      case OutputEvent::Kind::kToolCall: {
        const size_t k = call_ids_.size();
        call_ids_.push_back(settings_.tool_call_id(k));
        Json call = Json::object();
        call["index"] = k;
        call["id"] = call_ids_.back();
        call["type"] = "function";
        call["function"] = {{"name", e.text}, {"arguments", ""}};
        delta["tool_calls"] = Json::array({call});
        break;
      }
      case OutputEvent::Kind::kToolArguments: {
        if (call_ids_.empty()) continue;  // the parser never sends arguments before a call
        Json call = Json::object();
        call["index"] = call_ids_.size() - 1;
        call["function"] = {{"arguments", e.text}};
        delta["tool_calls"] = Json::array({call});
        break;
      }
    }
    out.push_back(chunk(delta.dump(), nullptr, ""));
  }
  accumulate(events, parsed_);
  return out;
}

std::string ChatCompletionWriter::finish_chunk(BackendFinish finish, const Usage& usage) {
  Json delta = Json::object();
  delta["content"] = "";
  if (settings_.thinking) delta["reasoning_content"] = nullptr;
  return chunk(delta.dump(), chat_finish_reason(finish, !parsed_.tool_calls.empty()),
               usage_json(usage).dump());
}

void ChatCompletionWriter::add_events(const std::vector<OutputEvent>& events) {
  for (const OutputEvent& e : events) {
    if (e.kind == OutputEvent::Kind::kToolCall)
      call_ids_.push_back(settings_.tool_call_id(call_ids_.size()));
  }
  accumulate(events, parsed_);
}

std::string ChatCompletionWriter::body(BackendFinish finish, const Usage& usage) const {
  Json message = Json::object();
  message["role"] = "assistant";
  message["content"] = parsed_.content;
  if (settings_.thinking) message["reasoning_content"] = parsed_.reasoning;
  if (!parsed_.tool_calls.empty()) {
    Json calls = Json::array();
    for (size_t k = 0; k < parsed_.tool_calls.size(); ++k) {
      Json call = Json::object();
      call["index"] = k;
      call["id"] = k < call_ids_.size() ? call_ids_[k] : settings_.tool_call_id(k);
      call["type"] = "function";
      call["function"] = {{"name", parsed_.tool_calls[k].name},
                          {"arguments", parsed_.tool_calls[k].arguments}};
      calls.push_back(call);
    }
    message["tool_calls"] = calls;
  }
  Json choice = Json::object();
  choice["index"] = 0;
  choice["message"] = message;
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = chat_finish_reason(finish, !parsed_.tool_calls.empty());
  Json j = Json::object();
  j["id"] = settings_.id;
  j["object"] = "chat.completion";
  j["created"] = settings_.created;
  j["model"] = settings_.model;
  j["choices"] = Json::array({choice});
  j["usage"] = usage_json(usage);
  if (settings_.system_fingerprint) j["system_fingerprint"] = *settings_.system_fingerprint;
  return j.dump();
}

}  // namespace deepinfer::recipe
