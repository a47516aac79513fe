// DeepSeek V4's MTP layer against the reference of tools/golden/make_dsv4_mtp.py
// (tests/golden/dsv4_mtp/): transformers' own V4 block, hyper head and norms composed as vLLM's
// DeepSeekV4MultiTokenPredictorLayer composes them, over the main model of tests/golden/dsv4_tiny
// (six layers, window 8) with one MTP layer added under the release's names (mtp.0.*).
//
// Rows: the MTP row at position p reads the main model's streams at p and the token at p + 1 and
// predicts the token at p + 2; all 63 rows of a 64-token sequence, fed whole, in chunks that
// cross the window (8), and chained on the MTP's own streams as drafting does.
//
// Tolerance as tests/golden/dsv4_tiny_test.cpp: float32 on both sides with sums in other orders,
// 1e-4 x (1 + max |logit|). A row that reads the wrong position's streams, the token at p
// instead of p + 1, the rope at p + 1, no mask at p = 0 or the main model's hyper head moves
// logits by far more.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "deepinfer/engine.h"
#include "engine/sampler.h"
#include "engine/speculative/mtp_drafter.h"
#include "golden_logits.h"
#include "model/model.h"
#include "test_backend.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(DEEPINFER_TEST_DATA) / "golden" / "dsv4_mtp";
constexpr int64_t kBlock = 16, kBlocks = 8;

struct Fixture {
  std::unique_ptr<Model> model;
  std::unique_ptr<backend::KvCache> kv, draft_kv;
  std::unique_ptr<BatchRunner> target;
  std::unique_ptr<DraftHeadRunner> mtp;
  std::vector<int32_t> table = std::vector<int32_t>(kBlocks);
  nlohmann::json golden;
};

void make(Fixture* f) {
  f->golden = testing::read_golden(kDir);
  auto model = Model::load(kDir.string(), testing::test_backend(), {.draft_layers = true, .token_classes = {}});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  f->model = std::move(*model);
  ASSERT_EQ(f->model->draft_kv_groups().size(), 1u);
  auto kv = f->model->new_kv_cache(kBlock, DType::kF32, kBlocks);
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  f->kv = std::move(*kv);
  const int64_t n_blocks = kBlocks;
  auto draft_kv = f->model->new_draft_kv_cache(kBlock, DType::kF32, {&n_blocks, 1});
  ASSERT_TRUE(draft_kv.ok()) << draft_kv.status().to_string();
  f->draft_kv = std::move(*draft_kv);
  f->target = f->model->new_batch_runner();
  f->mtp = f->model->new_draft_head_runner(*f->target);
  ASSERT_NE(f->mtp, nullptr);
  std::iota(f->table.begin(), f->table.end(), 0);
}

BatchSequence sequence(const Fixture& f, int64_t first, int64_t n, LogitsMode mode, int n_groups) {
  BatchSequence b;
  b.first_position = first;
  b.n_tokens = n;
  b.logits = mode;
  for (int g = 0; g < n_groups; ++g) b.block_tables[static_cast<size_t>(g)] = f.table;
  return b;
}

// The target over seq[first, first + n), then the MTP rows at those positions that have a next
// token, against the reference's rows.
void run_chunk(Fixture& f, const std::vector<int32_t>& seq, int64_t first, int64_t n, double* worst) {
  const auto n_groups = static_cast<int>(f.model->kv_groups().size());
  const BatchSequence t = sequence(f, first, n, LogitsMode::kNone, n_groups);
  ASSERT_TRUE(f.target->run(std::span<const int32_t>(seq).subspan(static_cast<size_t>(first), static_cast<size_t>(n)),
                            {&t, 1}, *f.kv)
                  .ok());
  const int64_t last = std::min<int64_t>(first + n - 1, static_cast<int64_t>(seq.size()) - 2);
  if (last < first) return;
  std::vector<int32_t> tokens, rows;
  for (int64_t p = first; p <= last; ++p) {
    tokens.push_back(seq[static_cast<size_t>(p + 1)]);
    rows.push_back(static_cast<int32_t>(p - first));
  }
  const BatchSequence m = sequence(f, first, last - first + 1, LogitsMode::kAll, 1);
  const Status st = f.mtp->run(tokens, rows, DraftHeadRunner::HiddenFrom::kTarget, {&m, 1}, *f.draft_kv);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(f.mtp->n_logit_rows(), last - first + 1);
  for (int64_t p = first; p <= last; ++p) {
    const auto [err, tol] = testing::row_error(f.mtp->logits(p - first), f.golden["mtp_logits"][static_cast<size_t>(p)], 1e-4);
    *worst = std::max(*worst, err);
    EXPECT_LE(err, tol) << "MTP row at position " << p << " (chunks from " << first << ")";
  }
}

