// deepinfer render: a protocol request (stdin) -> the prompt the model sees, and its token ids.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/thread_pool.h"
#include "model/catalog.h"
#include "recipe/chat_template.h"
#include "recipe/dsv4_encoding.h"
#include "recipe/respond.h"
#include "server/api_prompt.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_loading.h"

namespace deepinfer::cli {
namespace {

const char* kUsage =
    R"(usage: deepinfer render --protocol chat|responses|messages [--encoding dsv4|dsv41|auto]
                       [-m MODEL] [--tokens [--threads N]] [--stats [--repeat R]] [--jsonl]
  Reads a request JSON on stdin and prints the prompt it becomes, byte for byte.
  --protocol P        chat (Chat Completions), responses (OpenAI Responses), messages (Anthropic)
  --encoding E        dsv4 / dsv41: the DeepSeek V4 / V4.1 prompt format, whatever model the
                      request names; auto (default): the request's model name decides
                      (DeepSeek-V4-Pro: dsv4, DeepSeek-V4.1-Flash: dsv41)
  -m, --model MODEL   render for this model (a known name, a GGUF file or a Hugging Face
                      directory): its chat template, or the DeepSeek format when its vocabulary
                      is DeepSeek V4's; the request may name any model. With --encoding auto a
                      checkpoint picks the DeepSeek format as `deepinfer serve` does: dsv4 for
                      a DeepSeek V4 model (model_type deepseek_v4), else dsv41
  --tokens            print {"prompt": ..., "token_ids": [...]} instead: ids from the -m model's
                      tokenizer, else from the DeepSeek V4 tokenizer in the model cache
                      (deepseek-v4-tokenizer, fetched by scripts/setup)
  --threads N         tokenize a DeepSeek prompt on N threads (default 1; the same ids)
  --jsonl             stdin holds one request per line: print one {"prompt", "token_ids"} or
                      {"error": message} line for each (the tokenizer is loaded once)
  --stats             print {"prompt_bytes", "tokens", "convert_ms", "render_ms", "tokenize_ms",
                      "total_ms"} (best of --repeat R runs, loading excluded) instead
)";

Result<std::shared_ptr<const Tokenizer>> deepseek_tokenizer() {
  const std::string dir = model_cache_dir() + "/deepseek-v4-tokenizer";
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    return not_found(dir + "/tokenizer.json is missing: run scripts/fetch-deepseek-tokenizer");
  }
  return load_tokenizer(dir, TokenizerPresence::kRequired);
}

struct Rendered {
  std::string text;
  std::vector<int32_t> ids;  // filled with --tokens
};

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// encode_segments over the pool's threads: the segments are cut into one run per thread just
// before a special token, where encoding starts afresh anyway, so the ids are those of one call.
Result<std::vector<int32_t>> encode_segments_on(const Tokenizer& tok,
                                                const std::vector<Segment>& segments,
                                                ThreadPool* pool) {
  const int n = pool ? pool->n_threads() : 1;
  if (n <= 1) return tok.encode_segments(segments, {.add_bos = false});
  size_t total = 0;
  for (const Segment& s : segments) total += s.text.size() + 1;
  std::vector<size_t> cuts = {0};
  size_t seen = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].token_id >= 0 && seen * n >= total * cuts.size() &&
        static_cast<int>(cuts.size()) < n) {
      cuts.push_back(i);
    }
    seen += segments[i].text.size() + 1;
  }
  cuts.push_back(segments.size());
  std::vector<Result<std::vector<int32_t>>> parts(cuts.size() - 1, std::vector<int32_t>{});
  pool->parallel_for(static_cast<int64_t>(parts.size()), [&](int, int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      std::span<const Segment> run(segments.data() + cuts[k], cuts[k + 1] - cuts[k]);
      parts[k] = tok.encode_segments(run, {.add_bos = false});
    }
  });
  std::vector<int32_t> ids;
  for (auto& part : parts) {
    if (!part.ok()) return part.status();
    ids.insert(ids.end(), part->begin(), part->end());
  }
  return ids;
}

struct Timing {
  double convert_ms = 0;
  double render_ms = 0;
  double tokenize_ms = 0;
};

