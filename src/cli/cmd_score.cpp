// deepinfer score: teacher-forced log-probabilities of given token ids, as JSON, through the
// engine: the prompt's logprobs give every position but the last, the one token the request
// samples (greedy) gives the last, and --logits-last asks the engine for that position's logits.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/loading.h"

namespace deepinfer::cli {

namespace {

const char* kScoreUsage = R"(usage: deepinfer score [-m MODEL] --tokens 1,2,3 [--top K] [--logits-last] --json
  Prints, for every position p, the log-probability of token p+1 under the model's next-token
  distribution at p, the argmax token id, and the top-K (id, logprob) pairs.
  --top K          pairs per position (default 5, at most 20)
  --logits-last    add the full logit vector of the last position
)";

constexpr int64_t kMaxTop = 20;  // the engine's limit on logprobs (the OpenAI API's)

// score's defaults: the KV cache in f32 (scores compare with reference implementations), and
// the prefix cache is not used by a request that asks for its prompt's logprobs anyway.
EngineConfig score_defaults() {
  EngineConfig config;
  config.kv_cache_dtype = KvCacheDtype::kF32;
  return config;
}

std::string usage() { return kScoreUsage + engine_flags_usage(score_defaults()); }

// One position's entry from the distribution there (`lp`: of the next token, with the top list).
nlohmann::json position_entry(size_t p, const std::vector<int32_t>& ids, const TokenLogprob& lp, int64_t k) {
  nlohmann::json entry;
  entry["position"] = p;
  entry["token"] = ids[p];
  const bool has_next = p + 1 < ids.size();
  entry["next_token"] = has_next ? nlohmann::json(ids[p + 1]) : nlohmann::json(nullptr);
  entry["next_logprob"] = has_next ? nlohmann::json(lp.logprob) : nlohmann::json(nullptr);
  entry["argmax"] = lp.top.front().token;
  nlohmann::json top_pairs = nlohmann::json::array();
  for (int64_t i = 0; i < k && i < static_cast<int64_t>(lp.top.size()); ++i) {
    top_pairs.push_back({lp.top[static_cast<size_t>(i)].token, lp.top[static_cast<size_t>(i)].logprob});
  }
  entry["top"] = std::move(top_pairs);
  return entry;
}

}  // namespace

int score_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.takes_positional = false;
  spec.with_value = {"--tokens", "--top"};
  spec.switches = {"--json", "--logits-last", "--help"};
  spec.aliases = {{"-h", "--help"}};
  add_engine_flags(spec);
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + usage(), 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  if (!args.has("--tokens")) return fail("--tokens is required\n" + usage(), 2);
  if (!args.has("--json")) return fail("score writes JSON only; pass --json", 2);
  auto tokens = parse_token_list(*args.get("--tokens"), "--tokens");
  if (!tokens.ok()) return fail(tokens.status().message(), 2);
  auto top = args.get_int("--top", 5);
  if (!top.ok()) return fail(top.status().message(), 2);
  if (*top < 0 || *top > kMaxTop) return fail("--top must be between 0 and 20, got " + std::to_string(*top), 2);
  auto config = parse_engine_flags(args, score_defaults());
  if (!config.ok()) return fail(config.status().message(), 2);
  auto path = resolve_model_flag(args);
  if (!path.ok()) return fail(path.status().message());
  config->model_path = *path;

  auto loaded = load_engine(*config);
  if (!loaded.ok()) return fail(loaded.status().message());
  const auto& ids = *tokens;
  const int64_t n_vocab = loaded->engine->n_vocab();
  const int64_t k = std::min<int64_t>(*top, n_vocab);
  GenerationRequest request;
  request.prompt = ids;
  request.max_tokens = 1;
  request.detokenize = false;
  request.sampling.temperature = 0.0f;
  // At least one pair, for the argmax, even when --top 0 prints none.
  request.sampling.logprobs = static_cast<int32_t>(std::max<int64_t>(k, 1));
  request.sampling.prompt_logprobs = request.sampling.logprobs;
  request.return_last_prompt_logits = args.has("--logits-last");
  auto handle = loaded->engine->submit(std::move(request));
  if (!handle.ok()) return fail(handle.status().message(), submit_exit_code(handle.status()));
  std::optional<TokenEvent> first = (*handle)->next();
  if (first && first->finish == FinishReason::kError) return fail(first->error);
  if (!first || first->logprobs.empty()) return fail("the engine ended the request without a token");
  while ((*handle)->next()) {
  }

  nlohmann::json positions = nlohmann::json::array();
  for (size_t p = 0; p + 1 < ids.size(); ++p) {
    const std::optional<TokenLogprob>& lp = first->prompt_logprobs[p + 1];
    if (!lp) return fail("the engine returned no logprob for prompt position " + std::to_string(p + 1));
    positions.push_back(position_entry(p, ids, *lp, k));
  }
  positions.push_back(position_entry(ids.size() - 1, ids, first->logprobs.front(), k));
  nlohmann::json out;
  out["model"] = *path;
  out["n_vocab"] = n_vocab;
  out["positions"] = std::move(positions);
  if (args.has("--logits-last")) out["logits_last"] = first->last_prompt_logits;
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace deepinfer::cli
