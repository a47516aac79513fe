#include "server/api_server.h"

#include "recipe/dsv4_encoding.h"
#include "recipe/request_fields.h"

#include "server/api_common.h"
#include "server/structured_fields.h"
#include "server/web_ui.h"

namespace deepinfer::server {

ApiServer::ApiServer(ApiConfig config, Engine& engine, std::unique_ptr<PromptBuilder> prompts)
    : config_(std::move(config)),
      engine_(engine),
      prompts_(std::move(prompts)),
      metrics_(std::make_unique<ApiMetrics>(engine)),
      recipe_(std::make_unique<RecipeApi>(*prompts_, conversion_options())),
      created_(unix_now()) {}

std::vector<Route> ApiServer::routes() {
  auto bind = [this](void (ApiServer::*method)(const HttpRequest&, ResponseWriter&)) -> Handler {
    return [this, method](const HttpRequest& request, ResponseWriter& out) { (this->*method)(request, out); };
  };
  // Every body is JSON: the transport answers any other Content-Type with 415 before reading it.
  constexpr BodyType kJson = BodyType::kJson;
  std::vector<Route> routes = {
      {"POST", "/v1/chat/completions", bind(&ApiServer::chat_completions), kJson},
      {"POST", "/v1/completions", bind(&ApiServer::completions), kJson},
      {"POST", "/v1/responses", bind(&ApiServer::responses), kJson},
      {"POST", "/v1/messages", bind(&ApiServer::messages), kJson},
      {"POST", "/v1/messages/count_tokens", bind(&ApiServer::count_tokens), kJson},
      {"POST", "/tokenize", bind(&ApiServer::tokenize), kJson},
      {"POST", "/detokenize", bind(&ApiServer::detokenize), kJson},
      {"GET", "/v1/models", bind(&ApiServer::models)},
      {"GET", "/health", [](const HttpRequest&, ResponseWriter& out) { send_json(out, 200, "{\"status\":\"ok\"}"); }},
      {"GET", "/metrics",
       [this](const HttpRequest&, ResponseWriter& out) {
         out.send(200, "text/plain; version=0.0.4; charset=utf-8", metrics_->render());
       }},
      {"GET", "/v1/info", bind(&ApiServer::info)},
      {"POST", "/v1/render", [this](const HttpRequest& request, ResponseWriter& out) { recipe_->render(request, out); },
       kJson},
      {"POST", "/v1/parse", [this](const HttpRequest& request, ResponseWriter& out) { recipe_->parse(request, out); },
       kJson},
  };
  for (Route& route : web_ui_routes()) routes.push_back(std::move(route));
  return routes;
}

ErrorBody ApiServer::error_body() const {
  return [](const HttpRequest& request, int status, std::string_view message) {
    std::string text(message);
    if (status == 401) text = "Invalid API key: pass it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'.";
    ApiError error{status, text, status == 401 ? "invalid_api_key" : "", ""};
    return error_json(flavor_of_path(request.path), error);
  };
}

StreamCutEvent ApiServer::stream_cut_event() {
  return [](const HttpRequest& request, int status, std::string_view message) {
    const ApiFlavor flavor = flavor_of_path(request.path);
    const std::string json = error_json(flavor, {status, std::string(message), "", ""});
    // As answer_engine_failure ends a failed stream: Messages and Responses name their events,
    // Chat and Completions send bare data lines.
    const bool named = flavor == ApiFlavor::kAnthropic || request.path == "/v1/responses";
    return named ? "event: error\ndata: " + json + "\n\n" : sse_data(json);
  };
}

recipe::ConversionOptions ApiServer::conversion_options() const {
  recipe::ConversionOptions options;
  options.default_thinking_mode = prompts_->has_thinking_mode();
  if (prompts_->is_deepseek()) {
    // The served name renders in the checkpoint's format (V4 or V4.1, PromptBuilder).
    options.model_versions.insert(options.model_versions.begin(), {config_.served_model_name, prompts_->model_version()});
  } else {
    options.model_versions = {{config_.served_model_name, recipe::ModelVersion::kChatTemplate}};
  }
  return options;
}

bool ApiServer::check_model(const std::string& body_model, ApiFlavor flavor, ResponseWriter& out) const {
  for (const auto& [name, version] : conversion_options().model_versions) {
    if (name == body_model) return true;
  }
  send_error(out, flavor,
             {404, "The model `" + body_model + "` does not exist; this server serves `" + config_.served_model_name + "`.",
              "model_not_found", "model"});
  return false;
}

namespace {

// The protocol field that carries a conversation's structured output, for messages.
std::string protocol_format_field(const Json& body) {
  if (body.contains("response_format")) return "response_format";
  if (body.contains("text")) return "text.format";
  if (body.contains("output_config")) return "output_config.format";
  return "output_format";
}

// A forced tool call's grammar, else the protocol's format or a server field (not both). A
// forced call has no content for response_format to shape, so that one yields to it.
Result<Constraint> request_constraint(const PreparedRequest& p, const StructuredField& server) {
  if (p.prompt.constraint.kind != ConstraintKind::kNone && p.prompt.constraint_yields) {
    DI_ASSIGN_OR_RETURN(Constraint format,
                        merge_constraints(p.converted.inference_options.constraint, protocol_format_field(p.body), server));
    return format.kind != ConstraintKind::kNone ? format : p.prompt.constraint;
  }
  if (p.prompt.constraint.kind != ConstraintKind::kNone) {
    if (server.constraint.kind != ConstraintKind::kNone) {
      return invalid_argument("'" + server.field + "' cannot be combined with a forced tool call (tool_choice)");
    }
    return p.prompt.constraint;
  }
  return merge_constraints(p.converted.inference_options.constraint, protocol_format_field(p.body), server);
}

}  // namespace

std::optional<PreparedRequest> ApiServer::prepare(const HttpRequest& request, ApiFlavor flavor, Converter convert,
                                                  bool chat_logprobs, ResponseWriter& out) const {
  PreparedRequest p;
  {
    auto body = body_or_answer(request, flavor, out);
    if (!body) return std::nullopt;
    p.body = std::move(*body);
  }
  if (p.body.contains("model") && p.body["model"].is_string() && !check_model(p.body["model"].get<std::string>(), flavor, out)) {
    return std::nullopt;
  }
  auto extras = read_sampling_extras(p.body, chat_logprobs);
  if (!extras.ok()) {
    send_error(out, flavor, api_error_from(extras.status()));
    return std::nullopt;
  }
  auto structured = read_structured_field(p.body, /*with_response_format=*/false);
  if (!structured.ok()) {
    send_error(out, flavor, api_error_from(structured.status()));
    return std::nullopt;
  }
  // The recipe follows DeepSeek's API, which serves n = 1 only; n > 1 is the engine's.
  std::string adapter_body;
  if (p.body.contains("n")) {
    Json copy = p.body;
    copy.erase("n");
    adapter_body = copy.dump();
  }
  auto converted = convert(adapter_body.empty() ? std::string_view(request.body) : std::string_view(adapter_body),
                           conversion_options());
  if (!converted.ok()) {
    send_error(out, flavor, {recipe::error_status(converted.status()), converted.status().message(), "", ""});
    return std::nullopt;
  }
  p.converted = std::move(converted).value();
  auto prompt = prompts_->build(p.converted);
  if (!prompt.ok()) {
    send_error(out, flavor, api_error_from(prompt.status()));
    return std::nullopt;
  }
  p.prompt = std::move(prompt).value();

  GenerationRequest& g = p.generation;
  g.stop = p.converted.parsing_options.stop_sequences;
  prompts_->adjust_parsing(p.prompt, p.converted);
  g.prompt = p.prompt.ids;
  const int64_t room = engine_.max_context() - static_cast<int64_t>(g.prompt.size());
  g.max_tokens = p.converted.inference_options.max_tokens.value_or(std::max<int64_t>(1, room));
  apply_sampling(*extras, p.converted.inference_options.temperature, p.converted.inference_options.top_p, g);
  auto constraint = request_constraint(p, *structured);
  if (!constraint.ok()) {
    send_error(out, flavor, api_error_from(constraint.status()));
    return std::nullopt;
  }
  g.sampling.constraint = std::move(constraint).value();
  if (g.sampling.constraint.kind != ConstraintKind::kNone && prompts_->has_thinking_mode() &&
      p.converted.conversation.thinking_mode) {
    // The prompt ends in <think>: the reasoning is free, the grammar shapes the answer after it.
    g.sampling.constraint.start_after = recipe::kThinkEndToken;
  }
  return p;
}

void ApiServer::models(const HttpRequest&, ResponseWriter& out) {
  Json model;
  model["id"] = config_.served_model_name;
  model["object"] = "model";
  model["created"] = created_;
  model["owned_by"] = "deepinfer";
  model["max_model_len"] = engine_.max_context();
  Json list;
  list["object"] = "list";
  list["data"] = Json::array({model});
  send_json(out, 200, list.dump());
}

void ApiServer::tokenize(const HttpRequest& request, ResponseWriter& out) {
  auto body = body_or_answer(request, ApiFlavor::kOpenAi, out);
  if (!body) return;
  std::vector<int32_t> ids;
  if (body->contains("prompt") && (*body)["prompt"].is_string()) {
    auto add_special = recipe::FieldReader(*body).boolean("add_special_tokens");
    if (!add_special.ok()) {
      send_error(out, ApiFlavor::kOpenAi, api_error_from(add_special.status()));
      return;
    }
    EncodeOptions options;
    options.add_bos = add_special->value_or(true) && prompts_->tokenizer().add_bos_by_default();
    ids = prompts_->tokenizer().encode((*body)["prompt"].get<std::string>(), options);
  } else if (body->contains("messages")) {
    Json copy = *body;
    if (!copy.contains("model")) copy["model"] = config_.served_model_name;
    auto converted = recipe::convert_chat_completions(copy.dump(), conversion_options());
    if (!converted.ok()) {
      send_error(out, ApiFlavor::kOpenAi, {recipe::error_status(converted.status()), converted.status().message(), "", ""});
      return;
    }
    auto prompt = prompts_->build(*converted);
    if (!prompt.ok()) {
      send_error(out, ApiFlavor::kOpenAi, api_error_from(prompt.status()));
      return;
    }
    ids = prompt->ids;
  } else {
    send_error(out, ApiFlavor::kOpenAi, {400, "tokenize needs \"prompt\" (a string) or \"messages\"", "", "prompt"});
    return;
  }
  Json reply;
  reply["count"] = ids.size();
  reply["max_model_len"] = engine_.max_context();
  reply["tokens"] = ids;
  send_json(out, 200, reply.dump());
}

void ApiServer::detokenize(const HttpRequest& request, ResponseWriter& out) {
  auto body = body_or_answer(request, ApiFlavor::kOpenAi, out);
  if (!body) return;
  const Json* tokens = body->contains("tokens") ? &(*body)["tokens"] : nullptr;
  if (tokens == nullptr || !tokens->is_array()) {
    send_error(out, ApiFlavor::kOpenAi, {400, "detokenize needs \"tokens\", an array of token ids", "", "tokens"});
    return;
  }
  std::vector<int32_t> ids;
  const int64_t n_vocab = prompts_->tokenizer().n_vocab();
  for (size_t i = 0; i < tokens->size(); ++i) {
    const Json& t = (*tokens)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab) {
      send_error(out, ApiFlavor::kOpenAi,
                 {400, "tokens[" + std::to_string(i) + "] is not a token id in [0, " + std::to_string(n_vocab) + ")", "",
                  "tokens"});
      return;
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  Json reply;
  reply["prompt"] = prompts_->tokenizer().decode(ids);
  send_json(out, 200, reply.dump());
}

}  // namespace deepinfer::server