void check_rows(int64_t chunk) {
  Fixture f;
  make(&f);
  if (::testing::Test::HasFatalFailure()) return;
  const auto seq = f.golden["sequence"].get<std::vector<int32_t>>();
  ASSERT_EQ(seq.size(), 64u);
  ASSERT_EQ(f.golden["mtp_logits"].size(), 63u);
  double worst = 0;
  const auto n = static_cast<int64_t>(seq.size());
  const int64_t step = chunk > 0 ? chunk : n;
  for (int64_t first = 0; first < n; first += step) run_chunk(f, seq, first, std::min(step, n - first), &worst);
  ::testing::Test::RecordProperty("max_abs_err", std::to_string(worst));
}

TEST(DeepseekV4Mtp, RowsMatchTheReference) { check_rows(0); }
// Chunks ending inside and at the window (8): the MTP's own KV carried across passes.
TEST(DeepseekV4Mtp, ChunkedRowsMatchTheReference) {
  check_rows(5);
  check_rows(8);
  check_rows(1);
}

// Drafting: after the target's pass over the context, the MTP's last row gives draft 1; each
// further draft is a row on the MTP's own streams and its previous draft.
TEST(DeepseekV4Mtp, ChainedDraftsMatchTheReference) {
  Fixture f;
  make(&f);
  if (::testing::Test::HasFatalFailure()) return;
  const auto seq = f.golden["sequence"].get<std::vector<int32_t>>();
  const auto n = f.golden["chain_context"].get<int64_t>();
  const auto want = f.golden["chain_tokens"].get<std::vector<int32_t>>();
  const auto n_groups = static_cast<int>(f.model->kv_groups().size());
  const BatchSequence t = sequence(f, 0, n, LogitsMode::kNone, n_groups);
  ASSERT_TRUE(f.target->run(std::span<const int32_t>(seq).first(static_cast<size_t>(n)), {&t, 1}, *f.kv).ok());
  std::vector<int32_t> tokens, rows;
  for (int64_t p = 0; p + 1 < n; ++p) {
    tokens.push_back(seq[static_cast<size_t>(p + 1)]);
    rows.push_back(static_cast<int32_t>(p));
  }
  BatchSequence m = sequence(f, 0, n - 1, LogitsMode::kLast, 1);
  ASSERT_TRUE(f.mtp->run(tokens, rows, DraftHeadRunner::HiddenFrom::kTarget, {&m, 1}, *f.draft_kv).ok());
  std::vector<int32_t> got;
  int32_t chain_row = static_cast<int32_t>(n - 2);  // the row whose streams the next draft reads
  for (size_t j = 0; j < want.size(); ++j) {
    const auto [err, tol] = testing::row_error(f.mtp->logits(0), f.golden["chain_logits"][j], 1e-4);
    EXPECT_LE(err, tol) << "draft " << j;
    got.push_back(Sampler::argmax(f.mtp->logits(0)));
    const int32_t token = got.back();
    m = sequence(f, n - 1 + static_cast<int64_t>(j), 1, LogitsMode::kLast, 1);
    ASSERT_TRUE(f.mtp->run({&token, 1}, {&chain_row, 1}, DraftHeadRunner::HiddenFrom::kSelf, {&m, 1}, *f.draft_kv).ok());
    chain_row = 0;
  }
  EXPECT_EQ(got, want);
}

TEST(DeepseekV4Mtp, HiddenRowsPastThePassAreRefused) {
  Fixture f;
  make(&f);
  if (::testing::Test::HasFatalFailure()) return;
  const auto seq = f.golden["sequence"].get<std::vector<int32_t>>();
  const auto n_groups = static_cast<int>(f.model->kv_groups().size());
  const BatchSequence t = sequence(f, 0, 4, LogitsMode::kNone, n_groups);
  ASSERT_TRUE(f.target->run(std::span<const int32_t>(seq).first(4), {&t, 1}, *f.kv).ok());
  const std::vector<int32_t> tokens = {seq[1], seq[2]}, rows = {0, 4};
  const BatchSequence m = sequence(f, 0, 2, LogitsMode::kLast, 1);
  const Status st = f.mtp->run(tokens, rows, DraftHeadRunner::HiddenFrom::kTarget, {&m, 1}, *f.draft_kv);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
}

