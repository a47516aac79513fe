// The JSON of `deepinfer bench serve`, kept here so that the CLI carries native types only:
// request bodies for the three generation APIs and for /tokenize and /detokenize (vLLM's and
// deepinfer's {"prompt"} or llama.cpp's {"content"} form), the decoding of their streamed events
// and answers, and the lines of a Mooncake trace. Every decoder takes untrusted text and answers
// a Status naming what is wrong, never throws. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::server::bench {

enum class Endpoint { kCompletions, kChat, kMessages };

// "/v1/completions", "/v1/chat/completions", "/v1/messages".
const char* endpoint_path(Endpoint endpoint);

struct Turn {
  std::string role;  // "user", "assistant", "system"
  std::string text;
};

struct GenerationBody {
  std::string model;
  std::vector<Turn> turns;  // completions: the turns' texts joined, in order
  int64_t max_tokens = 16;
  // Ask for exactly max_tokens: ignore_eos and min_tokens (vLLM's, llama.cpp's and deepinfer's
  // extensions; a server that knows neither may stop early, and the output length is counted).
  bool exact_output = true;
  bool include_usage = true;  // stream_options.include_usage (OpenAI APIs)
};

std::string encode_generation(Endpoint endpoint, const GenerationBody& body);

// One streamed event, decoded. kChoice: an event that carries a choice (OpenAI) or a content
// delta (Anthropic), even with empty text: vLLM times every such event.
struct StreamEvent {
  enum class Kind { kOther, kChoice, kUsage, kDone, kError };
  Kind kind = Kind::kOther;
  std::string text;                 // the choice's text or delta content
  int64_t completion_tokens = -1;   // from a usage object, when the event has one
  int64_t prompt_tokens = -1;
  std::string error;                // kError: the server's message
};

// `event_name`: the SSE "event:" field (Anthropic names its events; OpenAI sends none).
StreamEvent decode_stream_event(Endpoint endpoint, std::string_view event_name, std::string_view data);

// The message of an error body ({"error": {"message"}} or {"error": "..."}, Anthropic's
// {"type": "error", "error": {...}}), else the body itself cut to 200 bytes.
std::string error_message(std::string_view body);

enum class TokenizeStyle { kPrompt, kContent };  // {"prompt": ...} (vLLM, deepinfer), {"content": ...} (llama.cpp)

std::string encode_tokenize(TokenizeStyle style, std::string_view model, std::string_view text);
std::string encode_detokenize(std::string_view model, const std::vector<int32_t>& ids);
Result<std::vector<int32_t>> decode_tokenize(std::string_view body);
// {"prompt": TEXT} (vLLM, deepinfer) or {"content": TEXT} (llama.cpp).
Result<std::string> decode_detokenize(std::string_view body);

// The first model's id in a /v1/models answer.
Result<std::string> decode_first_model(std::string_view body);

// One line of a Mooncake FAST'25 trace: {"timestamp" (ms), "input_length", "output_length",
// "hash_ids" (one per 512-token block of the prompt; equal ids, equal blocks)}.
struct TraceEntry {
  double timestamp_ms = 0;
  int64_t input_length = 0;
  int64_t output_length = 0;
  std::vector<int64_t> hash_ids;
};
Result<TraceEntry> parse_trace_line(std::string_view line);

}  // namespace deepinfer::server::bench
