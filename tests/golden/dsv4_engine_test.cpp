// DeepSeek V4 and V4.1 through the engine (tests/golden/dsv4_tiny, dsv41_tiny): continuous
// batching, chunked prefill, preemption with recompute, asynchronous scheduling, speculative
// decoding and prefix-cache hits with replay each give every request the greedy tokens the
// model gives it alone, and the golden prompt the reference's continuation (transformers for
// V4, NeMo Automodel for V4.1).
//
// The single-sequence path (Model::new_context) is the reference: dsv4_tiny_test.cpp and
// dsv41_tiny_test.cpp hold it to those. Both sides use an f32 KV cache, where the engine's
// batched passes and the reference agree to float rounding (the tiny models' greedy steps lead
// by 1e-2 or more).
#include "deepinfer/engine.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "model/model.h"
#include "backend/backend.h"
#include "core/thread_pool.h"
#include "golden_logits.h"
#include "tokenizer_load_options.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

// The model under test (the fixture's parameter): "dsv4_tiny" or "dsv41_tiny".
std::string g_model = "dsv4_tiny";

fs::path model_dir() { return fs::path(DEEPINFER_TEST_DATA) / "golden" / g_model; }

nlohmann::json golden() { return testing::read_golden(model_dir()); }

class DeepseekEngine : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { g_model = GetParam(); }
};

constexpr int64_t kMaxTokens = 24;

// The reference model, loaded once, on a backend of one thread: like the engines here (threads
// = 1), it then never waits on a second thread, which on a loaded 2-core machine costs more than
// this tiny model's arithmetic.
const Model& reference() {
  static ThreadPool pool(1);
  static std::unique_ptr<backend::Backend> backend =
      std::move(backend::create_backend("cpu", backend::BackendOptions{&pool})).value();
  static std::map<std::string, std::unique_ptr<Model>> models;
  std::unique_ptr<Model>& model = models[g_model];
  if (!model) {
    model = std::move(Model::load(model_dir().string(), *backend, testing::tokenizer_load_options(model_dir().string())))
                .value();
  }
  return *model;
}

// The model's greedy continuation of `prompt` alone, its first n tokens (n <= kMaxTokens);
// computed once per prompt for every test.
std::vector<int32_t> greedy_alone(const Model& model, const std::vector<int32_t>& prompt, int64_t n) {
  static std::map<std::pair<std::string, std::vector<int32_t>>, std::vector<int32_t>> done;
  std::vector<int32_t>& out = done[{g_model, prompt}];
  if (out.empty()) {
    auto ctx = std::move(model.new_context(static_cast<int64_t>(prompt.size()) + kMaxTokens, DType::kF32)).value();
    EXPECT_TRUE(ctx->eval(prompt, LogitsMode::kLast).ok());
    for (int64_t i = 0; i < kMaxTokens; ++i) {
      out.push_back(Sampler::argmax(ctx->logits(0)));
      if (i + 1 < kMaxTokens) {
        EXPECT_TRUE(ctx->eval(std::span<const int32_t>(&out.back(), 1), LogitsMode::kLast).ok());
      }
    }
  }
  return {out.begin(), out.begin() + n};
}

GenerationRequest greedy(const std::vector<int32_t>& prompt, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0.0f;
  r.sampling.ignore_eos = true;
  r.max_tokens = max_tokens;
  r.detokenize = false;
  return r;
}

std::vector<int32_t> collect(RequestHandle& h) {
  std::vector<int32_t> out;
  while (auto e = h.next()) out.insert(out.end(), e->tokens.begin(), e->tokens.end());
  return out;
}

// The golden prompt, its prefixes and random prompts, of lengths that end inside and at CSA (4),
// HCA (8) and sliding (8) windows; each generates long enough to close more of them.
std::vector<std::vector<int32_t>> prompts(const std::vector<int32_t>& golden_prompt, int64_t n_vocab) {
  std::vector<std::vector<int32_t>> out = {golden_prompt};
  for (size_t n : {5u, 17u, 32u}) out.emplace_back(golden_prompt.begin(), golden_prompt.begin() + n);
  std::mt19937 rng(16);
  std::uniform_int_distribution<int> tok(2, static_cast<int>(n_vocab) - 1);
  for (int n : {1, 11, 29, 46}) {
    std::vector<int32_t>& p = out.emplace_back(static_cast<size_t>(n));
    for (auto& t : p) t = tok(rng);
  }
  return out;
}

