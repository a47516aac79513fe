// deepinfer run: one prompt, tokens streamed to stdout, speeds to stderr (or one JSON object).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <limits>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/chat_prompt.h"
#include "cli/commands.h"
#include "cli/loading.h"
#include "engine/sampler.h"

namespace deepinfer::cli {

namespace {

const char* kRunUsage = R"(usage: deepinfer run [-m MODEL] (-p TEXT | --prompt-tokens 1,2,3) [options]
  -m, --model MODEL      GGUF file, Hugging Face directory or known name (default: smollm2-135m-instruct)
  -p, --prompt TEXT      prompt text
  --prompt-tokens IDS    prompt as comma-separated token ids instead of text
  --chat                 wrap the prompt in the model's chat turns
  --system TEXT          system message for --chat
  -n, --max-tokens N     tokens to generate (default 256)
  --temp T               temperature, 0 = greedy (default 0.8)
  --top-k K              (default 40)    --top-p P (default 0.95)    --min-p P (default 0.05)
  --seed S               random seed
  --threads N            CPU threads (default: all cores)
  --ctx N                context size (default: min(model's, 4096))
  --ignore-eos           keep generating past end-of-generation tokens
  --json                 print one JSON object instead of streaming text
  --kv-cache-dtype T     KV cache elements: f16 (default, half the memory) or f32
)";

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

}  // namespace

int run_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.with_value = {"--model", "--prompt", "--prompt-tokens", "--system", "--max-tokens", "--temp", "--top-k",
                     "--top-p", "--min-p", "--seed", "--threads", "--ctx", "--kv-cache-dtype"};
  spec.switches = {"--chat", "--json", "--ignore-eos", "--help"};
  spec.aliases = {{"-m", "--model"}, {"-p", "--prompt"}, {"-n", "--max-tokens"}, {"-t", "--threads"},
                  {"-h", "--help"}, {"--temperature", "--temp"}};
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kRunUsage, 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(kRunUsage, stdout);
    return 0;
  }
  if (args.has("--prompt") == args.has("--prompt-tokens")) {
    return fail(std::string("give exactly one of -p TEXT or --prompt-tokens IDS\n") + kRunUsage, 2);
  }
  auto n_predict = args.get_int("--max-tokens", 256);
  auto threads = args.get_int("--threads", ThreadPool::default_threads());
  auto ctx_arg = args.get_int("--ctx", 0);
  auto temp = args.get_float("--temp", 0.8);
  auto top_k = args.get_int("--top-k", 40);
  auto top_p = args.get_float("--top-p", 0.95);
  auto min_p = args.get_float("--min-p", 0.05);
  auto seed = args.get_int("--seed", -1);
  for (const Status& s : {n_predict.status(), threads.status(), ctx_arg.status(), temp.status(), top_k.status(),
                          top_p.status(), min_p.status(), seed.status()}) {
    if (!s.ok()) return fail(s.message(), 2);
  }
  if (*n_predict < 0) return fail("-n must be >= 0", 2);
  if (*threads < 1 || *threads > 1024) return fail("--threads must be between 1 and 1024", 2);

  SamplingParams sampling;
  sampling.temperature = static_cast<float>(*temp);
  sampling.top_k = static_cast<int32_t>(*top_k);
  sampling.top_p = static_cast<float>(*top_p);
  sampling.min_p = static_cast<float>(*min_p);
  if (*seed >= 0) sampling.seed = static_cast<uint64_t>(*seed);
  // Checked before the model loads so a bad flag fails fast; no logit_bias here, so the
  // vocabulary size does not matter yet.
  if (Status valid = Sampler::validate(sampling, std::numeric_limits<int32_t>::max()); !valid.ok()) {
    return fail(valid.message(), 2);
  }

  auto loaded = load_model(args.get("--model"), static_cast<int>(*threads));
  if (!loaded.ok()) return fail(loaded.status().message());
  const Model& model = *loaded->model;
  auto sampler = Sampler::create(sampling, model.config().n_vocab, {});
  if (!sampler.ok()) return fail(sampler.status().message(), 2);
  const Tokenizer* tokenizer = loaded->tokenizer.get();

