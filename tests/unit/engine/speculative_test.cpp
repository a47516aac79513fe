// Speculative decoding through the engine is lossless: greedy output equals the plain engine's
// token for token on the real models (SmolLM2-135M; Gemma 3 270M, sliding window), alone and
// in a batch of 32 with mixed methods and prefill chunks, with a grammar too; seeded sampling
// at temperature 1 equals plain seeded sampling (each kept token takes the same one draw from
// the same logits); and the sampled distribution matches plain sampling's (chi-square).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>

#include "deepinfer/engine.h"
#include "model/catalog.h"
#include "speculative_run.h"
#include "test_models.h"
#include "tokenizer/tokenizer_loading.h"

namespace deepinfer {
namespace {

using testing::expect_same_tokens;
using testing::run_all;
using Output = testing::SpecOutput;

// The fixed schedule verifies every draft: tests that count kept drafts use it, since what
// the confidence schedule verifies follows the step times it measures on this machine (a
// sanitizer build or a loaded runner may make every draft look too dear). drafters_test
// checks the schedule's decisions against given step costs.
EngineConfig config_for(const std::string& model, SpeculativeMethod method, int64_t max_batched = 2048) {
  EngineConfig cfg;
  cfg.speculative.schedule = SpeculativeSchedule::kFixed;
  cfg.model_path = model;
  cfg.threads = 2;
  cfg.kv_cache_tokens = 16384;
  cfg.max_num_batched_tokens = max_batched;
  cfg.speculative.method = method;
  return cfg;
}

std::vector<int32_t> encode(const std::string& model, const std::string& text) {
  auto tok = load_tokenizer(model, TokenizerPresence::kRequired);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return tok.ok() ? (*tok)->encode(text, {.add_bos = true}) : std::vector<int32_t>{};
}

// Texts whose continuations repeat what came before: what drafts are for.
const char* const kRepetitiveTexts[] = {
    "def area(w, h):\n    return w * h\n\ndef area(w, h):\n    return w * h\n\ndef area(",
    "Monday, Tuesday, Wednesday, Thursday, Friday. Monday, Tuesday, Wednesday, Thursday,",
    "The cat sat on the mat. The dog sat on the log. The cat sat on the",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,",
};

GenerationRequest greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.detokenize = false;
  return r;
}

int64_t accepted_of(const std::vector<Output>& outputs) {
  int64_t n = 0;
  for (const Output& o : outputs) n += o.n_accepted;
  return n;
}

TEST(SpeculativeEngine, GreedyOutputEqualsThePlainEnginesOnSmolLM2) {
  const std::string model = testing::real_model();
  if (model.empty()) return;
  std::vector<GenerationRequest> requests;
  for (const char* text : kRepetitiveTexts) requests.push_back(greedy(encode(model, text), 32));
  const std::vector<Output> plain = run_all(config_for(model, SpeculativeMethod::kNone), requests);
  for (SpeculativeMethod m : {SpeculativeMethod::kNgram, SpeculativeMethod::kSuffix}) {
    for (SpeculativeSchedule schedule : {SpeculativeSchedule::kFixed, SpeculativeSchedule::kConfidence}) {
      EngineConfig cfg = config_for(model, m);
      cfg.speculative.schedule = schedule;
      cfg.max_num_seqs = 1;  // one request at a time: each alone in its batch
      const std::vector<Output> alone = run_all(cfg, requests);
      const std::string what = std::string(speculative_method_name(m)) +
                               (schedule == SpeculativeSchedule::kFixed ? " fixed" : " confidence");
      expect_same_tokens(plain, alone, what);
      if (schedule == SpeculativeSchedule::kFixed) {
        EXPECT_GT(accepted_of(alone), 0) << what << ": no draft was ever accepted, nothing was tested";
      }
    }
  }
}

TEST(SpeculativeEngine, ABatchOf32WithMixedMethodsAndPrefillChunksEqualsThePlainEngine) {
  const std::string model = testing::real_model();
  if (model.empty()) return;
  std::vector<GenerationRequest> requests;
  std::mt19937 rng(3);
  for (int i = 0; i < 32; ++i) {
    std::string text = kRepetitiveTexts[i % 4];
    // Longer prompts than the step's budget of 96 tokens: their prefill is chunked while the
    // others decode and verify.
    for (int k = 0; k < i % 3; ++k) text += std::string(" ") + kRepetitiveTexts[(i + k + 1) % 4];
    GenerationRequest r = greedy(encode(model, text), 8 + static_cast<int64_t>(rng() % 17));
    static constexpr SpeculativeMethod kMethods[] = {SpeculativeMethod::kNone, SpeculativeMethod::kNgram,
                                                     SpeculativeMethod::kSuffix, SpeculativeMethod::kDraft};
    r.speculative_method = kMethods[i % 4];
    requests.push_back(std::move(r));
  }
  std::vector<GenerationRequest> plain_requests = requests;
  for (GenerationRequest& r : plain_requests) r.speculative_method.reset();
  const std::vector<Output> plain = run_all(config_for(model, SpeculativeMethod::kNone, 96), plain_requests);
  EngineStats stats;
  // The draft model is the target itself: the draft method's rows are checked, not its speed.
  EngineConfig mixed_cfg = config_for(model, SpeculativeMethod::kNone, 96);
  mixed_cfg.speculative.draft_model_path = model;
  const std::vector<Output> mixed = run_all(mixed_cfg, requests, &stats);
  expect_same_tokens(plain, mixed, "batch of 32");
  for (size_t i = 0; i < mixed.size(); i += 4) EXPECT_EQ(mixed[i].n_draft, 0) << "request " << i << " asked for none";
  // Every method verified and kept drafts, and the statistics add up.
  ASSERT_EQ(stats.speculative.methods.size(), 6u);  // ngram, suffix, grammar, draft, mtp, dspark
  int64_t drafted = 0, accepted = 0;
  for (const Output& o : mixed) {
    drafted += o.n_draft;
    accepted += o.n_accepted;
  }
  for (const SpeculativeMethodUsage& m : stats.speculative.methods) {
    if (m.method == "grammar" || m.method == "mtp" || m.method == "dspark") {
      EXPECT_EQ(m.draft_tokens, 0) << "no request is constrained, and SmolLM2 has no MTP or DSpark layers";
      continue;
    }
    EXPECT_GT(m.accepted_tokens, 0) << m.method;
    EXPECT_GT(m.mean_acceptance_length(), 1.0) << m.method;
  }
  EXPECT_EQ(stats.speculative.draft_tokens(), drafted);
  EXPECT_EQ(stats.speculative.accepted_tokens(), accepted);
  int64_t sized = 0;
  for (size_t k = 0; k < stats.speculative.verify_sizes.size(); ++k) {
    sized += static_cast<int64_t>(k) * stats.speculative.verify_sizes[k];
  }
  EXPECT_EQ(sized, drafted);
  EXPECT_EQ(stats.n_running, 0);
  EXPECT_EQ(stats.kv_blocks_used, 0);  // no block leaked by a rollback
}

TEST(SpeculativeEngine, AConstrainedRequestKeepsItsGrammarThroughVerification) {
  const std::string model = testing::real_model();
  if (model.empty()) return;
  GenerationRequest r = greedy(encode(model, "Say hello world four times:"), 40);
  r.sampling.constraint.kind = ConstraintKind::kRegex;
  r.sampling.constraint.text = "(hello world ){4}done";
  const std::vector<Output> plain = run_all(config_for(model, SpeculativeMethod::kNone), {r});
  const std::vector<Output> spec = run_all(config_for(model, SpeculativeMethod::kNgram), {r});
  expect_same_tokens(plain, spec, "regex");
  EXPECT_GT(spec[0].n_accepted, 0);
  EXPECT_EQ(spec[0].finish, FinishReason::kStop);
}

TEST(SpeculativeEngine, GreedyOutputEqualsThePlainEnginesOnGemma3WithItsSlidingWindow) {
  const KnownModel* known = find_known_model("gemma3-270m");
  const std::string model = known != nullptr ? cached_model_path(*known) : std::string();
  if (model.empty() || !std::filesystem::exists(model)) {
    GTEST_SKIP() << "gemma3-270m is not in the cache (scripts/setup pulls it)";
  }
  // Past Gemma 3's window of 512: rollbacks cross blocks that leave the window.
  std::string text;
  for (int i = 0; i < 40; ++i) text += "Item " + std::to_string(i % 10) + ": the red box is on the shelf. ";
  std::vector<GenerationRequest> requests = {greedy(encode(model, text), 32),
                                             greedy(encode(model, kRepetitiveTexts[1]), 32)};
  const std::vector<Output> plain = run_all(config_for(model, SpeculativeMethod::kNone), requests);
  const std::vector<Output> spec = run_all(config_for(model, SpeculativeMethod::kNgram), requests);
  expect_same_tokens(plain, spec, "gemma3 ngram");
  EXPECT_GT(accepted_of(spec), 0);
}

// Seeded sampling at temperature 1: verification draws each kept token exactly as plain
// decoding does (same logits, same sampler state, one draw), so the tokens are the same.
TEST(SpeculativeEngine, SeededSamplingEqualsPlainSeededSamplingTokenForToken) {
  const std::string model = testing::real_model();
  if (model.empty()) return;
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest r = greedy(encode(model, kRepetitiveTexts[i % 4]), 24);
    r.sampling.temperature = 1.0f;
    r.sampling.top_k = 20;
    r.sampling.frequency_penalty = 0.3f;  // penalties follow only the kept tokens
    r.sampling.seed = 17 + static_cast<uint64_t>(i);
    requests.push_back(std::move(r));
  }
  const std::vector<Output> plain = run_all(config_for(model, SpeculativeMethod::kNone), requests);
  for (SpeculativeMethod m : {SpeculativeMethod::kNgram, SpeculativeMethod::kSuffix}) {
    const std::vector<Output> spec = run_all(config_for(model, m), requests);
    expect_same_tokens(plain, spec, speculative_method_name(m));
    EXPECT_GT(accepted_of(spec), 0) << speculative_method_name(m);
  }
}

TEST(SpeculativeEngine, BatchInvariantModeRefusesSpeculation) {
  EngineConfig cfg = config_for(testing::tiny_model("llama_gqa_tied"), SpeculativeMethod::kNgram);
  cfg.batch_invariant = true;
  auto engine = Engine::create(cfg);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("mutually exclusive"), std::string::npos) << engine.status().message();

  cfg.speculative.method = SpeculativeMethod::kNone;
  auto plain = std::move(Engine::create(cfg)).value();
  GenerationRequest r = greedy({1, 2, 3}, 4);
  r.speculative_method = SpeculativeMethod::kSuffix;
  auto h = plain->submit(r);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("mutually exclusive"), std::string::npos);
}

TEST(SpeculativeEngine, TooManySpeculativeTokensIsAClearError) {
  EngineConfig cfg = config_for(testing::tiny_model("llama_gqa_tied"), SpeculativeMethod::kNgram);
  cfg.speculative.num_tokens = kMaxSpeculativeTokens + 1;
  auto engine = Engine::create(cfg);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("speculative tokens"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer
