// The KV-cache store through the engine: a prompt computed by one engine is a store hit in a
// fresh engine on the same directory (a restart, or another process), with the cold run's
// greedy tokens; a damaged page is refused and recomputed; sliding-window models replay their
// window after a store hit as after an in-process one.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "deepinfer/engine.h"
#include "test_models.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

struct Answer {
  std::vector<int32_t> tokens;
  int64_t n_cached = 0;
};

Answer ask(Engine& engine, const std::vector<int32_t>& prompt, int64_t max_tokens, const std::string& salt = "") {
  GenerationRequest r;
  r.cache_salt = salt;
  r.prompt = prompt;
  r.sampling.temperature = 0.0f;
  r.sampling.ignore_eos = true;
  r.max_tokens = max_tokens;
  r.detokenize = false;
  auto h = std::move(engine.submit(r)).value();
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
  std::uniform_int_distribution<int> tok(3, static_cast<int>(n_vocab) - 1);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = tok(rng);
  return p;
}

class KvStoreEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("deepinfer_kvstore_engine_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<fs::path> page_files() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      if (e.path().extension() == ".page") out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path dir_;
};

EngineConfig smollm_config(const std::string& dir) {
  EngineConfig cfg;
  cfg.model_path = testing::real_model();
  cfg.threads = 2;
  cfg.kv_cache_tokens = 2048;
  cfg.kv_store_dir = dir;
  return cfg;
}

TEST_F(KvStoreEngineTest, RestartedEngineHitsTheStoreWithTheColdTokens) {
  const EngineConfig cfg = smollm_config(dir_.string());
  ASSERT_FALSE(cfg.model_path.empty());
  std::vector<int32_t> prompt;
  Answer cold;
  {
    auto a = std::move(Engine::create(cfg)).value();
    prompt = random_prompt(300, a->n_vocab(), 1);
    cold = ask(*a, prompt, 8);
    EXPECT_EQ(cold.n_cached, 0);
    EXPECT_EQ(a->stats().kv_store.miss_pages, 1);
  }  // destroying the engine writes its queued pages
  ASSERT_EQ(page_files().size(), 2u);  // 300 tokens: two whole pages of 128

  auto b = std::move(Engine::create(cfg)).value();  // a fresh process on the same directory
  const Answer warm = ask(*b, prompt, 8);
  EXPECT_EQ(warm.n_cached, 256);  // usage counts store hits as cached tokens
  EXPECT_EQ(warm.tokens, cold.tokens);
  const KvStoreUsage s = b->stats().kv_store;
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.hit_pages, 2);
  EXPECT_EQ(s.hit_tokens, 256);
  EXPECT_GT(s.bytes_read, 0);
  EXPECT_EQ(s.pages_written, 0);  // it had them all
  EXPECT_EQ(s.checksum_failures, 0);
}

EngineConfig tiny_llama_config(const std::string& dir) {
  EngineConfig cfg;
  cfg.model_path = testing::tiny_model("llama_gqa_tied");
  cfg.threads = 1;
  cfg.block_size = 4;
  cfg.kv_cache_tokens = 1024;
  cfg.kv_store_dir = dir;
  cfg.kv_store_page_tokens = 16;
  return cfg;
}

TEST_F(KvStoreEngineTest, DamagedPageIsRecomputedNotServed) {
  const EngineConfig cfg = tiny_llama_config(dir_.string());
  std::vector<int32_t> prompt;
  Answer cold;
  {
    auto a = std::move(Engine::create(cfg)).value();
    prompt = random_prompt(40, a->n_vocab(), 2);
    cold = ask(*a, prompt, 8);
  }
  // Damage the prefix's second page (written after the first: the writer goes in order).
  std::vector<fs::path> pages = page_files();
  ASSERT_EQ(pages.size(), 2u);
  if (fs::last_write_time(pages[0]) > fs::last_write_time(pages[1])) std::swap(pages[0], pages[1]);
  {
    std::fstream f(pages[1], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(pages[1]) / 2));
    f.put('\x5a');
  }
  {
    auto b = std::move(Engine::create(cfg)).value();
    const Answer warm = ask(*b, prompt, 8);
    EXPECT_EQ(warm.n_cached, 16);  // the first page; the second is refused and recomputed
    EXPECT_EQ(warm.tokens, cold.tokens);
    EXPECT_EQ(b->stats().kv_store.checksum_failures, 1);
  }  // the recomputed page is written anew, behind: done by the engine's end
  EXPECT_EQ(page_files().size(), 2u);
  auto c = std::move(Engine::create(cfg)).value();
  const Answer again = ask(*c, prompt, 8);
  EXPECT_EQ(again.n_cached, 32);
  EXPECT_EQ(again.tokens, cold.tokens);
}

// The memory tier alone: a prefix whose blocks the KV pool has reused comes back from it.
TEST_F(KvStoreEngineTest, MemoryTierServesAPrefixThePoolEvicted) {
  EngineConfig cfg = tiny_llama_config("");
  cfg.kv_cache_tokens = 64;  // 16 blocks: the next prompts take the first one's blocks
  cfg.kv_store_memory_bytes = 64 << 20;
  auto engine = std::move(Engine::create(cfg)).value();
  const std::vector<int32_t> prompt = random_prompt(40, engine->n_vocab(), 5);
  const Answer cold = ask(*engine, prompt, 4);
  for (uint32_t seed : {6u, 7u}) ask(*engine, random_prompt(40, engine->n_vocab(), seed), 4);
  // The pages go into the memory tier behind the requests; on a loaded machine the writer may
  // still hold the first prompt's when it comes back.
  engine->flush_kv_store();
  const Answer again = ask(*engine, prompt, 4);
  EXPECT_EQ(again.n_cached, 32);
  EXPECT_EQ(again.tokens, cold.tokens);
  const KvStoreUsage s = engine->stats().kv_store;
  EXPECT_EQ(s.hit_pages, 2);
  EXPECT_EQ(s.bytes_read, 0);  // no directory: from memory
  EXPECT_GT(s.memory_bytes, 0);
}

