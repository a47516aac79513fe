#include "recipe/conversation.h"

#include <utility>

namespace deepinfer::recipe {

Message Message::system(std::string content) {
  Message m;
  m.role = Role::kSystem;
  m.content = std::move(content);
  return m;
}

Message Message::user(std::string content, std::vector<ImageSource> images) {
  Message m;
  m.role = Role::kUser;
  m.content = std::move(content);
  m.image_sources = std::move(images);
  return m;
}

Message Message::assistant(std::string content, std::optional<std::string> reasoning,
                           std::vector<ToolCall> calls) {
  Message m;
  m.role = Role::kAssistant;
  m.content = std::move(content);
  m.reasoning = std::move(reasoning);
  m.tool_calls = std::move(calls);
  return m;
}

Message Message::tool(std::string content, std::string tool_call_id) {
  Message m;
  m.role = Role::kTool;
  m.content = std::move(content);
  m.tool_call_id = std::move(tool_call_id);
  return m;
}

Message Message::latest_reminder(std::string content) {
  Message m;
  m.role = Role::kLatestReminder;
  m.content = std::move(content);
  return m;
}

const char* role_name(Role role) {
  switch (role) {
    case Role::kSystem:
      return "system";
    case Role::kUser:
      return "user";
    case Role::kAssistant:
      return "assistant";
    case Role::kTool:
      return "tool";
    case Role::kLatestReminder:
      return "latest_reminder";
  }
  return "?";
}

const char* reasoning_effort_name(ReasoningEffort effort) {
  switch (effort) {
    case ReasoningEffort::kLow:
      return "low";
    case ReasoningEffort::kHigh:
      return "high";
    case ReasoningEffort::kXhigh:
      return "xhigh";
    case ReasoningEffort::kMax:
      return "max";
  }
  return "?";
}

std::optional<Role> parse_role(std::string_view name) {
  for (Role r :
       {Role::kSystem, Role::kUser, Role::kAssistant, Role::kTool, Role::kLatestReminder}) {
    if (name == role_name(r)) return r;
  }
  return std::nullopt;
}

std::optional<ReasoningEffort> parse_reasoning_effort(std::string_view name) {
  for (ReasoningEffort e : {ReasoningEffort::kLow, ReasoningEffort::kHigh, ReasoningEffort::kXhigh,
                            ReasoningEffort::kMax}) {
    if (name == reasoning_effort_name(e)) return e;
  }
  return std::nullopt;
}

std::optional<ToolChoice> parse_tool_choice(std::string_view name) {
  if (name == "auto") return ToolChoice::kAuto;
  if (name == "none") return ToolChoice::kNone;
  if (name == "required") return ToolChoice::kRequired;
  return std::nullopt;
}

std::optional<ImageDetail> parse_image_detail(std::string_view name) {
  if (name == "low") return ImageDetail::kLow;
  if (name == "high") return ImageDetail::kHigh;
  if (name == "original") return ImageDetail::kOriginal;
  if (name == "auto") return ImageDetail::kAuto;
  return std::nullopt;
}

}  // namespace deepinfer::recipe
