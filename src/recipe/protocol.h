// What every protocol adapter shares: conversion options, the converted request, and the
// error body a rejected request gets (recipe-spec.md §2.1-2.3, as deepseek-recipe 0.2.0 does it).
//
// An adapter returns Result<ConversationRequest>; a rejected request is a Status whose code is
// kInvalidArgument (HTTP 400) or kInternal (500) and whose message is the client-facing text.
// Plain values, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "deepinfer/status.h"
#include "recipe/conversation.h"
#include "recipe/dsv4_encoding.h"

namespace deepinfer::recipe {

// kChatTemplate: the served model is not DeepSeek V4 and renders its prompt with its own chat
// template (chat_template.h). Requests for it are converted by V4.1's rules with thinking off
// (forced off when asked for), and its output is parsed for <tool_call> JSON blocks
// (ToolCallFormat::kTaggedJson).
enum class ModelVersion { kDeepseekV4Pro, kDeepseekV41Flash, kChatTemplate };

enum class WebSearchBehavior { kDrop, kReject };

struct ConversionOptions {
  bool default_thinking_mode = true;
  WebSearchBehavior responses_web_search = WebSearchBehavior::kDrop;
  WebSearchBehavior messages_web_search = WebSearchBehavior::kReject;
  int64_t thinking_max_tokens_upper_bound = 393216;
  int64_t non_thinking_max_tokens_upper_bound = 393216;
  // Anthropic's API requires a Messages request's max_tokens ("max_tokens: Field required");
  // deepseek-recipe 0.2.0, which this library follows by default, accepts a request without
  // it. The server asks for Anthropic's rule (docs/server.md, "Request fields").
  bool messages_require_max_tokens = false;
  // Accepted request model names; any other name is rejected. A server of another model adds
  // {its served name, ModelVersion::kChatTemplate}.
  std::vector<std::pair<std::string, ModelVersion>> model_versions = {
      {"DeepSeek-V4-Pro", ModelVersion::kDeepseekV4Pro},
      {"DeepSeek-V4.1-Flash", ModelVersion::kDeepseekV41Flash},
  };
};

struct ConversationRequest {
  Conversation conversation;
  InferenceOptions inference_options;
  ParsingOptions parsing_options;
  ModelVersion model_version = ModelVersion::kDeepseekV41Flash;
  std::string model;
  bool stream = false;
  bool include_usage = true;  // Chat: !stream || stream_options.include_usage
};

// The DeepSeek encoding of a version (kChatTemplate has none: it gets V4.1's, unused).
inline PromptEncoding prompt_encoding(ModelVersion v) {
  return v == ModelVersion::kDeepseekV4Pro ? PromptEncoding::kDeepseekV4
                                           : PromptEncoding::kDeepseekV41;
}

// HTTP status of a rejected request: 500 for kInternal, else 400.
int error_status(const Status& status);
// {"error":{"message":...,"type":"invalid_request_error"|"internal_error","param":null,"code":...}}
std::string error_body(const Status& status);

// Chat Completions request JSON -> ConversationRequest (recipe-spec.md §2.4).
Result<ConversationRequest> convert_chat_completions(std::string_view body,
                                                     const ConversionOptions& options = {});

// OpenAI Responses request JSON -> ConversationRequest (recipe-spec.md §2.6).
Result<ConversationRequest> convert_responses(std::string_view body,
                                              const ConversionOptions& options = {});

// Anthropic Messages request JSON -> ConversationRequest (recipe-spec.md §2.5).
Result<ConversationRequest> convert_messages(std::string_view body,
                                             const ConversionOptions& options = {});

}  // namespace deepinfer::recipe
