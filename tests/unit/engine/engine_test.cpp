// The engine end to end on tiny golden models: many requests together give the tokens each
// gives alone; prefix-cache hits and preemption change nothing; cancellation frees everything.
#include "deepinfer/engine.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <thread>

#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "engine/create_engine.h"
#include "engine/sampler.h"
#include "model/loader/tensor_source.h"
#include "model/model.h"
#include "test_models.h"
#include "tokenizer/tokenizer.h"
#include "test_backend.h"
#include "sync_hook_backend.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

std::string tiny(const std::string& name) {
  return (fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny" / name).string();
}

// The element type of the engine's default KV cache (EngineConfig::kv_cache_dtype): references
// computed through the single-sequence path use the same.
constexpr DType kEngineKv = DType::kF16;

// Greedy continuation through the single-sequence path, the reference.
std::vector<int32_t> greedy_alone(const Model& model, const std::vector<int32_t>& prompt, int n) {
  auto ctx = std::move(model.new_context(256, kEngineKv)).value();
  EXPECT_TRUE(ctx->eval(prompt, LogitsMode::kLast).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = Sampler::argmax(ctx->logits(0));
    out.push_back(t);
    if (i + 1 < n) {
      EXPECT_TRUE(ctx->eval(std::span<const int32_t>(&t, 1), LogitsMode::kLast).ok());
    }
  }
  return out;
}

std::vector<int32_t> collect(RequestHandle& h, FinishReason* reason = nullptr) {
  std::vector<int32_t> out;
  while (auto e = h.next()) {
    out.insert(out.end(), e->tokens.begin(), e->tokens.end());
    if (reason) *reason = e->finish;
  }
  return out;
}

std::vector<std::vector<int32_t>> random_prompts(int n, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> len(1, 60), tok(0, static_cast<int>(n_vocab) - 1);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(n));
  for (auto& p : prompts) {
    p.resize(static_cast<size_t>(len(rng)));
    for (auto& t : p) t = tok(rng);
  }
  return prompts;
}

GenerationRequest greedy(const std::vector<int32_t>& prompt, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  return r;
}

TEST(Engine, ConcurrentRequestsEqualEachAlone) {
  auto model = std::move(testing::load_model(tiny("llama_gqa_tied"))).value();
  EngineConfig cfg;
  cfg.model_path = tiny("llama_gqa_tied");
  cfg.threads = 2;
  cfg.max_num_batched_tokens = 64;  // forces chunked prefill mixed with decodes
  auto engine = std::move(Engine::create(cfg)).value();
  const auto prompts = random_prompts(32, model->config().n_vocab, 1);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (size_t i = 0; i < prompts.size(); ++i) handles.push_back(std::move(engine->submit(greedy(prompts[i], 8 + i % 9))).value());
  for (size_t i = 0; i < prompts.size(); ++i) {
    FinishReason reason = FinishReason::kNone;
    EXPECT_EQ(collect(*handles[i], &reason), greedy_alone(*model, prompts[i], 8 + static_cast<int>(i % 9))) << "request " << i;
    EXPECT_EQ(reason, FinishReason::kLength);
  }
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.kv_usage, 0.0);
  EXPECT_EQ(s.n_running + s.n_waiting, 0);
}