TEST(DeepseekV4Mtp, AModelWithoutMtpLayersHasNoDraftHead) {
  auto model = Model::load((fs::path(DEEPINFER_TEST_DATA) / "golden" / "dsv4_tiny").string(), testing::test_backend(),
                           {.draft_layers = true, .token_classes = {}});
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_TRUE((*model)->draft_kv_groups().empty());
  // The MTP layers are left out unless asked for.
  auto without = testing::load_model(kDir.string());
  ASSERT_TRUE(without.ok()) << without.status().to_string();
  EXPECT_TRUE((*without)->draft_kv_groups().empty());
  EXPECT_EQ((*without)->source().find("mtp.0.e_proj.weight"), nullptr);
  // Draft layers do not shape the model's own KV: the fingerprint that keys its prefix cache and
  // KV store pages is the same with them loaded or not.
  auto with = Model::load(kDir.string(), testing::test_backend(), {.draft_layers = true, .token_classes = {}});
  ASSERT_TRUE(with.ok()) << with.status().to_string();
  ASSERT_NE((*with)->source().find("mtp.0.e_proj.weight"), nullptr);
  ThreadPool pool(1);
  EXPECT_EQ(model_fingerprint((*with)->source(), pool), model_fingerprint((*without)->source(), pool));
  auto runner = (*model)->new_batch_runner();
  EXPECT_EQ((*model)->new_draft_head_runner(*runner), nullptr);
  const int64_t n_blocks = 4;
  EXPECT_EQ((*model)->new_draft_kv_cache(16, DType::kF32, {&n_blocks, 1}).status().code(),
            StatusCode::kFailedPrecondition);
}

// The engine's drafter over the same rows: after the target's pass over the prompt (its first
// token sampled), the drafts are the reference's chain; after a verification pass that kept some
// positions, the first draft is the reference's true row at the new last position.
TEST(DeepseekV4Mtp, DrafterProposesTheReferenceChain) {
  Fixture f;
  make(&f);
  if (::testing::Test::HasFatalFailure()) return;
  const auto seq = f.golden["sequence"].get<std::vector<int32_t>>();
  const auto n = f.golden["chain_context"].get<int64_t>();  // prompt + the first sampled token
  const auto want = f.golden["chain_tokens"].get<std::vector<int32_t>>();
  const auto n_groups = static_cast<int>(f.model->kv_groups().size());
  const int64_t n_blocks = kBlocks;
  speculative::MtpDrafter::Parts parts;
  parts.runner = f.model->new_draft_head_runner(*f.target);
  parts.kv = std::move(f.model->new_draft_kv_cache(kBlock, DType::kF32, {&n_blocks, 1})).value();
  parts.kv_config.groups = parts.kv->groups();
  parts.kv_config.enable_prefix_caching = false;
  ASSERT_TRUE(kv::KvCacheManager::validate(parts.kv_config).ok());
  speculative::MtpDrafter drafter(std::move(parts), {f.model->config().n_vocab, 0.0f});
  const kv::RequestId id = 7;

  // Prefill of the prompt (n - 1 tokens) in one chunk at rows 3.. of a pass whose first rows
  // belong to another sequence (the drafter must read the right rows).
  const std::vector<int32_t> other = {5, 6, 7};
  std::vector<int32_t> pass(other);
  pass.insert(pass.end(), seq.begin(), seq.begin() + (n - 1));
  std::vector<int32_t> other_table = {7};
  BatchSequence a = sequence(f, 0, 3, LogitsMode::kNone, n_groups);
  for (int g = 0; g < n_groups; ++g) a.block_tables[static_cast<size_t>(g)] = other_table;
  const BatchSequence b = sequence(f, 0, n - 1, LogitsMode::kNone, n_groups);
  const std::vector<BatchSequence> batch = {a, b};
  ASSERT_TRUE(f.target->run(pass, batch, *f.kv).ok());
  const std::span<const int32_t> context(seq.data(), static_cast<size_t>(n));
  const speculative::MtpDrafter::Chunk chunk{id, 0, n - 1, 3, context};
  ASSERT_TRUE(drafter.observe({&chunk, 1}).ok());
  speculative::Draft d;
  const speculative::MtpDrafter::Job job{id, context, static_cast<int32_t>(want.size()), &d};
  ASSERT_TRUE(drafter.propose({&job, 1}).ok());
  EXPECT_EQ(std::vector<int32_t>(d.view().begin(), d.view().end()), want);
  for (int32_t j = 0; j < d.n; ++j) EXPECT_GT(d.confidence[static_cast<size_t>(j)], 0.0f);

  // A verification pass over positions n-1 .. n+3 that keeps three (the rest rejected): the
  // sequence now ends at n + 3, and its first draft reads the true row at n + 1.
  const BatchSequence v = sequence(f, n - 1, 5, LogitsMode::kNone, n_groups);
  ASSERT_TRUE(f.target->run(std::span<const int32_t>(seq).subspan(static_cast<size_t>(n - 1), 5), {&v, 1}, *f.kv).ok());
  const std::span<const int32_t> longer(seq.data(), static_cast<size_t>(n + 3));
  const speculative::MtpDrafter::Chunk verified{id, n - 1, 5, 0, longer};
  ASSERT_TRUE(drafter.observe({&verified, 1}).ok());
  const speculative::MtpDrafter::Job next{id, longer, 2, &d};
  ASSERT_TRUE(drafter.propose({&next, 1}).ok());
  ASSERT_EQ(d.n, 2);
  const auto ref = f.golden["mtp_logits"][static_cast<size_t>(n + 1)].get<std::vector<float>>();
  EXPECT_EQ(d.tokens[0], Sampler::argmax(ref));

  // The chained pass replaced the rows the chain started from: without a new observe there is
  // nothing to draft from.
  ASSERT_TRUE(drafter.propose({&next, 1}).ok());
  EXPECT_EQ(d.n, 0);
  drafter.release(id);
}

