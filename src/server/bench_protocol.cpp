#include "server/bench_protocol.h"

#include <nlohmann/json.hpp>

namespace deepinfer::server::bench {

namespace {

using Json = nlohmann::json;

// Parses without exceptions: a discarded value means malformed JSON.
Json parse(std::string_view text) { return Json::parse(text.begin(), text.end(), nullptr, false); }

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

int64_t int_or(const Json& object, const char* key, int64_t fallback) {
  auto it = object.find(key);
  return it != object.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

std::string string_or_empty(const Json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

void read_openai_usage(const Json& data, StreamEvent& e) {
  auto usage = data.find("usage");
  if (usage == data.end() || !usage->is_object()) return;
  e.completion_tokens = int_or(*usage, "completion_tokens", -1);
  e.prompt_tokens = int_or(*usage, "prompt_tokens", -1);
}

StreamEvent decode_openai(Endpoint endpoint, const Json& data) {
  StreamEvent e;
  if (auto err = data.find("error"); err != data.end() && !err->is_null()) {
    e.kind = StreamEvent::Kind::kError;
    e.error = error_message(dump(data));
    return e;
  }
  read_openai_usage(data, e);
  auto choices = data.find("choices");
  if (choices != data.end() && choices->is_array() && !choices->empty() && (*choices)[0].is_object()) {
    e.kind = StreamEvent::Kind::kChoice;
    const Json& choice = (*choices)[0];
    if (endpoint == Endpoint::kCompletions) {
      e.text = string_or_empty(choice, "text");
    } else if (auto delta = choice.find("delta"); delta != choice.end() && delta->is_object()) {
      e.text = string_or_empty(*delta, "content");
      if (e.text.empty()) e.text = string_or_empty(*delta, "reasoning_content");  // a reasoning token counts
    }
  } else if (e.completion_tokens >= 0) {
    e.kind = StreamEvent::Kind::kUsage;
  }
  return e;
}

StreamEvent decode_anthropic(std::string_view name, const Json& data) {
  StreamEvent e;
  std::string type = string_or_empty(data, "type");
  if (type.empty()) type = std::string(name);
  if (type == "error") {
    e.kind = StreamEvent::Kind::kError;
    e.error = error_message(dump(data));
  } else if (type == "content_block_delta") {
    e.kind = StreamEvent::Kind::kChoice;
    if (auto delta = data.find("delta"); delta != data.end() && delta->is_object()) {
      e.text = string_or_empty(*delta, "text");
      if (e.text.empty()) e.text = string_or_empty(*delta, "thinking");
    }
  } else if (type == "message_delta") {
    if (auto usage = data.find("usage"); usage != data.end() && usage->is_object()) {
      e.kind = StreamEvent::Kind::kUsage;
      e.completion_tokens = int_or(*usage, "output_tokens", -1);
    }
  } else if (type == "message_start") {
    if (auto message = data.find("message"); message != data.end() && message->is_object()) {
      if (auto usage = message->find("usage"); usage != message->end() && usage->is_object()) {
        e.prompt_tokens = int_or(*usage, "input_tokens", -1);
      }
    }
  } else if (type == "message_stop") {
    e.kind = StreamEvent::Kind::kDone;
  }
  return e;
}

}  // namespace

const char* endpoint_path(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kCompletions: return "/v1/completions";
    case Endpoint::kChat: return "/v1/chat/completions";
    case Endpoint::kMessages: return "/v1/messages";
  }
  return "";
}

std::string encode_generation(Endpoint endpoint, const GenerationBody& body) {
  Json j = Json::object();
  j["model"] = body.model;
  if (endpoint == Endpoint::kCompletions) {
    std::string prompt;
    for (const Turn& t : body.turns) prompt += t.text;
    j["prompt"] = prompt;
  } else {
    Json messages = Json::array();
    for (const Turn& t : body.turns) {
      if (endpoint == Endpoint::kMessages && t.role == "system") {
        j["system"] = t.text;  // Anthropic takes the system prompt beside the messages
        continue;
      }
      messages.push_back({{"role", t.role}, {"content", t.text}});
    }
    j["messages"] = std::move(messages);
  }
  j["max_tokens"] = body.max_tokens;
  j["stream"] = true;
  if (body.include_usage && endpoint != Endpoint::kMessages) j["stream_options"] = {{"include_usage", true}};
  if (body.exact_output) {
    j["ignore_eos"] = true;
    j["min_tokens"] = body.max_tokens;
  }
  j["temperature"] = 0.0;
  return dump(j);
}

StreamEvent decode_stream_event(Endpoint endpoint, std::string_view event_name, std::string_view data) {
  std::string_view trimmed = data;
  while (!trimmed.empty() && (trimmed.back() == ' ' || trimmed.back() == '\r')) trimmed.remove_suffix(1);
  if (trimmed == "[DONE]") {
    StreamEvent done;
    done.kind = StreamEvent::Kind::kDone;
    return done;
  }
  Json j = parse(trimmed);
  if (j.is_discarded() || !j.is_object()) {
    StreamEvent e;
    e.kind = StreamEvent::Kind::kError;
    e.error = "malformed stream event: " + std::string(trimmed.substr(0, 200));
    return e;
  }
  return endpoint == Endpoint::kMessages ? decode_anthropic(event_name, j) : decode_openai(endpoint, j);
}

std::string error_message(std::string_view body) {
  Json j = parse(body);
  if (j.is_object()) {
    auto err = j.find("error");
    if (err != j.end() && err->is_string()) return err->get<std::string>();
    if (err != j.end() && err->is_object()) {
      std::string m = string_or_empty(*err, "message");
      if (!m.empty()) return m;
    }
    std::string m = string_or_empty(j, "message");
    if (!m.empty()) return m;
  }
  return std::string(body.substr(0, 200));
}

std::string encode_tokenize(TokenizeStyle style, std::string_view model, std::string_view text) {
  Json j = Json::object();
  if (style == TokenizeStyle::kPrompt) {
    j["model"] = model;
    j["prompt"] = text;
    j["add_special_tokens"] = false;
  } else {
    j["content"] = text;
    j["add_special"] = false;
  }
  return dump(j);
}

std::string encode_detokenize(std::string_view model, const std::vector<int32_t>& ids) {
  Json j = Json::object();
  if (!model.empty()) j["model"] = model;
  j["tokens"] = ids;
  return dump(j);
}

Result<std::vector<int32_t>> decode_tokenize(std::string_view body) {
  Json j = parse(body);
  if (!j.is_object()) return invalid_argument("tokenize: the answer is not a JSON object");
  auto tokens = j.find("tokens");
  if (tokens == j.end() || !tokens->is_array()) return invalid_argument("tokenize: the answer has no \"tokens\" array");
  std::vector<int32_t> ids;
  ids.reserve(tokens->size());
  for (const Json& t : *tokens) {
    // llama.cpp answers {"id", "piece"} objects when asked for pieces; take the id either way.
    const Json* id = &t;
    if (t.is_object() && t.contains("id")) id = &t["id"];
    if (!id->is_number_integer()) return invalid_argument("tokenize: a token that is not an integer id");
    ids.push_back(id->get<int32_t>());
  }
  return ids;
}

Result<std::string> decode_detokenize(std::string_view body) {
  Json j = parse(body);
  if (!j.is_object()) return invalid_argument("detokenize: the answer is not a JSON object");
  for (const char* key : {"prompt", "content"}) {
    auto it = j.find(key);
    if (it != j.end() && it->is_string()) return it->get<std::string>();
  }
  return invalid_argument("detokenize: the answer has neither \"prompt\" nor \"content\"");
}

Result<std::string> decode_first_model(std::string_view body) {
  Json j = parse(body);
  if (j.is_object()) {
    auto data = j.find("data");
    if (data != j.end() && data->is_array() && !data->empty() && (*data)[0].is_object()) {
      std::string id = string_or_empty((*data)[0], "id");
      if (!id.empty()) return id;
    }
  }
  return invalid_argument("/v1/models: no model id in the answer");
}

Result<TraceEntry> parse_trace_line(std::string_view line) {
  Json j = parse(line);
  if (!j.is_object()) return invalid_argument("not a JSON object");
  TraceEntry e;
  auto ts = j.find("timestamp");
  if (ts == j.end() || !ts->is_number() || ts->get<double>() < 0) return invalid_argument("\"timestamp\" must be a number >= 0");
  e.timestamp_ms = ts->get<double>();
  e.input_length = int_or(j, "input_length", -1);
  e.output_length = int_or(j, "output_length", -1);
  if (e.input_length < 1) return invalid_argument("\"input_length\" must be an integer >= 1");
  if (e.output_length < 1) return invalid_argument("\"output_length\" must be an integer >= 1");
  auto ids = j.find("hash_ids");
  if (ids == j.end() || !ids->is_array()) return invalid_argument("\"hash_ids\" must be an array of integers");
  for (const Json& id : *ids) {
    if (!id.is_number_integer()) return invalid_argument("\"hash_ids\" must be an array of integers");
    e.hash_ids.push_back(id.get<int64_t>());
  }
  return e;
}

}  // namespace deepinfer::server::bench
