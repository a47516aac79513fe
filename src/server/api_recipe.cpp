#include "server/api_recipe.h"

#include <filesystem>

#include "model/catalog.h"
#include "recipe/request_fields.h"
#include "recipe/respond.h"
#include "server/api_common.h"
#include "tokenizer/tokenizer_loading.h"

namespace deepinfer::server {

namespace {

enum class Encoding { kDsv4, kDsv41, kModel };

// The fields /v1/render and /v1/parse share.
struct RecipeCall {
  recipe::Protocol protocol = recipe::Protocol::kChat;
  Encoding encoding = Encoding::kModel;
  std::string request;  // the request to render or answer, serialized
  std::string model;    // its "model", when a string
};

Result<RecipeCall> read_call(const Json& body) {
  const recipe::FieldReader f(body);
  RecipeCall call;
  DI_ASSIGN_OR_RETURN(std::string protocol, f.string_or("protocol", "chat"));
  auto parsed = recipe::parse_protocol(protocol);
  if (!parsed) return invalid_argument("'protocol' must be \"chat\", \"responses\" or \"messages\"");
  call.protocol = *parsed;
  DI_ASSIGN_OR_RETURN(std::string encoding, f.string_or("encoding", "model"));
  if (encoding == "dsv4") {
    call.encoding = Encoding::kDsv4;
  } else if (encoding == "dsv41") {
    call.encoding = Encoding::kDsv41;
  } else if (encoding != "model") {
    return invalid_argument("'encoding' must be \"dsv4\", \"dsv41\" or \"model\" (the served model's format)");
  }
  DI_ASSIGN_OR_RETURN(const Json* request, f.object("request"));
  if (request == nullptr) return invalid_argument("'request' is required: the protocol request, a JSON object");
  call.request = request->dump();
  if (request->contains("model") && (*request)["model"].is_string()) call.model = (*request)["model"].get<std::string>();
  return call;
}

// The options the adapter converts with: the served model's for its own format, else the
// defaults `deepinfer render --encoding` uses (thinking on, as DeepSeek's API). Either way the
// request's model name renders in the chosen format, whatever model it names.
recipe::ConversionOptions options_for(const RecipeCall& call, const PromptBuilder& prompts,
                                      const recipe::ConversionOptions& served) {
  recipe::ConversionOptions options = call.encoding == Encoding::kModel ? served : recipe::ConversionOptions{};
  if (call.model.empty()) return options;
  const recipe::ModelVersion version = call.encoding == Encoding::kDsv4    ? recipe::ModelVersion::kDeepseekV4Pro
                                       : call.encoding == Encoding::kDsv41 ? recipe::ModelVersion::kDeepseekV41Flash
                                                                           : prompts.model_version();
  options.model_versions.insert(options.model_versions.begin(), {call.model, version});
  return options;
}

const char* format_name(recipe::ModelVersion version) {
  switch (version) {
    case recipe::ModelVersion::kDeepseekV4Pro:
      return "DeepSeek V4";
    case recipe::ModelVersion::kDeepseekV41Flash:
      return "DeepSeek V4.1";
    case recipe::ModelVersion::kChatTemplate:
      return "chat template";
  }
  return "?";
}

std::string hex(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

void add_span(Json& spans, std::string_view text, bool special) {
  if (text.empty()) return;
  if (!special && !spans.empty() && !spans.back()["special"].get<bool>()) {
    spans.back()["text"] = spans.back()["text"].get<std::string>() + std::string(text);
    return;
  }
  spans.push_back({{"text", std::string(text)}, {"special", special}});
}

// A trusted template piece cut where the tokenizer found control tokens in it: their spelling
// is searched for in order from where the previous one ended.
void add_template_piece(Json& spans, const recipe::TemplatePiece& piece, const Tokenizer& tok) {
  if (!piece.trusted) {
    add_span(spans, piece.text, false);
    return;
  }
  size_t cursor = 0;
  for (int32_t id : tok.encode(piece.text, {.add_bos = false, .parse_special = true})) {
    if (!tok.is_control(id)) continue;
    const std::string spelling = tok.token_text(id);
    const size_t at = spelling.empty() ? std::string::npos : piece.text.find(spelling, cursor);
    if (at == std::string::npos) continue;
    add_span(spans, std::string_view(piece.text).substr(cursor, at - cursor), false);
    add_span(spans, spelling, true);
    cursor = at + spelling.size();
  }
  add_span(spans, std::string_view(piece.text).substr(cursor), false);
}

Json token_list(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  Json tokens = Json::array();
  for (int32_t id : ids) {
    const bool special = tok.is_control(id);
    // A control token decodes to nothing: its bytes are its spelling.
    const std::string bytes = special ? tok.token_text(id) : tok.token_piece(id);
    tokens.push_back({{"id", id}, {"text", tok.token_text(id)}, {"bytes", hex(bytes)}, {"special", special}});
  }
  return tokens;
}

void send_rejected(ResponseWriter& out, const Status& status) {
  Json reply;
  reply["rejected"] = {{"status", recipe::error_status(status)}, {"message", status.message()}};
  send_json(out, 200, reply.dump(-1, ' ', false, Json::error_handler_t::replace));
}

void send_bad_call(ResponseWriter& out, const Status& status) {
  send_error(out, ApiFlavor::kOpenAi, api_error_from(status));
}

// respond()'s SSE text as [{"event": name or null, "data": JSON, or the raw line ("[DONE]")}].
Json split_events(std::string_view sse) {
  Json events = Json::array();
  size_t begin = 0;
  while (begin < sse.size()) {
    size_t end = sse.find("\n\n", begin);
    if (end == std::string_view::npos) end = sse.size();
    Json event = {{"event", nullptr}, {"data", nullptr}};
    std::string_view block = sse.substr(begin, end - begin);
    while (!block.empty()) {
      const size_t eol = std::min(block.find('\n'), block.size());
      const std::string_view line = block.substr(0, eol);
      if (line.starts_with("event: ")) event["event"] = std::string(line.substr(7));
      if (line.starts_with("data: ")) {
        const std::string data(line.substr(6));
        Json parsed = Json::parse(data, nullptr, false);
        event["data"] = parsed.is_discarded() ? Json(data) : std::move(parsed);
      }
      block.remove_prefix(std::min(eol + 1, block.size()));
    }
    events.push_back(std::move(event));
    begin = end + 2;
  }
  return events;
}

}  // namespace

RecipeApi::RecipeApi(const PromptBuilder& prompts, recipe::ConversionOptions served)
    : prompts_(prompts), served_(std::move(served)) {}

std::shared_ptr<const Tokenizer> RecipeApi::deepseek_tokenizer(std::string* why) const {
  if (prompts_.is_deepseek()) return prompts_.shared_tokenizer();
  std::lock_guard lock(mutex_);
  if (!tried_cache_) {
    tried_cache_ = true;
    const std::string dir = model_cache_dir() + "/deepseek-v4-tokenizer";
    if (!std::filesystem::exists(dir + "/tokenizer.json")) {
      cache_error_ = "no token ids: the served model is not DeepSeek V4 and " + dir +
                     " is missing (scripts/fetch-deepseek-tokenizer puts it there)";
    } else if (auto loaded = load_tokenizer(dir, TokenizerPresence::kRequired); loaded.ok()) {
      cached_deepseek_ = std::move(loaded).value();
    } else {
      cache_error_ = "no token ids: " + loaded.status().message();
    }
  }
  *why = cache_error_;
  return cached_deepseek_;
}

void RecipeApi::render(const HttpRequest& request, ResponseWriter& out) const {
  auto body = body_or_answer(request, ApiFlavor::kOpenAi, out);
  if (!body) return;
  auto call = read_call(*body);
  if (!call.ok()) return send_bad_call(out, call.status());
  auto converted = recipe::convert_request(call->protocol, call->request, options_for(*call, prompts_, served_));
  if (!converted.ok()) return send_rejected(out, converted.status());

  Json reply;
  reply["format"] = format_name(converted->model_version);
  Json spans = Json::array();
  std::vector<int32_t> ids;
  std::shared_ptr<const Tokenizer> tok;
  if (call->encoding == Encoding::kModel && !prompts_.is_deepseek()) {
    // The served model's template: the ids are exactly those the generating endpoints submit.
    auto built = prompts_.build(*converted);
    if (!built.ok()) return send_rejected(out, built.status());
    auto pieces = render_template_pieces(*prompts_.chat_template(), prompts_.tokenizer(), converted->conversation);
    if (!pieces.ok()) return send_rejected(out, pieces.status());
    for (const recipe::TemplatePiece& piece : *pieces) add_template_piece(spans, piece, prompts_.tokenizer());
    add_span(spans, built->output_prefix, false);
    ids = std::move(built->ids);
    tok = prompts_.shared_tokenizer();
  } else {
    const recipe::RenderedPrompt rendered =
        recipe::render_prompt(converted->conversation, recipe::prompt_encoding(converted->model_version));
    for (const recipe::PromptPiece& piece : rendered.pieces) add_span(spans, piece.text, piece.special);
    std::string why;
    tok = deepseek_tokenizer(&why);
    if (tok) {
      auto encoded = deepseek_prompt_ids(*tok, rendered.pieces);
      if (!encoded.ok()) return send_rejected(out, encoded.status());
      ids = std::move(encoded).value();
    } else {
      reply["tokens_unavailable"] = why;
    }
  }
  std::string prompt;
  for (const Json& span : spans) prompt += span["text"].get<std::string>();
  reply["prompt"] = std::move(prompt);
  reply["spans"] = std::move(spans);
  reply["tokens"] = tok ? token_list(*tok, ids) : Json(nullptr);
  send_json(out, 200, reply.dump(-1, ' ', false, Json::error_handler_t::replace));
}

void RecipeApi::parse(const HttpRequest& request, ResponseWriter& out) const {
  auto body = body_or_answer(request, ApiFlavor::kOpenAi, out);
  if (!body) return;
  auto call = read_call(*body);
  if (!call.ok()) return send_bad_call(out, call.status());
  const recipe::FieldReader f(*body);
  auto output = f.string("output");
  if (!output.ok()) return send_bad_call(out, output.status());
  if (!output->has_value()) return send_bad_call(out, invalid_argument("'output' is required: what the model wrote"));
  auto chunk = f.integer({"chunk", 0, 1 << 20});
  if (!chunk.ok()) return send_bad_call(out, chunk.status());
  auto finish = f.string_or("finish", "stop");
  if (!finish.ok()) return send_bad_call(out, finish.status());

  recipe::RespondSettings settings;
  settings.chunk_chars = static_cast<size_t>(chunk->value_or(0));
  if (*finish == "length") {
    settings.finish = recipe::BackendFinish::kLength;
  } else if (*finish != "stop") {
    return send_bad_call(out, invalid_argument("'finish' must be \"stop\" or \"length\""));
  }
  recipe::ConversionOptions options = options_for(*call, prompts_, served_);
  auto whole = recipe::respond(call->protocol, call->request, **output, settings, options);
  if (!whole.ok()) return send_rejected(out, whole.status());
  settings.stream = true;
  auto streamed = recipe::respond(call->protocol, call->request, **output, settings, options);
  if (!streamed.ok()) return send_rejected(out, streamed.status());
  Json reply;
  reply["body"] = Json::parse(*whole, nullptr, false);
  reply["events"] = split_events(*streamed);
  send_json(out, 200, reply.dump(-1, ' ', false, Json::error_handler_t::replace));
}

}  // namespace deepinfer::server
