// The draft-model drafter (speculative/draft_model.h) on the tiny golden models: its drafts
// after rollbacks, over a catch-up fed in several steps and in a batch equal a fresh draft
// model's on the same context (the draft model's greedy continuation), with sliding-window
// layers too. Through the engine: greedy and seeded output with a draft model equal the plain
// engine's, a draft model that is the target keeps every greedy draft, and bad pairings are
// clear errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "deepinfer/engine.h"
#include "engine/speculative/draft_model.h"
#include "model/model.h"
#include "speculative_run.h"
#include "test_models.h"
#include "tokenizer/tokenizer_loading.h"

namespace deepinfer {
namespace {

using speculative::Draft;
using speculative::DraftModel;

constexpr int32_t kDraftTokens = 5;

std::vector<int32_t> tokens_of(const Draft& d) { return {d.view().begin(), d.view().end()}; }

Draft propose(DraftModel& d, kv::RequestId id, std::span<const int32_t> context, int32_t max_tokens = kDraftTokens) {
  Draft out;
  const DraftModel::Job job{id, context, max_tokens, &out};
  const Status st = d.propose({&job, 1});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

void expect_same(const Draft& want, const Draft& got, const std::string& what) {
  ASSERT_EQ(tokens_of(want), tokens_of(got)) << what;
  for (int32_t j = 0; j < want.n; ++j) {
    EXPECT_NEAR(want.confidence[static_cast<size_t>(j)], got.confidence[static_cast<size_t>(j)], 1e-4f) << what;
  }
}

std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n, int32_t n_vocab) {
  std::uniform_int_distribution<int32_t> id(0, n_vocab - 1);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = id(rng);
  return t;
}

class DraftModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    pool_ = std::make_unique<ThreadPool>(2);
    backend_ = std::move(backend::create_backend("cpu", backend::BackendOptions{pool_.get()})).value();
  }

  // A drafter over the tiny model `name`, f32 KV in blocks of 4 tokens (gemma3_sliding's window
  // of 8 spans few blocks), drafting full length (random models are unsure of every token).
  std::unique_ptr<DraftModel> make(const std::string& name, int64_t catch_up_budget = 1024) {
    auto model = Model::load(testing::tiny_model(name), *backend_);
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    if (!model.ok()) return nullptr;
    DraftModel::Parts parts;
    parts.model = std::move(model).value();
    parts.kv = std::move(parts.model->new_kv_cache(4, DType::kF32, 128)).value();
    parts.kv_config.groups = parts.kv->groups();
    parts.kv_config.enable_prefix_caching = false;
    EXPECT_TRUE(kv::KvCacheManager::validate(parts.kv_config).ok());
    n_vocab_ = static_cast<int32_t>(parts.model->config().n_vocab);
    return std::make_unique<DraftModel>(std::move(parts), DraftModel::Limits{catch_up_budget, 256, n_vocab_, 0.0f});
  }

  int32_t n_vocab_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<backend::Backend> backend_;
};

// The context grows as verification makes it: an accepted draft prefix, then a token of the
// target's own that differs from the next draft token (or follows a fully accepted draft).
TEST_P(DraftModelTest, ADraftAfterRollbacksEqualsAFreshDraftModels) {
  auto rolling = make(GetParam());
  ASSERT_NE(rolling, nullptr);
  std::mt19937 rng(7);
  std::vector<int32_t> context = random_tokens(rng, 21, n_vocab_);
  int n_rejected = 0;
  for (int round = 0; round < 12; ++round) {
    const Draft d = propose(*rolling, 1, context);
    ASSERT_EQ(d.n, kDraftTokens) << "round " << round;
    auto fresh = make(GetParam());
    expect_same(propose(*fresh, 1, context), d, "round " + std::to_string(round));
    const int32_t keep = std::uniform_int_distribution<int32_t>(0, d.n)(rng);
    context.insert(context.end(), d.tokens.begin(), d.tokens.begin() + keep);
    int32_t own = std::uniform_int_distribution<int32_t>(0, n_vocab_ - 1)(rng);
    if (keep < d.n && own == d.tokens[static_cast<size_t>(keep)]) own = (own + 1) % n_vocab_;
    n_rejected += keep < d.n;
    context.push_back(own);
  }
  EXPECT_GE(n_rejected, 4) << "too few rollbacks to test them";
}