// A replay after a prefix hit that rebuilds the cold run's rows exactly: each layer widens what
// a position depends on by window - 1 = 7 positions, and a compressor's pending tokens reach a
// few positions back (V4: 6 layers and the CSA frontier's 2 x 4, 50 tokens; V4.1: 8 layers and
// a ratio-2 pair, 58); 64 rounds up. One window (the default) is the bounded, approximate
// replay (SWA bounded replay).
constexpr int64_t kExactReplay = 64;

EngineConfig v4_config() {
  EngineConfig cfg;
  cfg.model_path = model_dir().string();
  cfg.threads = 1;
  cfg.block_size = 8;  // whole HCA rows (8 tokens)
  cfg.kv_cache_dtype = KvCacheDtype::kF32;
  cfg.kv_cache_tokens = 2048;
  // Requests that share a start, or come back after a preemption, hit the prefix cache.
  cfg.swa_replay_tokens = kExactReplay;
  return cfg;
}

// All prompts at once through an engine made from `cfg`: each request's tokens equal the
// model's alone; returns the engine's statistics.
EngineStats check_engine(const EngineConfig& cfg, int64_t max_tokens) {
  const auto g = golden();
  const Model* model = &reference();
  const auto golden_prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  const auto all = prompts(golden_prompt, model->config().n_vocab);
  auto engine = std::move(Engine::create(cfg)).value();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const auto& p : all) handles.push_back(std::move(engine->submit(greedy(p, max_tokens))).value());
  for (size_t i = 0; i < all.size(); ++i) {
    const std::vector<int32_t> got = collect(*handles[i]);
    EXPECT_EQ(got, greedy_alone(*model, all[i], max_tokens)) << "request " << i << " (" << all[i].size() << " tokens)";
    if (i == 0) {
      const auto want = g["greedy"].get<std::vector<int32_t>>();
      EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + std::min<size_t>(got.size(), want.size())),
                std::vector<int32_t>(want.begin(), want.begin() + std::min<size_t>(got.size(), want.size())))
          << "the reference's continuation of the golden prompt";
    }
  }
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.kv_usage, 0.0) << "every block went back";
  return s;
}

TEST_P(DeepseekEngine, ContinuousBatchingGivesEachRequestsTokens) {
  for (const bool async : {true, false}) {
    SCOPED_TRACE(async ? "async scheduling" : "synchronous");
    EngineConfig cfg = v4_config();
    cfg.async_scheduling = async;
    const EngineStats s = check_engine(cfg, kMaxTokens);
    EXPECT_GT(s.decode_steps, 0);
  }
}

// Speculative decoding across compressed rows and the compressor's state. Drafts that close a
// CSA (4) or HCA (8) window and are then rejected leave rows that the next chunk recomputes
// (the random model's text seldom repeats: most n-gram and first-round suffix drafts fail);
// drafts accepted across those windows come from a second round of the same prompts, which
// the suffix trie of the first round's outputs predicts.
TEST_P(DeepseekEngine, SpeculativeDecodingGivesEachRequestsTokens) {
  for (const SpeculativeMethod m : {SpeculativeMethod::kNgram, SpeculativeMethod::kSuffix}) {
    SCOPED_TRACE(speculative_method_name(m));
    EngineConfig cfg = v4_config();
    cfg.speculative.method = m;
    cfg.speculative.schedule = SpeculativeSchedule::kFixed;
    cfg.max_num_seqs = 2;
    const EngineStats s = check_engine(cfg, kMaxTokens);
    EXPECT_GT(s.speculative.draft_tokens(), s.speculative.accepted_tokens());  // rejections happened
  }
  EngineConfig cfg = v4_config();
  cfg.speculative.method = SpeculativeMethod::kSuffix;
  cfg.speculative.schedule = SpeculativeSchedule::kFixed;
  cfg.enable_prefix_caching = false;  // each round computes its prompt cold
  const Model* model = &reference();
  const auto all = prompts(golden()["prompt_ids"].get<std::vector<int32_t>>(), model->config().n_vocab);
  auto engine = std::move(Engine::create(cfg)).value();
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < all.size(); ++i) {
      const std::vector<int32_t> got = collect(*std::move(engine->submit(greedy(all[i], kMaxTokens))).value());
      EXPECT_EQ(got, greedy_alone(*model, all[i], kMaxTokens)) << "round " << round << ", request " << i;
    }
  }
  EXPECT_GT(engine->stats().speculative.accepted_tokens(), static_cast<int64_t>(all.size()) * kMaxTokens / 2);
}