// The cache salt is part of every page's key: another salt finds nothing, the same one all.
TEST_F(KvStoreEngineTest, CacheSaltSeparatesPages) {
  const EngineConfig cfg = tiny_llama_config(dir_.string());
  std::vector<int32_t> prompt;
  {
    auto a = std::move(Engine::create(cfg)).value();
    prompt = random_prompt(40, a->n_vocab(), 4);
    ask(*a, prompt, 4, "alice");
  }
  auto b = std::move(Engine::create(cfg)).value();
  EXPECT_EQ(ask(*b, prompt, 4, "bob").n_cached, 0);
  EXPECT_EQ(ask(*b, prompt, 4).n_cached, 0);
  EXPECT_EQ(b->stats().kv_store.hit_pages, 0);
  EXPECT_EQ(ask(*b, prompt, 4, "alice").n_cached, 32);
}

// Gemma 3's shape in miniature: only the full group's pages are stored; a store hit replays the
// last window of the sliding layers (long enough here to be exact).
TEST_F(KvStoreEngineTest, SlidingWindowModelReplaysAfterAStoreHit) {
  EngineConfig cfg;
  cfg.model_path = testing::tiny_model("gemma3_sliding");
  cfg.threads = 1;
  cfg.block_size = 4;
  cfg.max_num_batched_tokens = 16;
  cfg.kv_cache_tokens = 1024;
  cfg.swa_replay_tokens = 32;  // 3 sliding layers, window 8: the replay is exact
  cfg.kv_store_dir = dir_.string();
  cfg.kv_store_page_tokens = 16;
  std::vector<int32_t> prompt;
  Answer cold;
  {
    auto a = std::move(Engine::create(cfg)).value();
    prompt = random_prompt(70, a->n_vocab(), 3);
    cold = ask(*a, prompt, 12);
  }
  EXPECT_EQ(page_files().size(), 5u);  // 70 + 12 tokens, 81 computed: five whole pages
  auto b = std::move(Engine::create(cfg)).value();
  const Answer warm = ask(*b, prompt, 12);
  EXPECT_EQ(b->stats().kv_store.hit_tokens, 64);
  EXPECT_EQ(warm.n_cached, 64 - 32);  // computing starts at the replay start
  EXPECT_EQ(warm.tokens, cold.tokens);
}

// An engine killed with SIGKILL while it writes pages behind: an engine restarted on the
// directory answers every prompt the killed one was given with the tokens of an engine without
// a store. Trials: DEEPINFER_KVSTORE_KILL_TRIALS (default 3, for CI's time).
TEST_F(KvStoreEngineTest, EngineKilledWhileWritingLeavesAStoreThatServesCorrectTokens) {
  const char* env = std::getenv("DEEPINFER_KVSTORE_KILL_TRIALS");
  const int trials = env ? std::atoi(env) : 3;
  // The expected tokens first, and no engine thread alive at the forks.
  int64_t n_vocab = 0;
  std::vector<std::vector<int32_t>> expected;
  {
    auto cold = std::move(Engine::create(tiny_llama_config(""))).value();
    n_vocab = cold->n_vocab();
    for (uint32_t seed = 0; seed < 16; ++seed) expected.push_back(ask(*cold, random_prompt(70, n_vocab, seed), 4).tokens);
  }
  std::mt19937 rng(7);
  for (int trial = 0; trial < trials; ++trial) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto e = Engine::create(tiny_llama_config(dir_.string()));
      if (!e.ok()) ::_exit(2);
      for (uint32_t seed = 0;; ++seed) ask(**e, random_prompt(70, n_vocab, seed % 16), 4);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(50, 400)(rng)));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    auto restarted = std::move(Engine::create(tiny_llama_config(dir_.string()))).value();
    int64_t cached = 0;
    for (uint32_t seed = 0; seed < 16; ++seed) {
      const Answer a = ask(*restarted, random_prompt(70, n_vocab, seed), 4);
      cached += a.n_cached;
      EXPECT_EQ(a.tokens, expected[seed]) << "trial " << trial << ", prompt " << seed;
    }
    EXPECT_EQ(restarted->stats().kv_store.checksum_failures, 0);  // atomic renames: nothing torn
    if (trial == trials - 1) {
      EXPECT_GT(cached, 0);
    }
  }
}

TEST_F(KvStoreEngineTest, PagesMustBeWholeBlocks) {
  EngineConfig cfg;
  cfg.model_path = testing::tiny_model("llama_gqa_tied");
  cfg.block_size = 16;
  cfg.kv_store_dir = dir_.string();
  cfg.kv_store_page_tokens = 24;
  auto engine = Engine::create(cfg);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("multiple"), std::string::npos) << engine.status().message();
}

}  // namespace
}  // namespace deepinfer