// A prompt longer than the catch-up budget is fed over several proposals, which draft nothing
// until it is in; two sequences proposed together draft what each drafts alone.
TEST_P(DraftModelTest, ACatchUpOverSeveralStepsAndABatchDraftAsAloneAtOnce) {
  std::mt19937 rng(11);
  const std::vector<int32_t> a = random_tokens(rng, 30, 1 << 8);
  const std::vector<int32_t> b = random_tokens(rng, 9, 1 << 8);
  auto alone = make(GetParam());
  const Draft want_a = propose(*alone, 1, a);
  const Draft want_b = propose(*alone, 2, b);

  auto slow = make(GetParam(), /*catch_up_budget=*/12);
  EXPECT_EQ(propose(*slow, 1, a).n, 0);  // 12 of 30 fed
  EXPECT_EQ(propose(*slow, 1, a).n, 0);  // 24
  expect_same(want_a, propose(*slow, 1, a), "after a catch-up over three proposals");

  auto batched = make(GetParam());
  Draft got_a, got_b;
  const DraftModel::Job jobs[] = {{1, a, kDraftTokens, &got_a}, {2, b, kDraftTokens, &got_b}};
  ASSERT_TRUE(batched->propose(jobs).ok());
  expect_same(want_a, got_a, "batched, sequence a");
  expect_same(want_b, got_b, "batched, sequence b");
  // Released, a sequence starts over: its next proposal feeds the whole context again.
  batched->release(1);
  expect_same(want_a, propose(*batched, 1, a), "after release");
}

// A full draft KV cache is a normal outcome: that sequence drafts nothing.
TEST_P(DraftModelTest, AFullDraftCacheDraftsNothing) {
  auto d = make(GetParam());
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> contexts;
  int empty = 0;
  for (kv::RequestId id = 1; id <= 40; ++id) {
    contexts.push_back(random_tokens(rng, 20, n_vocab_));  // 6 blocks of 4 with the draft
    empty += propose(*d, id, contexts.back()).n == 0;
  }
  EXPECT_GT(empty, 0) << "128 blocks held 40 sequences of 6 blocks";
  for (kv::RequestId id = 1; id <= 40; ++id) d->release(id);
  EXPECT_EQ(propose(*d, 41, contexts[0]).n, kDraftTokens) << "released blocks came back";
}

INSTANTIATE_TEST_SUITE_P(TinyModels, DraftModelTest, ::testing::Values("llama_gqa_tied", "gemma3_sliding"));

// ---- Through the engine ----

using testing::expect_same_tokens;
using testing::run_all;
using Output = testing::SpecOutput;

EngineConfig engine_config(const std::string& target, const std::string& draft) {
  EngineConfig cfg;
  cfg.model_path = target;
  cfg.threads = 2;
  cfg.kv_cache_tokens = 4096;
  cfg.speculative.schedule = SpeculativeSchedule::kFixed;
  if (!draft.empty()) {
    cfg.speculative.method = SpeculativeMethod::kDraft;
    cfg.speculative.draft_model_path = draft;
  }
  return cfg;
}

std::vector<GenerationRequest> tiny_requests(int n, float temperature) {
  std::mt19937 rng(5);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < n; ++i) {
    GenerationRequest r;
    r.prompt = random_tokens(rng, 5 + static_cast<size_t>(i % 7) * 9, 256);
    r.max_tokens = 40;
    r.sampling.temperature = temperature;
    r.sampling.seed = 100 + static_cast<uint64_t>(i);
    r.detokenize = false;
    requests.push_back(std::move(r));
  }
  return requests;
}

int64_t drafted(const std::vector<Output>& outputs) {
  int64_t n = 0;
  for (const Output& o : outputs) n += o.n_draft;
  return n;
}

// Pairs of tiny models with one vocabulary, each way round (a sliding-window target with a
// full-attention draft and the reverse), 16 requests in small prefill chunks, greedy and seeded.
TEST(DraftModelEngine, OutputWithADraftModelEqualsThePlainEngines) {
  const std::string llama = testing::tiny_model("llama_gqa_tied");
  const std::string gemma = testing::tiny_model("gemma3_sliding");
  for (float temperature : {0.0f, 1.0f}) {
    const std::vector<GenerationRequest> requests = tiny_requests(16, temperature);
    for (const auto& [target, draft] : {std::pair{gemma, llama}, std::pair{llama, gemma}, std::pair{gemma, gemma}}) {
      EngineConfig plain_cfg = engine_config(target, "");
      plain_cfg.max_num_batched_tokens = 24;
      EngineConfig draft_cfg = engine_config(target, draft);
      draft_cfg.max_num_batched_tokens = 24;
      const std::string what = draft + " drafting for " + target + " at temperature " + std::to_string(temperature);
      const std::vector<Output> spec = run_all(draft_cfg, requests);
      expect_same_tokens(run_all(plain_cfg, requests), spec, what);
      EXPECT_GT(drafted(spec), 0) << what;
    }
  }
}