// Asynchronous scheduling plans each step before the last one's tokens are known: a stop token
// in flight costs a discarded position, never an extra token in the stream. 16 concurrent
// requests, each stopping on one of its own greedy tokens or at max_tokens, stream the same
// tokens and finish reasons as with synchronous scheduling, and leave no block behind.
TEST(Engine, AsynchronousSchedulingStreamsWhatSynchronousDoes) {
  auto model = std::move(testing::load_model(tiny("llama_gqa_tied"))).value();
  const auto prompts = random_prompts(16, model->config().n_vocab, 3);
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r = greedy(prompts[i], 12);
    r.sampling.ignore_eos = true;
    const auto alone = greedy_alone(*model, prompts[i], 12);
    if (i % 3 != 0) r.stop_token_ids = {alone[i % 7]};  // stops there (or earlier, on a repeat)
    requests.push_back(r);
  }
  std::vector<std::pair<std::vector<int32_t>, FinishReason>> streams[2];
  for (bool async : {false, true}) {
    EngineConfig cfg;
    cfg.model_path = tiny("llama_gqa_tied");
    cfg.threads = 2;
    cfg.max_num_batched_tokens = 48;
    cfg.async_scheduling = async;
    auto engine = std::move(Engine::create(cfg)).value();
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const auto& r : requests) handles.push_back(std::move(engine->submit(r)).value());
    for (auto& h : handles) {
      FinishReason reason = FinishReason::kNone;
      auto tokens = collect(*h, &reason);
      streams[async].emplace_back(std::move(tokens), reason);
    }
    const EngineStats s = engine->stats();
    EXPECT_EQ(s.kv_usage, 0.0);
    EXPECT_EQ(s.n_running + s.n_waiting, 0);
    EXPECT_GT(s.decode_steps, 0);
    EXPECT_GT(s.decode_step_tokens, s.decode_steps);  // decodes were batched
  }
  int stopped = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(streams[1][i].first, streams[0][i].first) << "request " << i;
    EXPECT_EQ(streams[1][i].second, streams[0][i].second) << "request " << i;
    stopped += streams[0][i].second == FinishReason::kStop;
  }
  EXPECT_GE(stopped, 8);
}

TEST(Engine, PrefixHitAndPreemptionGiveTheColdTokens) {
  auto model = std::move(testing::load_model(tiny("qwen2_gqa"))).value();
  EngineConfig cfg;
  cfg.model_path = tiny("qwen2_gqa");
  cfg.threads = 1;
  cfg.block_size = 4;
  // 15 blocks: one 40-token request fits (10 blocks), no two do, so the eight requests, queued
  // together, preempt each other.
  cfg.kv_cache_tokens = 60;
  testing::StepGate gate;
  auto engine = std::move(create_engine(cfg, [&gate](std::unique_ptr<backend::Backend> inner) {
                            return std::make_unique<testing::SyncHookBackend>(std::move(inner), gate.hook());
                          })).value();
  auto prompts = random_prompts(8, model->config().n_vocab, 2);
  for (auto& p : prompts) p.resize(24, 7);
  // Requests 4..7 share request 0's first 16 tokens.
  for (int i = 4; i < 8; ++i) std::copy_n(prompts[0].begin(), 16, prompts[static_cast<size_t>(i)].begin());
  auto first = std::move(engine->submit(greedy(prompts[0], 16))).value();
  EXPECT_EQ(collect(*first), greedy_alone(*model, prompts[0], 16));
  // The engine holds the first request's first step until all eight are queued: on a loaded
  // machine the engine could otherwise finish each request before the next one arrives.
  gate.arm();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const auto& p : prompts) handles.push_back(std::move(engine->submit(greedy(p, 16))).value());
  gate.release();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(collect(*handles[i]), greedy_alone(*model, prompts[i], 16)) << "request " << i;
  }
  const EngineStats s = engine->stats();
  EXPECT_GT(s.prefix_hits, 0);
  EXPECT_GT(s.n_preemptions, 0) << "the cache was meant to be too small for all at once";
  EXPECT_EQ(s.kv_usage, 0.0);
}

TEST(Engine, CancelFreesBlocksAndEndsTheStream) {
  EngineConfig cfg;
  cfg.model_path = tiny("llama_mha_untied");
  cfg.threads = 1;
  auto engine = std::move(Engine::create(cfg)).value();
  auto h = std::move(engine->submit(greedy({1, 2, 3, 4, 5}, 200))).value();
  auto first = h->next();
  ASSERT_TRUE(first.has_value());
  h->cancel();
  FinishReason reason = FinishReason::kNone;
  collect(*h, &reason);
  EXPECT_EQ(reason, FinishReason::kCancelled);
  for (int i = 0; i < 100 && engine->stats().kv_usage > 0.0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine->stats().kv_usage, 0.0);
}