// V4.1's DSpark layers drafting in the engine: blocks of greedy drafts from the layers' own
// window of the target's features, verified; every request keeps the model's tokens alone
// (random weights: nearly every draft is rejected, which is what exercises the window rows the
// layers observed past a rejection), under both schedules and with async scheduling.
TEST(DeepseekV41Engine, DsparkDraftsGiveEachRequestsTokens) {
  g_model = "dsv41_tiny";
  for (const SpeculativeSchedule schedule : {SpeculativeSchedule::kFixed, SpeculativeSchedule::kConfidence}) {
    for (const bool async : {false, true}) {
      SCOPED_TRACE(std::string(schedule == SpeculativeSchedule::kFixed ? "fixed" : "confidence") +
                   (async ? ", async" : ""));
      EngineConfig cfg = v4_config();
      cfg.speculative.method = SpeculativeMethod::kDspark;
      cfg.speculative.schedule = schedule;
      cfg.async_scheduling = async;
      cfg.max_num_seqs = 3;
      const EngineStats s = check_engine(cfg, kMaxTokens);
      EXPECT_GT(s.speculative.draft_tokens(), 0);
      // Drafts that keep nothing back off (1, 2, 4 .. steps between proposals): over 24 tokens a
      // request proposes about 5 blocks of 5, not one a step (785 draft tokens without it).
      EXPECT_LE(s.speculative.draft_tokens(), 8 * 6 * 5);
      ::testing::Test::RecordProperty(std::string("accepted_of_drafted") + (async ? "_async" : "") +
                                          (schedule == SpeculativeSchedule::kFixed ? "_fixed" : "_confidence"),
                                      std::to_string(s.speculative.accepted_tokens()) + "/" +
                                          std::to_string(s.speculative.draft_tokens()));
    }
  }
}

TEST(DeepseekV41Engine, DraftLayersOfTheOtherKindAreOneClearError) {
  g_model = "dsv41_tiny";
  EngineConfig cfg = v4_config();
  cfg.speculative.method = SpeculativeMethod::kMtp;
  auto engine = Engine::create(cfg);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("--speculative-method dspark"), std::string::npos)
      << engine.status().message();
}

TEST_P(DeepseekEngine, ChunkedPrefillGivesTheSameTokens) {
  // Budgets of 3 and 7 tokens a step: chunks end inside every kind of window, and decodes of
  // some requests share steps with prefill chunks of others.
  for (const int64_t budget : {3, 7}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    EngineConfig cfg = v4_config();
    cfg.max_num_batched_tokens = budget;
    cfg.max_num_seqs = 3;
    check_engine(cfg, 12);
  }
}

TEST_P(DeepseekEngine, PreemptionAndRecomputeGiveTheSameTokens) {
  // 12 blocks of 8 per group: one request of 70 tokens fits, eight together do not, so they
  // preempt each other and are recomputed from the start.
  EngineConfig cfg = v4_config();
  cfg.kv_cache_tokens = 96;
  cfg.max_num_batched_tokens = 16;
  const EngineStats s = check_engine(cfg, kMaxTokens);
  EXPECT_GT(s.n_preemptions, 0) << "the cache was meant to be too small for all at once";
}


TEST(DeepseekV4EngineOnly, BlockSizeThatSplitsACompressedRowIsOneClearError) {
  g_model = "dsv4_tiny";
  EngineConfig cfg = v4_config();
  cfg.block_size = 4;  // HCA rows summarise 8 tokens
  auto engine = Engine::create(cfg);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("block_size 4"), std::string::npos) << engine.status().message();
  EXPECT_NE(engine.status().message().find("multiple of 8"), std::string::npos) << engine.status().message();
}

struct Answer {
  std::vector<int32_t> tokens;
  int64_t n_cached = 0;  // prompt tokens not computed: the replay start on a hit
};

Answer ask(Engine& engine, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  auto h = std::move(engine.submit(greedy(prompt, max_tokens))).value();
  Answer a;
  bool first = true;
  while (auto e = h->next()) {
    if (first) a.n_cached = e->n_cached_prompt_tokens;
    first = false;
    a.tokens.insert(a.tokens.end(), e->tokens.begin(), e->tokens.end());
  }
  return a;
}

std::vector<int32_t> random_prompt(int n, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> tok(2, static_cast<int>(n_vocab) - 1);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = tok(rng);
  return p;
}

// Where a hit on `n_prompt` tokens replays from: the whole blocks before the last token, less
// the replay, rounded down to a block.
int64_t replay_start(int64_t n_prompt, int64_t replay) {
  const int64_t block = 8, hit = (n_prompt - 1) / block * block;
  return std::max<int64_t>(0, hit - replay) / block * block;
}