// SmolLM2 drafting for itself: every greedy draft is the target's own greedy choice, so all are
// kept (a draft KV that drifted from the context would lose some); at temperature 1 the target
// rejects some, and the draft rolls back.
TEST(DraftModelEngine, ADraftModelThatIsTheTargetKeepsEveryGreedyDraft) {
  const std::string model = testing::real_model();
  if (model.empty()) return;
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r;
    r.prompt = {1, 504, 3458, 282, 4649, 314, 2 + i};
    r.max_tokens = 48;
    r.sampling.temperature = 0.0f;
    r.detokenize = false;
    requests.push_back(r);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 9 + static_cast<uint64_t>(i);
    requests.push_back(r);
  }
  // A chat turn the model ends itself: drafts past its end-of-turn token are cut, not rejected.
  auto tokenizer = load_tokenizer(model, TokenizerPresence::kRequired);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  GenerationRequest chat;
  chat.prompt = (*tokenizer)->encode(
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
      "<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n",
      {.parse_special = true});
  chat.max_tokens = 64;
  chat.sampling.temperature = 0.0f;
  chat.detokenize = false;
  requests.push_back(chat);
  requests.push_back(chat);  // keeps the greedy / sampled alternation below
  const std::vector<Output> plain = run_all(engine_config(model, ""), requests);
  ASSERT_EQ(plain.back().finish, FinishReason::kStop) << "the chat turn should end before max_tokens";
  const std::vector<Output> spec = run_all(engine_config(model, model), requests);
  expect_same_tokens(plain, spec, "SmolLM2 drafting for itself");
  int64_t sampled_rejected = 0;
  for (size_t i = 0; i < spec.size(); ++i) {
    EXPECT_GT(spec[i].n_draft, 0) << "request " << i;
    if (i % 2 == 0) {
      EXPECT_EQ(spec[i].n_accepted, spec[i].n_draft) << "greedy request " << i;
    }
    if (i % 2 == 1 && i + 2 < spec.size()) sampled_rejected += spec[i].n_draft - spec[i].n_accepted;
  }
  EXPECT_GT(sampled_rejected, 0) << "no sampled draft was rejected: rollback untested";
}

TEST(DraftModelEngine, PairingsThatCannotWorkAreClearErrors) {
  const std::string llama = testing::tiny_model("llama_gqa_tied");
  // Another vocabulary size.
  auto e = Engine::create(engine_config(llama, testing::tiny_model("llama_mha_untied")));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("cannot draft for"), std::string::npos) << e.status().message();
  // The method without a model.
  EngineConfig cfg = engine_config(llama, "");
  cfg.speculative.method = SpeculativeMethod::kDraft;
  e = Engine::create(cfg);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--draft-model"), std::string::npos) << e.status().message();
  // A request asking for it from an engine without one.
  auto plain = std::move(Engine::create(engine_config(llama, ""))).value();
  GenerationRequest r = tiny_requests(1, 0.0f)[0];
  r.speculative_method = SpeculativeMethod::kDraft;
  auto h = plain->submit(r);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("--draft-model"), std::string::npos) << h.status().message();
  // With batch invariance.
  cfg = engine_config(llama, llama);
  cfg.batch_invariant = true;
  e = Engine::create(cfg);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("mutually exclusive"), std::string::npos) << e.status().message();
}

TEST(DraftModelEngine, ADraftModelWithAnotherTokenizerIsRefused) {
  const std::string smol = testing::real_model();
  const KnownModel* gemma = find_known_model("gemma3-270m");
  ASSERT_NE(gemma, nullptr);
  const std::string gemma_path = cached_model_path(*gemma);
  ASSERT_TRUE(std::filesystem::exists(gemma_path)) << "run `deepinfer pull gemma3-270m` first";
  if (smol.empty()) return;
  auto e = Engine::create(engine_config(smol, gemma_path));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("share the target's tokenizer"), std::string::npos) << e.status().message();
}

}  // namespace
}  // namespace deepinfer