GenerationRequest greedy(const std::vector<int32_t>& prompt, std::optional<SpeculativeMethod> method) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0.0f;
  r.sampling.ignore_eos = true;
  r.max_tokens = 24;
  r.detokenize = false;
  r.speculative_method = method;
  return r;
}

std::vector<int32_t> collect(RequestHandle& h) {
  std::vector<int32_t> out;
  while (auto e = h.next()) out.insert(out.end(), e->tokens.begin(), e->tokens.end());
  return out;
}

EngineConfig mtp_engine_config() {
  EngineConfig cfg;
  cfg.model_path = kDir.string();
  cfg.threads = 1;
  cfg.block_size = 8;  // whole HCA rows (8 tokens)
  cfg.kv_cache_dtype = KvCacheDtype::kF32;
  cfg.kv_cache_tokens = 2048;
  cfg.swa_replay_tokens = 64;  // exact replay after a prefix hit (dsv4_engine_test.cpp)
  return cfg;
}

// Every prompt at once; request i asks for methods[i % size] (nullopt: the engine's method).
std::vector<std::vector<int32_t>> run_all(const EngineConfig& cfg, const std::vector<std::vector<int32_t>>& prompts,
                                          const std::vector<std::optional<SpeculativeMethod>>& methods,
                                          EngineStats* stats) {
  auto engine = Engine::create(cfg);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return {};
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (size_t i = 0; i < prompts.size(); ++i) {
    handles.push_back(std::move((*engine)->submit(greedy(prompts[i], methods[i % methods.size()]))).value());
  }
  std::vector<std::vector<int32_t>> out;
  for (auto& h : handles) out.push_back(collect(*h));
  *stats = (*engine)->stats();
  EXPECT_EQ(stats->kv_usage, 0.0) << "every block went back";
  return out;
}

