// Pieces every generating endpoint shares: reading the JSON body, the sampling knobs the
// recipe's adapters do not carry (n, top_k, logprobs, ...), admission, the wait loop over an
// engine request, and logprob JSON. Internal to src/server.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/engine.h"
#include "recipe/chat_response.h"
#include "recipe/output_parser.h"
#include "server/api_errors.h"
#include "server/api_metrics.h"
#include "server/api_prompt.h"
#include "server/http.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

using Json = nlohmann::ordered_json;

void send_json(ResponseWriter& out, int status, const std::string& body, const Headers& extra = {});
void send_error(ResponseWriter& out, ApiFlavor flavor, const ApiError& error, const Headers& extra = {});

// The body as a JSON object, or the 4xx to answer: 415 for a content type other than JSON,
// 400 for malformed JSON, invalid UTF-8 or a body that is not an object.
Result<Json> parse_json_body(const HttpRequest& request);
// parse_json_body, answering the error itself (415 or 400 in the path's shape) on failure.
std::optional<Json> body_or_answer(const HttpRequest& request, ApiFlavor flavor, ResponseWriter& out);

// body[key] when it is a boolean, else `fallback` (never throws on a wrong type).
bool bool_field(const Json& body, const char* key, bool fallback);

// Knobs read from the request body beyond what the recipe converts (vLLM's extra sampling
// parameters and OpenAI's n/logprobs). Validation errors are 400 messages.
struct SamplingExtras {
  int32_t n = 1;
  std::optional<uint64_t> seed;
  int32_t logprobs = -1;  // < 0: none; else the number of top alternatives (0 = only the token)
  int32_t top_k = 0;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  int64_t min_tokens = 0;
  bool ignore_eos = false;
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// Which protocol's fields read_sampling_extras reads: Chat Completions' logprobs (a boolean) and
// top_logprobs, Completions' logprobs (an integer count), or neither and no n (Responses and
// Messages, which have no such fields). Every other knob is read for every protocol.
enum class SamplingFields { kChat, kCompletions, kConversation };

Result<SamplingExtras> read_sampling_extras(const Json& body, SamplingFields fields);

// The form ApiServer::prepare calls: `chat_logprobs` true for Chat Completions, false for the
// other protocols it prepares (Responses, Messages).
inline Result<SamplingExtras> read_sampling_extras(const Json& body, bool chat_logprobs) {
  return read_sampling_extras(body, chat_logprobs ? SamplingFields::kChat : SamplingFields::kConversation);
}

// Fills request.sampling and n from the extras and the converted temperature and top_p.
void apply_sampling(const SamplingExtras& extras, std::optional<double> temperature, std::optional<double> top_p,
                    GenerationRequest& request);

recipe::BackendFinish backend_finish(FinishReason finish);

// prefix + 24 random alphanumerics: response ids ("chatcmpl-...", "msg_...").
std::string random_id(const char* prefix);
int64_t unix_now();

// One admitted generating request: counts toward the queue bound while it lives.
class Admission {
 public:
  Admission(std::atomic<int64_t>& in_flight, ApiMetrics& metrics, int64_t limit);
  ~Admission();
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;
  bool admitted() const { return admitted_; }

 private:
  std::atomic<int64_t>& in_flight_;
  ApiMetrics& metrics_;
  bool admitted_ = false;
};

// Answers 429 in the path's shape with Retry-After.
void send_overloaded(ResponseWriter& out, ApiFlavor flavor);

enum class PumpOutcome {
  kDone,        // every event was handed over
  kClientGone,  // the client vanished (or a write failed): the request was cancelled
  kFailed,      // the engine failed the request (a backend error): `failure` says why
};

// Waits on `handle` until its end, handing each event to on_event, checking the client every
// `poll` meanwhile. on_event returns false when it could not write (client gone). An event
// that ends with FinishReason::kError is not handed over: the request is cancelled (its other
// sequences included) and kFailed returned with the engine's message in *failure.
PumpOutcome pump_events(RequestHandle& handle, ResponseWriter& out, std::chrono::milliseconds poll,
                        RequestTimer& timer, const std::function<bool(const TokenEvent&)>& on_event,
                        std::string* failure);

// The answer to kFailed: a 500 in the path's shape, or, once a stream has started, the
// protocol's error event and the end of the stream: a data line holding the error object
// (Chat Completions, Completions) or, where the stream names its events (Responses,
// Messages), "event: error" with it.
enum class SseEvents { kUnnamed, kNamed };
void answer_engine_failure(ResponseWriter& out, ApiFlavor flavor, bool streaming, SseEvents events,
                           const std::string& message);

// Chat Completions' logprobs.content entries for one event's tokens.
void append_chat_logprobs(const Tokenizer& tokenizer, const std::vector<TokenLogprob>& logprobs, Json& content);

// Submits, answering the error itself (400 for a prompt beyond the context) when it fails.
std::shared_ptr<RequestHandle> submit_or_answer(Engine& engine, GenerationRequest request, ApiFlavor flavor,
                                                ResponseWriter& out);

// What one sequence's output parser is fed: the prompt's output prefix before the first text,
// and, for a forced call whose arguments object the prompt opened, the text up to where that
// object closes, then the call's end ("}\n</tool_call>"): a forced call ends there, like a
// grammar-constrained one would, instead of running on until max_tokens.
class OutputShaper {
 public:
  explicit OutputShaper(const BuiltPrompt& prompt);
  std::string shape(std::string_view text);
  // The forced call closed: the rest of the sequence is dropped and it finishes as a stop.
  bool done() const { return done_; }

 private:
  std::string prefix_;
  std::string closing_;  // empty: nothing is watched
  bool done_ = false;
  int depth_ = 0;  // of the object the model writes
  bool in_string_ = false;
  bool escape_ = false;
};

// One sequence's output as the Messages and Responses endpoints read it: engine events through
// the OutputShaper and the recipe's parser, usage from the events, and the early stop (a closed
// forced call, a finished JSON answer, the end of the tool-call block) that cancels the engine
// request instead of letting it run to max_tokens.
class SingleSequenceOutput {
 public:
  SingleSequenceOutput(const BuiltPrompt& prompt, const recipe::ParsingOptions& parsing);

  // The parser events `e` adds (none once the output ended). Cancels `handle` on an early stop.
  std::vector<recipe::OutputEvent> on_event(const TokenEvent& e, RequestHandle& handle);

  bool ended() const { return finish_ != FinishReason::kNone; }
  FinishReason finish() const { return finish_; }
  const std::optional<std::string>& stop_sequence() const { return stop_sequence_; }
  const recipe::Usage& usage() const { return usage_; }

 private:
  OutputShaper shaper_;
  recipe::OutputParser parser_;
  recipe::Usage usage_;
  FinishReason finish_ = FinishReason::kNone;
  std::optional<std::string> stop_sequence_;
};

// SSE framing of one data line (OpenAI style, no event name).
inline std::string sse_data(std::string_view json) {
  std::string s = "data: ";
  s += json;
  s += "\n\n";
  return s;
}

}  // namespace deepinfer::server