// Prompts long enough that a hit keeps many compressed rows (CSA every 4 tokens, HCA every 8)
// and replays from well inside the prompt: the prompt again, then a longer one sharing it.
// Returns the prompts whose hit tokens differ from the model's alone.
std::vector<int> hit_mismatches(int64_t replay_tokens) {
  const Model* model = &reference();
  EngineConfig cfg = v4_config();
  cfg.swa_replay_tokens = replay_tokens;
  cfg.max_num_batched_tokens = 32;  // the prompts and the replays prefill in chunks
  auto engine = std::move(Engine::create(cfg)).value();
  const int64_t replay = replay_tokens > 0 ? replay_tokens : 8;  // 0: one window (8)
  std::vector<int> mismatches;
  for (int n : {100, 131, 160}) {
    SCOPED_TRACE("prompt of " + std::to_string(n));
    const auto prompt = random_prompt(n, model->config().n_vocab, static_cast<uint32_t>(n));
    const auto alone = greedy_alone(*model, prompt, 16);
    const Answer cold = ask(*engine, prompt, 16);
    EXPECT_EQ(cold.n_cached, 0);
    EXPECT_EQ(cold.tokens, alone) << "cold";
    const Answer again = ask(*engine, prompt, 16);
    EXPECT_EQ(again.n_cached, replay_start(n, replay));
    auto longer = prompt;
    const auto tail = random_prompt(13, model->config().n_vocab, static_cast<uint32_t>(1000 + n));
    longer.insert(longer.end(), tail.begin(), tail.end());
    const Answer extended = ask(*engine, longer, 16);
    // The hit covers the prompt's whole blocks (what the first request generated differs).
    EXPECT_EQ(extended.n_cached, std::max<int64_t>(0, n / 8 * 8 - replay) / 8 * 8);
    if (again.tokens != alone || extended.tokens != greedy_alone(*model, longer, 16)) mismatches.push_back(n);
  }
  const EngineStats s = engine->stats();
  EXPECT_GT(s.prefix_hits, 0);
  EXPECT_EQ(s.kv_usage, 0.0);
  return mismatches;
}

TEST_P(DeepseekEngine, PrefixHitWithExactReplayGivesTheColdTokens) {
  EXPECT_EQ(hit_mismatches(kExactReplay), std::vector<int>{});
}

// V4's pages in the KV store: the compressed rows and index keys of whole pages go to the
// directory; an engine started on it finds them, replays the window and the compressor frontiers
// from the replay start, and answers with the cold run's tokens (the exact replay), while the
// frontier and ring groups never reach the store.
TEST_P(DeepseekEngine, KvStorePagesServeARestartedEngine) {
  const Model* model = &reference();
  const fs::path dir = fs::temp_directory_path() / ("dsv4_kvstore_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  EngineConfig cfg = v4_config();
  cfg.max_num_batched_tokens = 32;
  cfg.kv_store_dir = dir.string();
  cfg.kv_store_page_tokens = 32;
  const auto prompt = random_prompt(150, model->config().n_vocab, 77);
  const auto alone = greedy_alone(*model, prompt, 12);
  {
    auto a = std::move(Engine::create(cfg)).value();
    const Answer cold = ask(*a, prompt, 12);
    EXPECT_EQ(cold.n_cached, 0);
    EXPECT_EQ(cold.tokens, alone);
    a->flush_kv_store();
    EXPECT_GT(a->stats().kv_store.pages_written, 0);
  }
  auto b = std::move(Engine::create(cfg)).value();
  const Answer warm = ask(*b, prompt, 12);
  const EngineStats s = b->stats();
  // 161 tokens computed by the first engine: four whole 32-token pages, 128 tokens.
  EXPECT_EQ(s.kv_store.hit_tokens, 128);
  EXPECT_EQ(warm.n_cached, 128 - kExactReplay);
  EXPECT_EQ(warm.tokens, alone);
  EXPECT_EQ(s.kv_store.checksum_failures, 0);
  EXPECT_EQ(s.kv_usage, 0.0);
  b.reset();
  fs::remove_all(dir);
}

TEST_P(DeepseekEngine, PrefixHitWithWindowReplayBookkeeping) {
  // One window of replay: the hits, replay starts and block accounting hold, but the rebuilt
  // window only approximates the cold run's (its first rows see no window below the replay
  // start), so the tokens are recorded, not asserted; exactness is the test above.
  ::testing::Test::RecordProperty("window_replay_mismatches", static_cast<int>(hit_mismatches(0).size()));
}

INSTANTIATE_TEST_SUITE_P(Models, DeepseekEngine, ::testing::Values("dsv4_tiny", "dsv41_tiny"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param) == "dsv4_tiny" ? "V4" : "V41";
                         });

}  // namespace
}  // namespace deepinfer
