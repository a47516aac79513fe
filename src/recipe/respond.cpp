#include "recipe/respond.h"

#include <vector>

#include "recipe/messages_response.h"
#include "recipe/output_parser.h"
#include "recipe/responses_response.h"

namespace deepinfer::recipe {
namespace {

// The parser's events for the whole output, chunk by chunk (one vector per fed chunk, the last
// one from finish()), and the number of chunks read before the output ended.
struct Parsed {
  std::vector<std::vector<OutputEvent>> batches;
  int64_t chunks_read = 0;
  std::optional<std::string> stop_sequence;
};

Parsed parse_output(const ParsingOptions& options, std::string_view output, size_t chunk_chars) {
  OutputParser parser(options);
  Parsed p;
  for (std::string_view chunk : split_chars(output, chunk_chars)) {
    if (parser.finished()) break;
    p.batches.push_back(parser.feed(chunk));
    ++p.chunks_read;
  }
  p.batches.push_back(parser.finish());
  p.stop_sequence = parser.stop_sequence();
  return p;
}

std::string chat(const ConversationRequest& req, const Parsed& p, const RespondSettings& s,
                 BackendFinish finish, const Usage& usage) {
  ChatResponseSettings cs;
  cs.id = s.id;
  cs.model = s.model.value_or(req.model);
  cs.created = s.created;
  cs.thinking = req.conversation.thinking_mode;
  cs.include_usage = req.include_usage;
  cs.tool_call_id = s.tool_call_id;
  ChatCompletionWriter writer(cs);
  if (!s.stream) {
    for (const auto& batch : p.batches) writer.add_events(batch);
    return writer.body(finish, usage);
  }
  auto frame = [](const std::string& json) { return "data: " + json + "\n\n"; };
  std::string out = frame(writer.start_chunk());
  for (const auto& batch : p.batches) {
    for (const std::string& chunk : writer.event_chunks(batch)) out += frame(chunk);
  }
  out += frame(writer.finish_chunk(finish, usage));
  return out + "data: [DONE]\n\n";
}

std::string messages(const ConversationRequest& req, const Parsed& p, const RespondSettings& s,
                     BackendFinish finish, const Usage& usage) {
  MessagesResponseSettings ms;
  ms.id = s.id;
  ms.model = s.model.value_or(req.model);
  ms.thinking = req.conversation.thinking_mode;
  ms.tool_call_id = s.tool_call_id;
  MessagesWriter writer(ms);
  std::string out;
  for (const MessagesEvent& e :
       writer.start({usage.prompt_tokens, usage.prompt_cache_hit_tokens, 0}))
    out += e.sse();
  for (const auto& batch : p.batches) {
    for (const MessagesEvent& e : writer.events(batch)) out += e.sse();
  }
  if (!s.stream) return writer.body(finish, usage, p.stop_sequence);
  for (const MessagesEvent& e : writer.finish(finish, usage, p.stop_sequence)) out += e.sse();
  return out;
}

Result<std::string> responses(const ConversationRequest& req, std::string_view body,
                              const Parsed& p, const RespondSettings& s, BackendFinish finish,
                              const Usage& usage) {
  ResponsesResponseSettings rs;
  rs.id = s.id;
  rs.model = s.model.value_or(req.model);
  DI_ASSIGN_OR_RETURN(rs.echo, responses_echo(body, req.model_version));
  rs.tool_call_id = s.tool_call_id;
  rs.clock = s.clock;
  ResponsesWriter writer(rs);
  std::string out;
  for (const ResponsesEvent& e : writer.start()) out += e.sse();
  for (const auto& batch : p.batches) {
    for (const ResponsesEvent& e : writer.events(batch)) out += e.sse();
  }
  if (!s.stream) return writer.body(finish, usage);
  for (const ResponsesEvent& e : writer.finish(finish, usage)) out += e.sse();
  return out;
}

}  // namespace

std::vector<std::string_view> split_chars(std::string_view text, size_t n) {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  if (n == 0) return {text};
  size_t begin = 0, chars = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool starts_char = (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
    if (starts_char && chars == n) {
      pieces.push_back(text.substr(begin, i - begin));
      begin = i;
      chars = 0;
    }
    chars += starts_char;
  }
  pieces.push_back(text.substr(begin));
  return pieces;
}

std::optional<Protocol> parse_protocol(std::string_view name) {
  if (name == "chat") return Protocol::kChat;
  if (name == "responses") return Protocol::kResponses;
  if (name == "messages") return Protocol::kMessages;
  return std::nullopt;
}

Result<ConversationRequest> convert_request(Protocol protocol, std::string_view body,
                                            const ConversionOptions& options) {
  switch (protocol) {
    case Protocol::kChat:
      return convert_chat_completions(body, options);
    case Protocol::kResponses:
      return convert_responses(body, options);
    case Protocol::kMessages:
      return convert_messages(body, options);
  }
  return internal_error("unknown protocol");
}

Result<std::string> respond(Protocol protocol, std::string_view request_body,
                            std::string_view output, const RespondSettings& settings,
                            const ConversionOptions& options) {
  DI_ASSIGN_OR_RETURN(ConversationRequest req, convert_request(protocol, request_body, options));
  const Parsed parsed =
      parse_output(req.parsing_options, output, settings.stream ? settings.chunk_chars : 0);
  Usage usage = settings.usage;
  if (usage.completion_tokens < 0) usage.completion_tokens = parsed.chunks_read;
  // A stop sequence ends the output before the backend's own finish.
  const BackendFinish finish = parsed.stop_sequence ? BackendFinish::kStop : settings.finish;
  switch (protocol) {
    case Protocol::kChat:
      return chat(req, parsed, settings, finish, usage);
    case Protocol::kMessages:
      return messages(req, parsed, settings, finish, usage);
    case Protocol::kResponses:
      return responses(req, request_body, parsed, settings, finish, usage);
  }
  return internal_error("unknown protocol");
}

}  // namespace deepinfer::recipe