  std::vector<int32_t> prompt;
  if (auto ids = args.get("--prompt-tokens")) {
    auto parsed_ids = parse_token_list(*ids, "--prompt-tokens");
    if (!parsed_ids.ok()) return fail(parsed_ids.status().message(), 2);
    prompt = std::move(parsed_ids).value();
  } else {
    if (tokenizer == nullptr) return fail(loaded->path + " carries no tokenizer; pass --prompt-tokens", 2);
    const std::string text = *args.get("--prompt");
    if (args.has("--chat")) {
      auto ids = render_chat_prompt(*tokenizer, args.get("--system").value_or(""), text);
      if (!ids.ok()) return fail(loaded->path + ": --chat: " + ids.status().message());
      prompt = std::move(ids).value();
    } else {
      EncodeOptions options;
      options.add_bos = tokenizer->add_bos_by_default();
      prompt = tokenizer->encode(text, options);
    }
  }
  if (prompt.empty()) return fail("the prompt is empty", 2);

  const int64_t n_ctx = *ctx_arg > 0 ? *ctx_arg : std::min<int64_t>(model.config().n_ctx_train, 4096);
  if (static_cast<int64_t>(prompt.size()) + *n_predict > n_ctx) {
    return fail("prompt (" + std::to_string(prompt.size()) + " tokens) plus -n " + std::to_string(*n_predict) +
                    " exceeds the context of " + std::to_string(n_ctx) + " tokens (raise --ctx or lower -n)",
                2);
  }
  auto kv_dtype = parse_kv_cache_dtype(args.get("--kv-cache-dtype"));
  if (!kv_dtype.ok()) return fail(kv_dtype.status().message(), 2);
  auto context = model.new_context(n_ctx, kv_element_type(*kv_dtype));
  if (!context.ok()) return fail(context.status().message());
  InferenceContext& ctx = **context;

  const bool json = args.has("--json");
  const bool ignore_eos = args.has("--ignore-eos");
  std::vector<int32_t> generated;
  std::string text;
  std::optional<IncrementalDecoder> decoder;
  if (tokenizer) decoder.emplace(*tokenizer);
  auto emit = [&](const std::string& piece) {
    text += piece;
    if (!json && !piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
  };

  auto t_prompt = Clock::now();
  Status st = ctx.eval(prompt, LogitsMode::kLast);
  if (!st.ok()) return fail(st.message());
  const double prompt_ms = ms_since(t_prompt);

  auto t_gen = Clock::now();
  std::string finish_reason = "length";
  for (int64_t i = 0; i < *n_predict; ++i) {
    const int32_t token = sampler->sample(ctx.logits(0));
    if (!ignore_eos && tokenizer && tokenizer->is_end_of_generation(token)) {
      finish_reason = "stop";
      break;
    }
    generated.push_back(token);
    if (decoder) emit(decoder->push(token));
    if (i + 1 == *n_predict) break;  // the last token needs no forward pass
    st = ctx.eval(std::span<const int32_t>(&token, 1), LogitsMode::kLast);
    if (!st.ok()) return fail(st.message());
  }
  if (decoder) emit(decoder->finish());
  const double gen_ms = ms_since(t_gen);
  const double prompt_tps = prompt.size() / (prompt_ms / 1000.0);
  // Decode speed counts forward passes: the first generated token came from the prompt pass.
  const int64_t n_decode_passes = std::max<int64_t>(0, static_cast<int64_t>(generated.size()) - 1);
  const double gen_tps = n_decode_passes > 0 ? n_decode_passes / (gen_ms / 1000.0) : 0.0;

  if (json) {
    nlohmann::json out;
    out["model"] = loaded->path;
    out["prompt_token_ids"] = prompt;
    out["generated_token_ids"] = generated;
    out["text"] = tokenizer ? nlohmann::json(text) : nlohmann::json(nullptr);
    out["finish_reason"] = finish_reason;
    out["timings"] = {{"load_ms", loaded->load_ms},
                      {"prompt_tokens", prompt.size()},
                      {"prompt_ms", prompt_ms},
                      {"prompt_tokens_per_second", prompt_tps},
                      {"generated_tokens", generated.size()},
                      {"generate_ms", gen_ms},
                      {"generate_tokens_per_second", gen_tps},
                      {"threads", *threads}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::fputs("\n", stdout);
    std::fprintf(stderr, "\nprompt: %zu tokens, %.1f tokens/s | generation: %zu tokens, %.1f tokens/s | load %.0f ms\n",
                 prompt.size(), prompt_tps, generated.size(), gen_tps, loaded->load_ms);
  }
  return 0;
}

}  // namespace deepinfer::cli