TEST(Engine, BadRequestsAreRejectedBeforeQueueing) {
  EngineConfig cfg;
  cfg.model_path = tiny("llama_mha_untied");
  auto engine = std::move(Engine::create(cfg)).value();
  EXPECT_EQ(engine->submit(greedy({}, 4)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit(greedy({1}, 0)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit(greedy({1, -3}, 4)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit(greedy({1, static_cast<int32_t>(engine->n_vocab())}, 4)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit(greedy(std::vector<int32_t>(10, 1), engine->max_context())).status().code(),
            StatusCode::kOutOfRange);
  GenerationRequest bad = greedy({1, 2}, 4);
  bad.sampling.temperature = -1.0f;
  EXPECT_EQ(engine->submit(bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->stats().n_waiting, 0);
  EngineConfig missing;
  missing.model_path = "/nonexistent/model.gguf";
  EXPECT_EQ(Engine::create(missing).status().code(), StatusCode::kNotFound);
}

// prompt + max_tokens overflowed int64 for a max_tokens near INT64_MAX, so the sum passed the
// context check and the request generated past the context.
TEST(Engine, HugeMaxTokensIsOutOfRangeNotWrapped) {
  EngineConfig cfg;
  cfg.model_path = tiny("llama_mha_untied");
  auto engine = std::move(Engine::create(cfg)).value();
  for (int64_t max_tokens : {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() - 5,
                             engine->max_context()}) {
    EXPECT_EQ(engine->submit(greedy({1, 2, 3, 4, 5, 6}, max_tokens)).status().code(), StatusCode::kOutOfRange)
        << max_tokens;
  }
  EXPECT_TRUE(engine->submit(greedy({1, 2, 3, 4, 5, 6}, engine->max_context() - 6)).ok());
  GenerationRequest min_over_max = greedy({1, 2}, 4);
  min_over_max.sampling.min_tokens = 5;
  EXPECT_EQ(engine->submit(min_over_max).status().code(), StatusCode::kInvalidArgument);
}

TEST(Engine, StopTokenEndsGeneration) {
  auto model = std::move(testing::load_model(tiny("llama_gqa_tied"))).value();
  EngineConfig cfg;
  cfg.model_path = tiny("llama_gqa_tied");
  auto engine = std::move(Engine::create(cfg)).value();
  const std::vector<int32_t> prompt = {5, 6, 7};
  const auto expect = greedy_alone(*model, prompt, 8);
  GenerationRequest r = greedy(prompt, 8);
  r.stop_token_ids = {expect[3]};
  const size_t first_stop = std::find(expect.begin(), expect.end(), expect[3]) - expect.begin();
  FinishReason reason = FinishReason::kNone;
  auto h = std::move(engine->submit(r)).value();
  EXPECT_EQ(collect(*h, &reason), std::vector<int32_t>(expect.begin(), expect.begin() + first_stop + 1));
  EXPECT_EQ(reason, FinishReason::kStop);
}

// Every sequence's tokens, final event and first event, by index.
struct Outputs {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<TokenLogprob>> logprobs;
  std::vector<std::string> text;
  std::vector<TokenEvent> first, last;
};

Outputs collect_n(RequestHandle& h, int n) {
  Outputs o;
  o.tokens.resize(static_cast<size_t>(n));
  o.logprobs.resize(static_cast<size_t>(n));
  o.text.resize(static_cast<size_t>(n));
  o.first.resize(static_cast<size_t>(n));
  o.last.resize(static_cast<size_t>(n));
  std::vector<bool> seen(static_cast<size_t>(n), false);
  // A lost final event must fail the test, not hang it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  TokenEvent event;
  for (WaitStatus w; (w = h.next_for(std::chrono::milliseconds(100), &event)) != WaitStatus::kEnd;) {
    if (w == WaitStatus::kTimeout) {
      if (std::chrono::steady_clock::now() < deadline) continue;
      ADD_FAILURE() << "the handle did not end within 120 s";
      break;
    }
    const std::optional<TokenEvent> e = std::move(event);
    const auto i = static_cast<size_t>(e->index);
    EXPECT_LT(i, static_cast<size_t>(n));
    if (i >= static_cast<size_t>(n)) break;
    EXPECT_EQ(o.last[i].finish, FinishReason::kNone) << "an event after the final one of index " << i;
    o.tokens[i].insert(o.tokens[i].end(), e->tokens.begin(), e->tokens.end());
    o.logprobs[i].insert(o.logprobs[i].end(), e->logprobs.begin(), e->logprobs.end());
    o.text[i] += e->text;
    if (!seen[i]) o.first[i] = *e;
    seen[i] = true;
    o.last[i] = *e;
  }
  for (int i = 0; i < n; ++i) EXPECT_NE(o.last[static_cast<size_t>(i)].finish, FinishReason::kNone) << "index " << i;
  return o;
}

// Waits (briefly) for the engine thread to release what finished sequences held.
void expect_kv_freed(const Engine& engine) {
  for (int i = 0; i < 200 && engine.stats().kv_usage > 0.0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine.stats().kv_usage, 0.0);
}

TEST(Engine, NGreedySequencesEqualOneAndShareThePrompt) {
  auto model = std::move(testing::load_model(tiny("llama_gqa_tied"))).value();
  EngineConfig cfg;
  cfg.model_path = tiny("llama_gqa_tied");
  cfg.threads = 2;
  cfg.block_size = 4;
  auto engine = std::move(Engine::create(cfg)).value();
  const auto prompt = random_prompts(1, model->config().n_vocab, 3)[0];
  std::vector<int32_t> long_prompt = prompt;
  long_prompt.resize(30, 9);
  GenerationRequest r = greedy(long_prompt, 12);
  r.n = 4;
  auto h = std::move(engine->submit(r)).value();
  const Outputs o = collect_n(*h, 4);
  const auto expect = greedy_alone(*model, long_prompt, 12);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(o.tokens[i], expect) << "sequence " << i;
    EXPECT_EQ(o.last[i].finish, FinishReason::kLength);
    EXPECT_EQ(o.first[i].n_prompt_tokens, 30);
  }
  EXPECT_EQ(o.first[0].n_cached_prompt_tokens, 0);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(o.first[i].n_cached_prompt_tokens, 28) << "the full blocks of the prompt";
  expect_kv_freed(*engine);
}

TEST(Engine, SeededSamplingIsReproducibleAcrossRunsAndSequences) {
  EngineConfig cfg;
  cfg.model_path = tiny("qwen2_gqa");
  cfg.threads = 2;
  auto engine = std::move(Engine::create(cfg)).value();
  GenerationRequest r = greedy({3, 1, 4, 1, 5, 9, 2, 6}, 20);
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 1234;
  r.n = 4;
  const Outputs a = collect_n(*std::move(engine->submit(r)).value(), 4);
  const Outputs b = collect_n(*std::move(engine->submit(r)).value(), 4);
  EXPECT_EQ(a.tokens, b.tokens);
  // Sequence i uses seed + i, so it reproduces a single request with that seed.
  GenerationRequest single = r;
  single.n = 1;
  single.sampling.seed = 1236;
  EXPECT_EQ(collect_n(*std::move(engine->submit(single)).value(), 1).tokens[0], a.tokens[2]);
  EXPECT_NE(a.tokens[0], a.tokens[1]) << "different seeds should sample differently at temperature 1";
  expect_kv_freed(*engine);
}

TEST(Engine, LogprobsOfSampledAndPromptTokens) {
  auto model = std::move(testing::load_model(tiny("llama_mha_untied"))).value();
  EngineConfig cfg;
  cfg.model_path = tiny("llama_mha_untied");
  cfg.threads = 2;
  cfg.block_size = 4;
  cfg.max_num_batched_tokens = 5;  // the prompt comes in chunks
  auto engine = std::move(Engine::create(cfg)).value();
  const std::vector<int32_t> prompt = {11, 22, 33, 44, 55, 66, 77, 88, 99, 111, 122, 133, 144};
  // Warm the prefix cache: prompt logprobs must still cover every position.
  collect(*std::move(engine->submit(greedy(prompt, 2))).value());

  GenerationRequest r = greedy(prompt, 6);
  r.sampling.logprobs = 3;
  r.sampling.prompt_logprobs = 2;
  r.n = 2;
  const Outputs o = collect_n(*std::move(engine->submit(r)).value(), 2);

  auto ctx = std::move(model->new_context(64, kEngineKv)).value();
  ASSERT_TRUE(ctx->eval(prompt, LogitsMode::kAll).ok());
  std::vector<std::pair<float, int32_t>> scratch;
  for (size_t i = 0; i < 2; ++i) {
    const auto& pl = o.first[i].prompt_logprobs;
    ASSERT_EQ(pl.size(), prompt.size()) << "sequence " << i;
    EXPECT_FALSE(pl[0].has_value());
    for (size_t p = 1; p < prompt.size(); ++p) {
      ASSERT_TRUE(pl[p].has_value()) << "position " << p;
      const TokenLogprob want = compute_logprob(ctx->logits(static_cast<int64_t>(p - 1)), prompt[p], 2, scratch);
      EXPECT_EQ(pl[p]->token, prompt[p]);
      EXPECT_EQ(pl[p]->logprob, want.logprob) << "position " << p;
      EXPECT_EQ(pl[p]->rank, want.rank);
      ASSERT_EQ(pl[p]->top.size(), 2u);
      EXPECT_EQ(pl[p]->top[0].token, want.top[0].token);
    }
    ASSERT_EQ(o.logprobs[i].size(), o.tokens[i].size());
    for (size_t t = 0; t < o.tokens[i].size(); ++t) {
      const TokenLogprob& lp = o.logprobs[i][t];
      EXPECT_EQ(lp.token, o.tokens[i][t]);
      EXPECT_EQ(lp.rank, 1) << "greedy picks the most probable token";
      ASSERT_EQ(lp.top.size(), 3u);
      EXPECT_EQ(lp.top[0].token, lp.token);
      EXPECT_EQ(lp.top[0].logprob, lp.logprob);
      EXPECT_LE(lp.logprob, 0.0f);
    }
  }
  EXPECT_EQ(o.first[0].n_cached_prompt_tokens, 0) << "prompt logprobs need every position computed";
  EXPECT_EQ(o.tokens[0], greedy_alone(*model, prompt, 6));
  expect_kv_freed(*engine);
}

TEST(Engine, MinTokensHoldsStopTokensBack) {
  auto model = std::move(testing::load_model(tiny("llama_gqa_tied"))).value();
  EngineConfig cfg;
  cfg.model_path = tiny("llama_gqa_tied");
  auto engine = std::move(Engine::create(cfg)).value();
  const std::vector<int32_t> prompt = {5, 6, 7};
  const auto expect = greedy_alone(*model, prompt, 1);
  GenerationRequest r = greedy(prompt, 8);
  r.stop_token_ids = {expect[0]};
  r.sampling.min_tokens = 3;
  const Outputs o = collect_n(*std::move(engine->submit(r)).value(), 1);
  ASSERT_GE(o.tokens[0].size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(o.tokens[0][i], expect[0]) << "token " << i;
  if (o.last[0].finish == FinishReason::kStop) {
    EXPECT_EQ(o.last[0].stop_token, expect[0]);
  }
}

TEST(Engine, NextForTimesOutThenDelivers) {
  EngineConfig cfg;
  cfg.model_path = tiny("llama_mha_untied");
  cfg.threads = 1;
  auto engine = std::move(Engine::create(cfg)).value();
  auto h = std::move(engine->submit(greedy({1, 2, 3}, 3))).value();
  TokenEvent e;
  int n_tokens = 0;
  WaitStatus w;
  while ((w = h->next_for(std::chrono::milliseconds(50), &e)) != WaitStatus::kEnd) {
    if (w == WaitStatus::kEvent) n_tokens += static_cast<int>(e.tokens.size());
  }
  EXPECT_EQ(n_tokens, 3);
  EXPECT_EQ(h->next_for(std::chrono::milliseconds(1), &e), WaitStatus::kEnd);
}

TEST(Engine, CancelBeforeChildrenStartEndsEverySequence) {
  EngineConfig cfg;
  cfg.model_path = tiny("llama_mha_untied");
  cfg.threads = 1;
  auto engine = std::move(Engine::create(cfg)).value();
  GenerationRequest r = greedy(std::vector<int32_t>(100, 3), 50);
  r.n = 3;
  auto h = std::move(engine->submit(r)).value();
  h->cancel();
  const Outputs o = collect_n(*h, 3);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(o.last[i].finish, FinishReason::kCancelled) << "sequence " << i;
  expect_kv_freed(*engine);
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

TEST(Engine, IdleEngineDoesNotSpin) {
  EngineConfig cfg;
  cfg.model_path = tiny("llama_mha_untied");
  cfg.threads = 2;
  auto engine = std::move(Engine::create(cfg)).value();
  collect(*std::move(engine->submit(greedy({1, 2, 3}, 4))).value());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the pool's workers stop spinning
  const double before = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_LT(process_cpu_seconds() - before, 0.05) << "the engine thread should sleep while there is no work";
  // And it wakes up for the next submission.
  EXPECT_EQ(collect(*std::move(engine->submit(greedy({1, 2, 3}, 4))).value()).size(), 4u);
}

TEST(Engine, DestroyingTheEngineEndsOpenHandlesAsCancelled) {
  std::shared_ptr<RequestHandle> running, queued;
  {
    EngineConfig cfg;
    cfg.model_path = tiny("llama_mha_untied");
    cfg.threads = 1;
    auto engine = std::move(Engine::create(cfg)).value();
    GenerationRequest r = greedy({1, 2, 3}, 200);
    r.n = 2;
    running = std::move(engine->submit(r)).value();
    ASSERT_TRUE(running->next().has_value());
    queued = std::move(engine->submit(r)).value();
  }
  for (auto* h : {running.get(), queued.get()}) {
    const Outputs o = collect_n(*h, 2);
    // A sequence may have finished by length before the engine went away; none is left open.
    for (size_t i = 0; i < 2; ++i) EXPECT_NE(o.last[i].finish, FinishReason::kNone);
  }
}

TEST(Engine, StopStringsNeedATokenizer) {
  EngineConfig cfg;
  cfg.model_path = tiny("llama_mha_untied");
  auto engine = std::move(Engine::create(cfg)).value();
  GenerationRequest r = greedy({1, 2}, 4);
  r.stop = {"x"};
  const Status s = engine->submit(r).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tokenizer"), std::string::npos) << s.message();
  GenerationRequest bad_n = greedy({1, 2}, 4);
  bad_n.n = 0;
  EXPECT_EQ(engine->submit(bad_n).status().code(), StatusCode::kInvalidArgument);
  GenerationRequest bad_stop = greedy({1, 2}, 4);
  bad_stop.stop_token_ids = {-1};
  EXPECT_EQ(engine->submit(bad_stop).status().code(), StatusCode::kInvalidArgument);
  GenerationRequest bad_lp = greedy({1, 2}, 4);
  bad_lp.sampling.logprobs = 21;
  EXPECT_EQ(engine->submit(bad_lp).status().code(), StatusCode::kInvalidArgument);
}

TEST(Engine, StopStringOnTheRealModelCutsTextAndFreesBlocks) {
  const std::string path = testing::real_model();
  ASSERT_FALSE(path.empty());
  EngineConfig cfg;
  cfg.model_path = path;
  cfg.threads = 2;
  cfg.kv_cache_tokens = 4096;
  auto engine = std::move(Engine::create(cfg)).value();
  auto tokenizer = std::move(Tokenizer::from_metadata(std::move(open_tensor_source(path)).value()->metadata())).value();
  const std::vector<int32_t> prompt = tokenizer->encode("Once upon a time, in a small village,", {});
  GenerationRequest r = greedy(prompt, 24);
  r.sampling.ignore_eos = true;
  const Outputs plain = collect_n(*std::move(engine->submit(r)).value(), 1);
  EXPECT_EQ(plain.text[0], tokenizer->decode(plain.tokens[0])) << "text pieces concatenate to decode()";
  // A stop string made of the end of token 5's text and the start of token 6's.
  const std::string upto5 = tokenizer->decode(std::span<const int32_t>(plain.tokens[0].data(), 5));
  const std::string upto6 = tokenizer->decode(std::span<const int32_t>(plain.tokens[0].data(), 6));
  ASSERT_GT(upto6.size(), upto5.size());
  const size_t cut = upto5.size() - std::min<size_t>(2, upto5.size());
  const std::string stop = upto6.substr(cut, upto5.size() + 1 - cut);
  ASSERT_EQ(upto5.find(stop), std::string::npos) << "pick a prompt whose early text is free of the stop string";
  r.stop = {"never in this text", stop};
  const Outputs o = collect_n(*std::move(engine->submit(r)).value(), 1);
  EXPECT_EQ(o.last[0].finish, FinishReason::kStop);
  EXPECT_EQ(o.last[0].stop_string, stop);
  EXPECT_EQ(o.text[0], upto6.substr(0, upto6.find(stop)));
  EXPECT_EQ(o.tokens[0], std::vector<int32_t>(plain.tokens[0].begin(), plain.tokens[0].begin() + 6));
  r.include_stop_str_in_output = true;
  const Outputs kept = collect_n(*std::move(engine->submit(r)).value(), 1);
  EXPECT_EQ(kept.text[0], upto6.substr(0, upto6.find(stop) + stop.size()));
  expect_kv_freed(*engine);
  EXPECT_EQ(engine->stats().n_running + engine->stats().n_waiting, 0);
}

// return_last_prompt_logits: each sequence's first event carries the prompt's last row of
// logits, what the single-sequence path computes there (the prompt in chunks, from a warm
// prefix cache); later events and requests without the flag carry none.
TEST(Engine, LastPromptLogitsComeWithTheFirstEvent) {
  auto model = std::move(testing::load_model(tiny("llama_gqa_tied"))).value();
  EngineConfig cfg;
  cfg.model_path = tiny("llama_gqa_tied");
  cfg.threads = 2;
  cfg.block_size = 4;
  cfg.max_num_batched_tokens = 5;
  auto engine = std::move(Engine::create(cfg)).value();
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38};
  GenerationRequest plain = greedy(prompt, 2);
  const Outputs without = collect_n(*std::move(engine->submit(plain)).value(), 1);
  EXPECT_TRUE(without.first[0].last_prompt_logits.empty());

  GenerationRequest r = greedy(prompt, 3);
  r.n = 2;
  r.return_last_prompt_logits = true;
  std::vector<TokenEvent> events;
  auto handle = std::move(engine->submit(r)).value();
  while (auto e = handle->next()) events.push_back(std::move(*e));

  auto ctx = std::move(model->new_context(64, kEngineKv)).value();
  ASSERT_TRUE(ctx->eval(prompt, LogitsMode::kLast).ok());
  const std::span<const float> want = ctx->logits(0);
  std::vector<int> firsts(2, 0);
  for (const TokenEvent& e : events) {
    if (e.tokens.empty()) continue;
    if (firsts[static_cast<size_t>(e.index)]++ > 0) {
      EXPECT_TRUE(e.last_prompt_logits.empty()) << "only the first event of sequence " << e.index;
      continue;
    }
    ASSERT_EQ(e.last_prompt_logits.size(), want.size()) << "sequence " << e.index;
    EXPECT_TRUE(std::equal(want.begin(), want.end(), e.last_prompt_logits.begin())) << "sequence " << e.index;
    EXPECT_EQ(e.tokens[0], Sampler::argmax(e.last_prompt_logits));
  }
  EXPECT_EQ(firsts, std::vector<int>({3, 3}));
  expect_kv_freed(*engine);
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// The default capacity fills kv_cache_memory_bytes with the pools as they are allocated. Tiny
// Gemma 3 (tiny/gemma3_sliding): one global layer (a "full" block of 16 tokens is 2 x 16 x 2
// heads x 16 x 2 bytes = 2,048 bytes) and three local layers of window 8 (6,144 bytes a block),
// whose pool is bounded at max_num_seqs x (ceil(7 / 16) + 2) + 2 x ceil(32 / 16) = 10 blocks
// (61,440 bytes) however large the cache. 256 KiB then holds (262,144 - 61,440) / 2,048 = 98 full
// blocks, 1,568 tokens; counting the local layers as if they kept every position gave 512.
TEST(Engine, DefaultCapacityCountsWindowedPoolsAtTheirBound) {
  EngineConfig cfg;
  cfg.model_path = tiny("gemma3_sliding");
  cfg.threads = 1;
  cfg.max_num_seqs = 2;
  cfg.max_num_batched_tokens = 32;
  cfg.kv_cache_memory_bytes = 256 << 10;
  auto engine = std::move(Engine::create(cfg)).value();
  const EngineStats s = engine->stats();
  ASSERT_EQ(s.kv_groups.size(), 2u);
  EXPECT_EQ(s.kv_groups[0].name, "full");
  EXPECT_EQ(s.kv_groups[0].blocks_total, 98);
  EXPECT_EQ(s.kv_groups[1].blocks_total, 10);
  EXPECT_EQ(s.kv_cache_bytes, 256 << 10);
  EXPECT_EQ(engine->max_context(), 256);  // the model's context still caps one request

  cfg.kv_cache_memory_bytes = 0;
  EXPECT_EQ(Engine::create(cfg).status().code(), StatusCode::kInvalidArgument);
  cfg.kv_cache_memory_bytes = 4096;  // less than one block of both groups (8,192 bytes)
  auto tiny_budget = Engine::create(cfg);
  ASSERT_FALSE(tiny_budget.ok());
  EXPECT_NE(tiny_budget.status().message().find("holds no KV block"), std::string::npos)
      << tiny_budget.status().to_string();
}

// DeepSeek V4 (golden/dsv4_tiny, f16 KV, blocks of 16 tokens): the compressed rows and index
// keys cost a block per 16 tokens of 4 (CSA) or 2 (HCA) rows, K only: 512 + 256 + 256 = 1,024
// bytes. The sliding ring (6,144 bytes a block) and the three compressor frontiers (8,192,
// 4,096, 4,096), windows of 8, stay at 2 x 3 + 2 x 2 = 10 blocks each: 225,280 bytes. 384 KiB
// then holds (393,216 - 225,280) / 1,024 = 164 blocks of compressed rows, 2,624 tokens.
TEST(Engine, DefaultCapacityFillsTheBudgetForDeepseekV4) {
  EngineConfig cfg;
  cfg.model_path = std::string(DEEPINFER_TEST_DATA) + "/golden/dsv4_tiny";
  cfg.threads = 1;
  cfg.max_num_seqs = 2;
  cfg.max_num_batched_tokens = 32;
  cfg.kv_cache_memory_bytes = 384 << 10;
  auto engine = std::move(Engine::create(cfg)).value();
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.kv_cache_bytes, 384 << 10);
  ASSERT_EQ(s.kv_groups.size(), 7u);
  for (const KvGroupUsage& g : s.kv_groups) {
    const bool windowed = g.name == "window" || g.name.ends_with("_state");
    EXPECT_EQ(g.blocks_total, windowed ? 10 : 164) << g.name;
  }
}

}  // namespace
}  // namespace deepinfer