// Greedy tokens with MTP drafts equal plain decoding's: all requests batched, with prefill
// chunks that end inside windows, with preemption and recompute, and beside requests of other
// methods. The random MTP's drafts are mostly rejected, so rollback runs at every step.
TEST(DeepseekV4Mtp, EngineWithMtpDraftsGivesPlainTokens) {
  const auto g = testing::read_golden(kDir);
  const auto seq = g["sequence"].get<std::vector<int32_t>>();
  const std::vector<int32_t> prompt(seq.begin(), seq.begin() + 40);
  std::vector<std::vector<int32_t>> prompts = {prompt};
  for (size_t n : {5u, 17u, 32u}) prompts.emplace_back(prompt.begin(), prompt.begin() + n);
  for (size_t n : {1u, 11u, 29u, 46u}) {
    std::vector<int32_t>& p = prompts.emplace_back();
    for (size_t i = 0; i < n; ++i) p.push_back(static_cast<int32_t>(2 + (i * 37 + n * 11) % 126));
  }
  EngineStats stats;
  const auto plain = run_all(mtp_engine_config(), prompts, {std::nullopt}, &stats);
  ASSERT_EQ(plain.size(), prompts.size());
  EXPECT_EQ(plain[0], std::vector<int32_t>(seq.begin() + 40, seq.end())) << "transformers' greedy continuation";

  struct Case {
    const char* name;
    SpeculativeSchedule schedule;
    int64_t budget, max_seqs, kv_tokens;
    std::vector<std::optional<SpeculativeMethod>> methods;
  };
  const std::optional<SpeculativeMethod> mtp = SpeculativeMethod::kMtp;
  const Case cases[] = {
      {"batched, fixed", SpeculativeSchedule::kFixed, 2048, 256, 2048, {mtp}},
      {"batched, confidence", SpeculativeSchedule::kConfidence, 2048, 256, 2048, {mtp}},
      {"prefill chunks of 7", SpeculativeSchedule::kFixed, 7, 3, 2048, {mtp}},
      {"preemption", SpeculativeSchedule::kFixed, 16, 256, 96, {mtp}},
      {"mixed methods", SpeculativeSchedule::kFixed, 2048, 256, 2048,
       {mtp, SpeculativeMethod::kNgram, SpeculativeMethod::kNone, SpeculativeMethod::kSuffix}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EngineConfig cfg = mtp_engine_config();
    cfg.speculative.method = SpeculativeMethod::kMtp;
    cfg.speculative.schedule = c.schedule;
    cfg.max_num_batched_tokens = c.budget;
    cfg.max_num_seqs = c.max_seqs;
    cfg.kv_cache_tokens = c.kv_tokens;
    EXPECT_EQ(run_all(cfg, prompts, c.methods, &stats), plain);
    const auto& methods = stats.speculative.methods;
    const auto it = std::find_if(methods.begin(), methods.end(), [](const auto& m) { return m.method == "mtp"; });
    ASSERT_NE(it, methods.end());
    if (c.schedule == SpeculativeSchedule::kFixed) {
      EXPECT_GT(it->draft_tokens, 0);
    }
  }
}

// dsv4_mtp with `from` replaced by `to` (same length) in the safetensors header, so that a
// tensor is renamed or its shape changed while every offset stays valid.
fs::path edited_weights(const std::string& name, const std::string& from, const std::string& to) {
  EXPECT_EQ(from.size(), to.size());
  const fs::path dir = fs::temp_directory_path() / ("dsv4_mtp_bad_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(kDir / "config.json", dir / "config.json");
  std::ifstream in(kDir / "model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) bytes.replace(at, from.size(), to);
  std::ofstream(dir / "model.safetensors", std::ios::binary) << bytes;
  return dir;
}

// A checkpoint whose MTP layer is incomplete or misshapen: one error naming the tensor when the
// layer is asked for; without it, the model loads (the layer is not read).
TEST(DeepseekV4Mtp, ABrokenMtpLayerIsOneClearError) {
  const fs::path missing = edited_weights("missing", "\"mtp.0.h_proj.weight\"", "\"mtp.0.h_prox.weight\"");
  auto m = Model::load(missing.string(), testing::test_backend(), {.draft_layers = true, .token_classes = {}});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("mtp.0.h_proj.weight"), std::string::npos) << m.status().to_string();
  EXPECT_TRUE(testing::load_model(missing.string()).ok());
  fs::remove_all(missing);
  // e_proj [32, 32] -> [32, 16]: the header's shape no longer matches (the loader's own check).
  const fs::path shape = edited_weights("shape", "\"mtp.0.e_proj.weight\":{\"dtype\":\"F32\",\"shape\":[32,32]",
                                        "\"mtp.0.e_proj.weight\":{\"dtype\":\"F32\",\"shape\":[32,16]");
  auto s = Model::load(shape.string(), testing::test_backend(), {.draft_layers = true, .token_classes = {}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("mtp.0.e_proj.weight"), std::string::npos) << s.status().to_string();
  fs::remove_all(shape);
}

TEST(DeepseekV4Mtp, MtpWithoutMtpLayersIsOneClearError) {
  EngineConfig cfg = mtp_engine_config();
  cfg.model_path = (fs::path(DEEPINFER_TEST_DATA) / "golden" / "dsv4_tiny").string();
  cfg.speculative.method = SpeculativeMethod::kMtp;
  auto engine = Engine::create(cfg);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("MTP layers"), std::string::npos) << engine.status().to_string();
  // A request asking for it from an engine without them.
  // A request asking for it from an engine that did not load them (here a model that has them).
  cfg.model_path = kDir.string();
  cfg.speculative.method = SpeculativeMethod::kNone;
  auto plain = std::move(Engine::create(cfg)).value();
  auto r = plain->submit(greedy({3, 4, 5}, SpeculativeMethod::kMtp));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--speculative-method mtp"), std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace deepinfer
