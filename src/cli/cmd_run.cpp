// deepinfer run: one prompt through the engine, tokens streamed to stdout, speeds to stderr (or
// one JSON object).
#include <chrono>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/chat_prompt.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/loading.h"
#include "cli/sampling_flags.h"

namespace deepinfer::cli {

namespace {

const char* kRunUsage = R"(usage: deepinfer run [-m MODEL] (-p TEXT | --prompt-tokens 1,2,3) [options]
  -p, --prompt TEXT      prompt text
  --prompt-tokens IDS    prompt as comma-separated token ids instead of text
  --chat                 wrap the prompt in the model's chat turns (its chat template)
  --system TEXT          system message for --chat
  --json                 print one JSON object instead of streaming text
)";

std::string usage() { return std::string(kRunUsage) + kSamplingFlagsUsage + engine_flags_usage(); }

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The prompt's ids: given, or the text encoded (in chat turns with --chat). Exit code 2 on error.
Result<std::vector<int32_t>> prompt_ids(const Args& args, const LoadedEngine& loaded, const std::string& path) {
  if (auto ids = args.get("--prompt-tokens")) return parse_token_list(*ids, "--prompt-tokens");
  if (!loaded.tokenizer) return invalid_argument(path + " carries no tokenizer; pass --prompt-tokens");
  const std::string text = *args.get("--prompt");
  if (!args.has("--chat")) {
    return loaded.tokenizer->encode(text, {.add_bos = loaded.tokenizer->add_bos_by_default()});
  }
  const ChatRenderer renderer(loaded.tokenizer, path);
  std::vector<recipe::Message> messages;
  if (auto system = args.get("--system"); system && !system->empty()) messages.push_back(recipe::Message::system(*system));
  messages.push_back(recipe::Message::user(text));
  auto ids = renderer.render(messages);
  if (!ids.ok()) return invalid_argument(path + ": --chat: " + ids.status().message());
  return ids;
}

}  // namespace

int run_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.takes_positional = false;
  spec.with_value = {"--prompt", "--prompt-tokens", "--system"};
  spec.switches = {"--chat", "--json", "--help"};
  spec.aliases = {{"-p", "--prompt"}, {"-h", "--help"}};
  add_sampling_flags(spec);
  add_engine_flags(spec);
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + usage(), 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (args.has("--prompt") == args.has("--prompt-tokens")) {
    return fail("give exactly one of -p TEXT or --prompt-tokens IDS\n" + usage(), 2);
  }
  auto sampling = parse_sampling_flags(args);
  if (!sampling.ok()) return fail(sampling.status().message(), 2);
  auto config = parse_engine_flags(args);
  if (!config.ok()) return fail(config.status().message(), 2);
  auto path = resolve_model_flag(args);
  if (!path.ok()) return fail(path.status().message());
  config->model_path = *path;

  auto loaded = load_engine(*config);
  if (!loaded.ok()) return fail(loaded.status().message());
  auto prompt = prompt_ids(args, *loaded, *path);
  if (!prompt.ok()) return fail(prompt.status().message(), 2);

  GenerationRequest request;
  request.prompt = *prompt;
  request.sampling = sampling->params;
  request.max_tokens = sampling->max_tokens;
  request.detokenize = loaded->tokenizer != nullptr;
  auto handle = loaded->engine->submit(std::move(request));
  if (!handle.ok()) {
    std::string message = handle.status().message();
    if (handle.status().code() == StatusCode::kOutOfRange) message += " (lower -n, or raise --kv-cache-tokens)";
    return fail(message, submit_exit_code(handle.status()));
  }

  const bool json = args.has("--json");
  std::vector<int32_t> generated;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  double first_token_ms = 0.0;
  Clock::time_point first_event{}, last_event{};
  int64_t n_sampled = 0;  // generated plus the stop token, if one ended it: one forward pass each
  while (std::optional<TokenEvent> e = (*handle)->next()) {
    last_event = Clock::now();
    if (n_sampled == 0) {
      first_event = last_event;
      first_token_ms = e->first_token_seconds * 1e3;
    }
    n_sampled += static_cast<int64_t>(e->tokens.size());
    generated.insert(generated.end(), e->tokens.begin(), e->tokens.end());
    text += e->text;
    if (!json && !e->text.empty()) {
      std::fwrite(e->text.data(), 1, e->text.size(), stdout);
      std::fflush(stdout);
    }
    if (e->finish != FinishReason::kNone) finish = e->finish;
    if (e->finish == FinishReason::kError) error = e->error;
    // The end-of-generation token that stopped it is not part of the output (its text is empty).
    if (e->stop_token >= 0 && !generated.empty()) generated.pop_back();
  }
  if (n_sampled == 0) first_event = last_event = Clock::now();
  const int64_t n_prompt = static_cast<int64_t>(prompt->size());
  const double prompt_tps = first_token_ms > 0 ? n_prompt / (first_token_ms / 1e3) : 0.0;
  // Decode speed counts forward passes: the first token came from the prompt's pass, and each
  // later one from a decode pass over the token before it.
  const double gen_ms = ms_between(first_event, last_event);
  const int64_t n_decode_passes = std::max<int64_t>(0, n_sampled - 1);
  const double gen_tps = n_decode_passes > 0 && gen_ms > 0 ? n_decode_passes / (gen_ms / 1e3) : 0.0;

  if (json) {
    nlohmann::json out;
    out["model"] = *path;
    out["prompt_token_ids"] = *prompt;
    out["generated_token_ids"] = generated;
    out["text"] = loaded->tokenizer ? nlohmann::json(text) : nlohmann::json(nullptr);
    out["finish_reason"] = finish_reason_name(finish);
    if (finish == FinishReason::kError) out["error"] = error;
    out["timings"] = {{"load_ms", loaded->load_ms},
                      {"prompt_tokens", n_prompt},
                      {"prompt_ms", first_token_ms},
                      {"prompt_tokens_per_second", prompt_tps},
                      {"generated_tokens", generated.size()},
                      {"generate_ms", gen_ms},
                      {"generate_tokens_per_second", gen_tps},
                      {"threads", engine_threads(*config)}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::fputs("\n", stdout);
    std::fprintf(stderr, "\nprompt: %lld tokens, %.1f tokens/s | generation: %zu tokens, %.1f tokens/s | load %.0f ms\n",
                 static_cast<long long>(n_prompt), prompt_tps, generated.size(), gen_tps, loaded->load_ms);
  }
  // A failed step is a runtime error: what was generated before it is printed, then the reason.
  if (finish == FinishReason::kError) return fail(error);
  return 0;
}

}  // namespace deepinfer::cli
