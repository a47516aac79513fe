// Bounded sliding-window KV and SWA bounded replay, end to end through the engine: a request
// answered after a prefix hit (replaying only the last window) gives the cold run's greedy
// tokens; sliding layers hold a bounded number of blocks; the memory at a long context is the
// global layers' plus one window per sliding layer (and the step's chunk).
#include "deepinfer/engine.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "kv/kv_cache_manager.h"
#include "model/catalog.h"
#include "model/model.h"
#include "test_models.h"
#include "tokenizer/tokenizer.h"
#include "test_backend.h"
#include "kv_configs.h"

namespace deepinfer {
namespace {

struct Answer {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;  // with the top 5
  int64_t n_cached = 0;  // prompt tokens not computed (replay start on a hit with replay)
};

Answer ask(Engine& engine, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0.0f;
  r.sampling.ignore_eos = true;
  r.max_tokens = max_tokens;
  r.detokenize = false;
  r.sampling.logprobs = 5;
  auto h = std::move(engine.submit(r)).value();
  Answer a;
  bool first = true;
  while (auto e = h->next()) {
    if (first) a.n_cached = e->n_cached_prompt_tokens;
    first = false;
    a.tokens.insert(a.tokens.end(), e->tokens.begin(), e->tokens.end());
    a.logprobs.insert(a.logprobs.end(), e->logprobs.begin(), e->logprobs.end());
  }
  return a;
}

// One-window replay rebuilds the sliding layers' rows from windows cut at the replay start, so
// a hit's logits are near the cold run's, not equal (on Gemma 3 270M the top tokens' logprobs
// move by a few hundredths of a nat, tail tokens by up to ~0.6). Greedy tokens must then agree
// until the cold run meets a near-tie, where its best two tokens are within kNearTie nats and
// any perturbation may pick the other; after that the continuations are different texts.
constexpr float kNearTie = 0.1f;

// The first position where `hit` picks another token although the cold run's best led its
// runner-up by kNearTie or more; -1 when there is none.
int first_clear_divergence(const Answer& cold, const Answer& hit, float near_tie) {
  const size_t n = std::min(cold.tokens.size(), hit.tokens.size());
  for (size_t i = 0; i < n; ++i) {
    if (cold.tokens[i] == hit.tokens[i]) continue;
    const auto& top = cold.logprobs[i].top;
    const float gap = top.size() >= 2 ? top[0].logprob - top[1].logprob : 0.0f;
    if (gap < near_tie) return -1;
    ADD_FAILURE() << "position " << i << ": cold " << cold.tokens[i] << " led by " << gap << " nats, hit took "
                  << hit.tokens[i];
    return static_cast<int>(i);
  }
  return -1;
}

std::vector<int32_t> random_prompt(int n, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> tok(3, static_cast<int>(n_vocab) - 1);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = tok(rng);
  return p;
}

// Where a request replays from after the cached part of `prompt`: the whole blocks before its
// last token, less one window, rounded down to a block.
int64_t expected_replay_start(int64_t n_prompt, int64_t block, int64_t window) {
  const int64_t hit = (n_prompt - 1) / block * block;
  return std::max<int64_t>(0, hit - window) / block * block;
}

EngineConfig tiny_gemma_config(bool replay, int64_t replay_tokens = 0) {
  EngineConfig cfg;
  cfg.model_path = testing::tiny_model("gemma3_sliding");
  cfg.threads = 1;
  cfg.block_size = 4;
  cfg.max_num_batched_tokens = 16;  // prompts prefill in chunks, the replay too
  cfg.max_num_seqs = 4;
  cfg.kv_cache_tokens = 1024;
  cfg.swa_replay = replay;
  cfg.swa_replay_tokens = replay_tokens;
  return cfg;
}

// For prompts 3 to 10 windows long: the prompt cold, then again (a prefix hit that replays),
// then a longer prompt sharing its start; each hit's tokens against a cold engine's. Returns
// the prompts whose tokens differ (near_tie 0), or differ other than at a near-tie.
std::vector<int> replay_mismatches(int64_t replay_tokens, float near_tie) {
  auto engine = std::move(Engine::create(tiny_gemma_config(/*replay=*/true, replay_tokens))).value();
  auto cold_engine = std::move(Engine::create(tiny_gemma_config(/*replay=*/false))).value();
  const int64_t block = 4;
  const int64_t replay = replay_tokens > 0 ? replay_tokens : 8;
  std::vector<int> mismatches;
  for (int n : {24, 37, 50, 64, 80}) {
    SCOPED_TRACE("prompt of " + std::to_string(n));
    const auto prompt = random_prompt(n, engine->n_vocab(), static_cast<uint32_t>(n));
    const Answer first = ask(*engine, prompt, 16);  // cold: nothing cached yet
    EXPECT_EQ(first.n_cached, 0);
    const Answer again = ask(*engine, prompt, 16);   // prefix hit, replays
    EXPECT_EQ(again.n_cached, expected_replay_start(n, block, replay));
    // Replay off: the same prompt is recomputed from scratch, to the cold tokens.
    ask(*cold_engine, prompt, 16);
    const Answer off = ask(*cold_engine, prompt, 16);
    EXPECT_EQ(off.n_cached, 0);
    EXPECT_EQ(off.tokens, first.tokens);
    // A longer prompt sharing this one's start: replay, then its new tokens.
    auto longer = prompt;
    const auto tail = random_prompt(11, engine->n_vocab(), static_cast<uint32_t>(1000 + n));
    longer.insert(longer.end(), tail.begin(), tail.end());
    const Answer extended = ask(*engine, longer, 16);
    // The hit covers the prompt's whole blocks (the generated tokens after it differ).
    EXPECT_EQ(extended.n_cached, std::max<int64_t>(0, n / block * block - replay) / block * block);
    const Answer extended_cold = ask(*cold_engine, longer, 16);
    if (near_tie > 0) {
      if (first_clear_divergence(first, again, near_tie) >= 0 ||
          first_clear_divergence(extended_cold, extended, near_tie) >= 0) {
        mismatches.push_back(n);
      }
    } else if (again.tokens != first.tokens || extended.tokens != extended_cold.tokens) {
      mismatches.push_back(n);
    }
  }
  const EngineStats s = engine->stats();
  EXPECT_GT(s.prefix_hits, 0);
  if (s.kv_groups.size() != 2) {
    ADD_FAILURE() << "expected the full and sliding KV groups, got " << s.kv_groups.size();
    return mismatches;
  }
  EXPECT_EQ(s.kv_groups[0].name, "full");
  EXPECT_EQ(s.kv_groups[1].name, "sliding");
  EXPECT_GT(s.kv_groups[1].blocks_total, 0);
  EXPECT_EQ(s.kv_blocks_total, s.kv_groups[0].blocks_total + s.kv_groups[1].blocks_total);
  // One request at a time: between steps it holds at most ceil((8 - 1) / 4) + 1 = 3 blocks.
  EXPECT_LE(s.kv_groups[1].blocks_peak, 3);
  EXPECT_GT(s.kv_groups[1].blocks_peak, 0);
  EXPECT_EQ(cold_engine->stats().prefix_hits, 0);
  return mismatches;
}

TEST(SwaReplay, TinyGemma3ExactReplayGivesTheColdRunsTokens) {
  // 3 sliding layers, window 8: rebuilt rows are exact once replay covers 3 x 7 + 8 tokens.
  EXPECT_EQ(replay_mismatches(/*replay_tokens=*/32, /*near_tie=*/0.0f), std::vector<int>{});
}

TEST(SwaReplay, TinyGemma3WindowReplayBookkeeping) {
  // One-window replay on this random 4-layer model: the bookkeeping holds (replay start, the
  // bounded blocks, cold runs without it), but its greedy tokens are not asserted: with 3 of 4
  // layers sliding over a window of 8, rebuilding from cut windows moves the logits enough to
  // flip a 0.24-nat lead on one prompt of five. Exactness is the test above (enough replay)
  // and the real model's test below (one window, near-ties aside).
  ::testing::Test::RecordProperty("window_replay_mismatches",
                                static_cast<int>(replay_mismatches(/*replay_tokens=*/0, /*near_tie=*/0.0f).size()));
}

TEST(SwaReplay, TinyGemma3ConcurrentRequestsWithHitsEqualColdRuns) {
  // Replay long enough to be exact (see above): concurrency and hits must then change nothing.
  auto cfg = tiny_gemma_config(/*replay=*/true, /*replay_tokens=*/32);
  auto engine = std::move(Engine::create(cfg)).value();
  cfg.swa_replay = false;
  auto cold_engine = std::move(Engine::create(cfg)).value();
  const auto base = random_prompt(40, engine->n_vocab(), 7);
  ask(*engine, base, 1);  // publishes the shared start
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    auto p = base;
    const auto tail = random_prompt(5 + 7 * i, engine->n_vocab(), static_cast<uint32_t>(100 + i));
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const auto& p : prompts) {
    GenerationRequest r;
    r.prompt = p;
    r.sampling.temperature = 0.0f;
    r.sampling.ignore_eos = true;
    r.max_tokens = 12;
    r.detokenize = false;
    handles.push_back(std::move(engine->submit(r)).value());
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> got;
    while (auto e = handles[i]->next()) got.insert(got.end(), e->tokens.begin(), e->tokens.end());
    EXPECT_EQ(got, ask(*cold_engine, prompts[i], 12).tokens) << "prompt " << i;
  }
  // Four sequences at once: each holds at most 3 sliding blocks between steps.
  EXPECT_LE(engine->stats().kv_groups[1].blocks_peak, 4 * 3);
}

// The scheduler alone: a hit starts computing at the replay start, records what is shared,
// and each update gives back the sliding blocks that left the window.
TEST(SwaReplay, SchedulerAdmitsAHitAtTheReplayStart) {
  for (const bool replay : {true, false}) {
    SCOPED_TRACE(replay ? "replay" : "no replay");
    kv::KvCacheManager kv(kv::two_group_config(4, 64, /*window=*/8, /*n_sliding=*/16, "m"));
    Scheduler scheduler(SchedulerConfig{16, 4, SchedulingPolicy::kFcfs, replay}, kv);
    auto run_to_end = [&](RequestId id, int n_prompt) {
      auto r = std::make_unique<Request>();
      r->id = id;
      for (int i = 0; i < n_prompt; ++i) r->tokens.push_back(10 + i);
      r->n_prompt = n_prompt;
      r->max_tokens = 2;
      scheduler.add(std::move(r));
      std::vector<ScheduledChunk> chunks;
      while (scheduler.find(id)->state != RequestState::kFinished) {
        const StepPlan plan = scheduler.schedule();
        std::vector<SampledToken> sampled;
        for (const ScheduledChunk& c : plan.chunks) {
          chunks.push_back(c);
          if (c.samples) sampled.push_back({c.id, 1});
        }
        scheduler.update(plan, sampled);
        // Between steps: the window (7 positions) plus the block being filled.
        EXPECT_LE(kv.stats().groups[kv::kSlidingGroup].n_used, 3);
      }
      const int64_t n_shared = scheduler.find(id)->n_shared;
      scheduler.take_finished(id);
      return std::make_pair(chunks, n_shared);
    };
    const auto [cold, cold_shared] = run_to_end(1, 30);
    EXPECT_EQ(cold.front().first_position, 0);
    EXPECT_EQ(cold_shared, 0);
    const auto [hit, hit_shared] = run_to_end(2, 30);
    // 28 tokens cached; replay one window before them: 20.
    EXPECT_EQ(hit.front().first_position, replay ? 20 : 0);
    EXPECT_EQ(hit_shared, replay ? 28 : 0);
    EXPECT_EQ(kv.stats().groups[kv::kSlidingGroup].n_used, 0);
    EXPECT_EQ(kv.stats().groups[kv::kFullGroup].n_used, 0);
  }
}

// ---- Gemma 3 270M (real GGUF) ----

std::string gemma_270m_path() {
  const KnownModel* m = find_known_model("gemma3-270m");
  const std::string path = m != nullptr ? cached_model_path(*m) : std::string();
  return !path.empty() && std::filesystem::exists(path) ? path : std::string();
}

// Varied English-like text of about n_tokens tokens.
std::vector<int32_t> text_prompt(const std::string& model_path, int64_t n_tokens) {
  auto model = std::move(testing::load_model(model_path)).value();
  auto tok = std::move(Tokenizer::from_metadata(model->source().metadata())).value();
  const char* subjects[] = {"The river", "A small town", "The old library", "Our neighbour", "The committee",
                            "A tired traveller", "The museum", "My grandmother"};
  const char* verbs[] = {"remembered", "described", "argued about", "discovered", "painted", "counted",
                         "forgot", "wrote about"};
  const char* objects[] = {"the winter of the storm", "a letter from the coast", "seventeen red boats",
                           "the price of bread", "an unfinished bridge", "the first day of school",
                           "a map with no names", "the sound of the market"};
  std::string text;
  std::vector<int32_t> ids;
  for (int i = 0; static_cast<int64_t>(ids.size()) < n_tokens; ++i) {
    text += std::string(subjects[(i * 3) % 8]) + " " + verbs[(i * 5 + 1) % 8] + " " + objects[(i * 7 + 2) % 8] +
            " in the year " + std::to_string(1700 + (i * 37) % 300) + ". ";
    if (i % 16 == 15) ids = tok->encode(text, {.add_bos = true});
  }
  ids.resize(static_cast<size_t>(n_tokens));
  return ids;
}

EngineConfig gemma_270m_config(const std::string& path) {
  EngineConfig cfg;
  cfg.model_path = path;
  cfg.threads = 2;
  cfg.block_size = 16;
  cfg.kv_cache_tokens = 32768;  // the model's full context
  cfg.max_num_seqs = 1;
  cfg.max_num_batched_tokens = 512;
  return cfg;
}

TEST(SwaReplay, Gemma270mHitGivesTheColdRunsTokensWithBoundedKv) {
  const std::string path = gemma_270m_path();
  if (path.empty()) GTEST_SKIP() << "gemma3-270m is not in the cache; run `deepinfer pull gemma3-270m`";
  const EngineConfig cfg = gemma_270m_config(path);
  auto engine = std::move(Engine::create(cfg)).value();
  const int64_t window = 512, block = 16;
  const auto prompt = text_prompt(path, 1400);  // about 2.7 windows
  const Answer cold = ask(*engine, prompt, 8);
  const Answer hit = ask(*engine, prompt, 8);
  EXPECT_EQ(cold.n_cached, 0);
  EXPECT_EQ(hit.n_cached, expected_replay_start(1400, block, window));
  // One-window replay approximates the window (model-arch.md 2.4): exact tokens up to a near-tie.
  EXPECT_EQ(first_clear_divergence(cold, hit, kNearTie), -1);

  // Memory: 3 global layers hold the 32K context; the 15 sliding layers one window (plus a
  // block) per sequence plus the chunks of the step in flight and the one planned ahead
  // (asynchronous scheduling), instead of 32K each.
  const EngineStats s = engine->stats();
  ASSERT_EQ(cfg.kv_cache_dtype, KvCacheDtype::kF16);
  const int64_t row_bytes = 2 * 1 * 256 * 2;  // K and V, 1 head of 256, float16
  const int64_t window_blocks = (window - 1 + block - 1) / block + 1;             // 33
  ASSERT_EQ(s.kv_groups.size(), 2u);
  const KvGroupUsage& full = s.kv_groups[0];
  const KvGroupUsage& sliding = s.kv_groups[1];
  EXPECT_EQ(full.blocks_total, 32768 / block);
  ASSERT_TRUE(cfg.async_scheduling);
  EXPECT_EQ(sliding.blocks_total, cfg.max_num_seqs * (window_blocks + 1) + 2 * cfg.max_num_batched_tokens / block);
  EXPECT_EQ(s.kv_cache_bytes, 3 * 32768 * row_bytes + 15 * sliding.blocks_total * block * row_bytes);
  EXPECT_EQ(full.bytes, 3 * 32768 * row_bytes);
  EXPECT_EQ(sliding.bytes, 15 * sliding.blocks_total * block * row_bytes);
  EXPECT_LE(sliding.blocks_peak, window_blocks);
  EXPECT_GE(sliding.blocks_peak, window_blocks - 1);
  // Against every layer holding the whole context: 4.8x smaller (119 MiB against 576 MiB).
  EXPECT_LT(s.kv_cache_bytes * 4, 18 * 32768 * row_bytes);
  std::printf("gemma3-270m KV at 32K: %.1f MiB (all layers full: %.1f MiB); sliding peak %lld blocks of %lld\n",
              static_cast<double>(s.kv_cache_bytes) / (1 << 20),
              static_cast<double>(18 * 32768 * row_bytes) / (1 << 20),
              static_cast<long long>(sliding.blocks_peak), static_cast<long long>(block));
}

// The bound over a whole 32K context, stepped through the KV manager with Gemma 3 270M's
// layout (a 32K prefill is minutes of CPU; the accounting is what the engine runs).
TEST(SwaReplay, Gemma270mLayoutHoldsOneWindowThroughA32kContext) {
  const int64_t window = 512, block = 16, n_ctx = 32768, chunk = 512;
  kv::KvCacheManager m(kv::two_group_config(block, n_ctx / block, window, 33 + 1 + chunk / block, "gemma3-270m"));
  int64_t n = 0, peak_between = 0, peak_during = 0;
  while (n < n_ctx) {
    const int64_t step = n < n_ctx - 64 ? std::min(chunk, n_ctx - 64 - n) : 1;  // prefill in chunks, then decode
    ASSERT_TRUE(m.allocate_slots(1, n + step, nullptr)) << n;
    peak_during = std::max(peak_during, m.stats().groups[kv::kSlidingGroup].n_used);
    n += step;
    m.free_out_of_window(1, n);
    peak_between = std::max(peak_between, m.stats().groups[kv::kSlidingGroup].n_used);
  }
  EXPECT_EQ(m.stats().groups[kv::kFullGroup].n_used, n_ctx / block);
  EXPECT_EQ(peak_between, 33);  // ceil(511 / 16) + 1: one window plus one block
  EXPECT_LE(peak_during, 33 + chunk / block);
}

}  // namespace
}  // namespace deepinfer