Result<Rendered> render_deepseek(const recipe::ConversationRequest& req,
                                 recipe::PromptEncoding encoding, const Tokenizer* tok,
                                 ThreadPool* pool, Timing& timing) {
  auto start = std::chrono::steady_clock::now();
  const recipe::RenderedPrompt prompt = recipe::render_prompt(req.conversation, encoding);
  Rendered out{prompt.text(), {}};
  timing.render_ms = ms_since(start);
  if (!tok) return out;
  start = std::chrono::steady_clock::now();
  std::vector<Segment> segments;
  for (const recipe::PromptPiece& piece : prompt.pieces) {
    if (!piece.special) {
      segments.push_back(Segment::of_text(piece.text));
      continue;
    }
    std::optional<int32_t> id = tok->find_token(piece.text);
    if (!id) return invalid_argument("the tokenizer lacks the DeepSeek marker " + piece.text);
    segments.push_back(Segment::of_token(*id));
  }
  DI_ASSIGN_OR_RETURN(out.ids, encode_segments_on(*tok, segments, pool));
  timing.tokenize_ms = ms_since(start);
  return out;
}

// The model's own chat template, rendered without thinking, as the server does. Template text
// may spell control tokens; text from the request never becomes one.
Result<Rendered> render_template(const recipe::ConversationRequest& req, const Tokenizer& tok,
                                 bool with_ids, Timing& timing) {
  auto start = std::chrono::steady_clock::now();
  if (tok.chat_template().empty()) {
    return invalid_argument("the model carries no chat template and is not DeepSeek V4");
  }
  DI_ASSIGN_OR_RETURN(recipe::ChatTemplate tmpl, recipe::ChatTemplate::parse(tok.chat_template()));
  recipe::Conversation conversation = req.conversation;
  conversation.thinking_mode = false;
  recipe::ChatTemplateInput input = recipe::template_input(conversation, true);
  if (tok.bos_id() >= 0) input.bos_token = tok.token_text(tok.bos_id());
  if (tok.eos_id() >= 0) input.eos_token = tok.token_text(tok.eos_id());
  input.extra["enable_thinking"] = false;
  DI_ASSIGN_OR_RETURN(std::vector<recipe::TemplatePiece> pieces, tmpl.render_pieces(input));
  timing.render_ms = ms_since(start);
  start = std::chrono::steady_clock::now();
  Rendered out;
  for (const recipe::TemplatePiece& piece : pieces) {
    out.text += piece.text;
    if (!with_ids) continue;
    EncodeOptions options;
    options.parse_special = piece.trusted;
    const std::vector<int32_t> ids = tok.encode(piece.text, options);
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
  }
  timing.tokenize_ms = ms_since(start);
  return out;
}

struct RenderSetup {
  recipe::Protocol protocol;
  std::string encoding;  // "auto", "dsv4", "dsv41"
  bool deepseek;         // the DeepSeek format, else the tokenizer's chat template
  // The -m checkpoint's DeepSeek format (server::deepseek_version_of), which "auto" follows;
  // none without a checkpoint (then the request's model name decides).
  std::optional<recipe::ModelVersion> model_version;
  const Tokenizer* tok;  // null: no ids (DeepSeek format only)
  ThreadPool* pool;
  bool with_ids;
};

// One request body -> its prompt; a rejected request is an error naming its HTTP status.
Result<Rendered> render_request(const RenderSetup& setup, std::string_view body, Timing& timing) {
  const auto start = std::chrono::steady_clock::now();
  // An explicit format (or model) accepts whatever model name the request gives.
  recipe::ConversionOptions options;
  // Reading the model name costs a second parse of the body: only when the name matters.
  const bool name_matters = setup.encoding != "auto" || !setup.deepseek || setup.model_version.has_value();
  const nlohmann::json req_json = name_matters ? nlohmann::json::parse(body, nullptr, false) : nlohmann::json();
  const bool named =
      req_json.is_object() && req_json.contains("model") && req_json["model"].is_string();
  if (named) {
    recipe::ModelVersion version = setup.encoding == "dsv4"
                                       ? recipe::ModelVersion::kDeepseekV4Pro
                                       : recipe::ModelVersion::kDeepseekV41Flash;
    if (setup.encoding == "auto" && setup.model_version) version = *setup.model_version;
    if (!setup.deepseek) version = recipe::ModelVersion::kChatTemplate;
    options.model_versions.insert(options.model_versions.begin(),
                                  {req_json["model"].get<std::string>(), version});
  }
  auto req = recipe::convert_request(setup.protocol, body, options);
  if (!req.ok()) {
    return Status(req.status().code(), "request rejected (" +
                                           std::to_string(recipe::error_status(req.status())) +
                                           "): " + req.status().message());
  }
  timing.convert_ms = ms_since(start);
  if (setup.deepseek) {
    return render_deepseek(*req, recipe::prompt_encoding(req->model_version),
                           setup.with_ids ? setup.tok : nullptr, setup.pool, timing);
  }
  return render_template(*req, *setup.tok, setup.with_ids, timing);
}

}  // namespace

int render_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.takes_positional = false;
  spec.with_value = {"--protocol", "--encoding", "--model", "--threads", "--repeat"};
  spec.switches = {"--tokens", "--stats", "--jsonl", "--help"};
  spec.aliases = {{"-m", "--model"}, {"-h", "--help"}};
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kUsage, 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const auto protocol = recipe::parse_protocol(args.get("--protocol").value_or(""));
  if (!protocol)
    return fail(std::string("--protocol must be chat, responses or messages\n") + kUsage, 2);
  const std::string encoding = args.get("--encoding").value_or("auto");
  if (encoding != "auto" && encoding != "dsv4" && encoding != "dsv41") {
    return fail("--encoding must be dsv4, dsv41 or auto", 2);
  }
  auto threads = args.get_int("--threads", 1);
  auto repeat = args.get_int("--repeat", 1);
  if (!threads.ok()) return fail(threads.status().message(), 2);
  if (!repeat.ok()) return fail(repeat.status().message(), 2);
  if (*threads < 1 || *threads > 1024) return fail("--threads must be between 1 and 1024", 2);
  if (*repeat < 1) return fail("--repeat must be >= 1", 2);
  const bool with_ids = args.has("--tokens") || args.has("--stats") || args.has("--jsonl");

  std::shared_ptr<const Tokenizer> tok;
  std::optional<recipe::ModelVersion> model_version;
  if (auto model = args.get("--model")) {
    auto path = resolve_model_path(*model);
    if (!path.ok()) return fail(path.status().message());
    auto opened = load_tokenizer(*path, TokenizerPresence::kRequired);
    if (!opened.ok()) return fail(opened.status().message());
    tok = std::move(opened).value();
    // A tokenizer-only directory has no checkpoint to ask: the request's name decides.
    if (auto arch = server::model_architecture(*path); arch.ok()) model_version = server::deepseek_version_of(*arch);
  } else if (with_ids) {
    auto opened = deepseek_tokenizer();
    if (!opened.ok()) return fail(opened.status().message());
    tok = std::move(opened).value();
  }
  const bool deepseek = !tok || tok->find_token(recipe::kUserToken).has_value();

  ThreadPool pool(static_cast<int>(*threads));
  const RenderSetup setup{*protocol, encoding, deepseek, deepseek ? model_version : std::nullopt, tok.get(), &pool,
                          with_ids};
  if (args.has("--jsonl")) {
    // One request per line, one {"prompt", "token_ids"} or {"error"} line each.
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      Timing timing;
      auto one = render_request(setup, line, timing);
      const nlohmann::json out =
          one.ok() ? nlohmann::json{{"prompt", one->text}, {"token_ids", one->ids}}
                   : nlohmann::json{{"error", one.status().message()}};
      std::puts(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    }
    return 0;
  }
  const std::string body{std::istreambuf_iterator<char>(std::cin),
                         std::istreambuf_iterator<char>()};
  Result<Rendered> rendered = Rendered{};
  double best_total = 1e300;
  Timing best;
  for (int64_t r = 0; r < *repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    Timing timing;
    rendered = render_request(setup, body, timing);
    if (!rendered.ok()) return fail(rendered.status().message());
    if (ms_since(start) < best_total) {
      best_total = ms_since(start);
      best = timing;
    }
  }
  if (args.has("--stats")) {
    const nlohmann::json stats = {{"prompt_bytes", rendered->text.size()},
                                  {"tokens", rendered->ids.size()},
                                  {"convert_ms", best.convert_ms},
                                  {"render_ms", best.render_ms},
                                  {"tokenize_ms", best.tokenize_ms},
                                  {"total_ms", best_total},
                                  {"threads", *threads}};
    std::puts(stats.dump().c_str());
    return 0;
  }
  if (!args.has("--tokens")) {
    std::fwrite(rendered->text.data(), 1, rendered->text.size(), stdout);
    return 0;
  }
  const nlohmann::json out = {{"prompt", rendered->text}, {"token_ids", rendered->ids}};
  std::puts(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace deepinfer::cli
