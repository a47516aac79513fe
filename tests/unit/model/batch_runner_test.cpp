// Flattened batches over a paged KV cache: several sequences with scattered block tables,
// mixing prefill chunks and decodes, give each sequence bitwise the logits it gets alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/model.h"
#include "test_backend.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

fs::path tiny_dir(const std::string& name) { return fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny" / name; }

// The prompt the tiny model's golden data was made from.
std::vector<int32_t> golden_prompt(const fs::path& dir) {
  std::ifstream in(dir / "golden.json");
  return nlohmann::json::parse(in)["prompt_ids"].get<std::vector<int32_t>>();
}

class BatchRunnerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchRunnerTest, MixedBatchEqualsEachSequenceAlone) {
  auto model = testing::load_model(tiny_dir(GetParam()).string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto prompt = golden_prompt(tiny_dir(GetParam()));
  ASSERT_GE(prompt.size(), 33u);

  // Three sequences: prompts of 13, 30 and 5 tokens, then two more tokens each.
  const std::vector<std::vector<int32_t>> seqs = {
      {prompt.begin(), prompt.begin() + 15}, {prompt.begin() + 1, prompt.begin() + 33}, {prompt.begin() + 3, prompt.begin() + 10}};
  const std::vector<int64_t> n_prompt = {13, 30, 5};

  // Reference: each sequence alone, token by token after its prompt.
  std::vector<std::vector<std::vector<float>>> alone(seqs.size());
  for (size_t s = 0; s < seqs.size(); ++s) {
    auto ctx = (*model)->new_context(64);
    ASSERT_TRUE(ctx.ok());
    ASSERT_TRUE((*ctx)->eval(std::span(seqs[s]).first(n_prompt[s]), LogitsMode::kLast).ok());
    alone[s].emplace_back((*ctx)->logits(0).begin(), (*ctx)->logits(0).end());
    for (size_t i = n_prompt[s]; i < seqs[s].size(); ++i) {
      ASSERT_TRUE((*ctx)->eval(std::span(seqs[s]).subspan(i, 1), LogitsMode::kLast).ok());
      alone[s].emplace_back((*ctx)->logits(0).begin(), (*ctx)->logits(0).end());
    }
  }

  // Batched: block size 4, tables interleaved so no sequence owns contiguous memory.
  auto kv = std::move((*model)->new_kv_cache(4, DType::kF32, 40)).value();
  const std::vector<std::vector<int32_t>> tables = {
      {37, 1, 20, 5, 9}, {0, 33, 2, 7, 11, 13, 15, 17, 19, 21}, {39, 3, 30}};
  auto runner = (*model)->new_batch_runner();
  std::vector<int64_t> done(seqs.size(), 0);
  // Step 1: sequence 1's prompt in two chunks (17 now, the rest next step), the others whole.
  // Step 2: sequence 1's second chunk beside two decodes. Steps 3-4: decodes.
  const std::vector<std::vector<int64_t>> plan = {{13, 17, 5}, {1, 13, 1}, {1, 1, 1}, {0, 1, 0}};
  std::vector<size_t> checked(seqs.size(), 0);
  for (const auto& step : plan) {
    std::vector<int32_t> tokens;
    std::vector<BatchSequence> batch;
    std::vector<size_t> members;
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (step[s] == 0) continue;
      tokens.insert(tokens.end(), seqs[s].begin() + done[s], seqs[s].begin() + done[s] + step[s]);
      const bool complete = done[s] + step[s] >= n_prompt[s];
      BatchSequence& member = batch.emplace_back();
      member.n_tokens = step[s];
      member.first_position = done[s];
      member.block_tables[0] = tables[s];
      member.logits = complete ? LogitsMode::kLast : LogitsMode::kNone;
      members.push_back(s);
    }
    ASSERT_TRUE(runner->run(tokens, batch, *kv).ok());
    int64_t row = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      const size_t s = members[i];
      done[s] += step[s];
      if (batch[i].logits == LogitsMode::kNone) continue;
      ASSERT_LT(checked[s], alone[s].size());
      EXPECT_TRUE(bitwise_equal(runner->logits(row), alone[s][checked[s]])) << "sequence " << s << " output " << checked[s];
      ++checked[s];
      ++row;
    }
    EXPECT_EQ(row, runner->n_logit_rows());
  }
  for (size_t s = 0; s < seqs.size(); ++s) EXPECT_EQ(checked[s], alone[s].size()) << s;
}

class GreedyRowsTest : public ::testing::TestWithParam<std::string> {};

// Rows that ask only for their greedy choice (kLastArgmax) get the first maximum of the logits
// they would have had, where every row of the pass asks so; a pass that also keeps logits keeps
// them for every row. A soft-capped head (its rounding can tie logits) always keeps logits.
TEST_P(GreedyRowsTest, NameTheFirstMaximumOfTheirLogits) {
  auto model = testing::load_model(tiny_dir(GetParam()).string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto prompt = golden_prompt(tiny_dir(GetParam()));
  ASSERT_GE(prompt.size(), 20u);
  const std::vector<std::vector<int32_t>> seqs = {
      {prompt.begin(), prompt.begin() + 9}, {prompt.begin() + 2, prompt.begin() + 20}, {prompt.begin() + 5, prompt.begin() + 8}};
  std::vector<std::vector<float>> alone;
  for (const auto& seq : seqs) {
    auto ctx = std::move((*model)->new_context(32)).value();
    ASSERT_TRUE(ctx->eval(seq, LogitsMode::kLast).ok());
    alone.emplace_back(ctx->logits(0).begin(), ctx->logits(0).end());
  }
  const bool capped = GetParam() == "gemma3_softcap_linear";
  for (bool mixed : {false, true}) {
    auto kv = std::move((*model)->new_kv_cache(4, DType::kF32, 24)).value();
    std::vector<std::vector<int32_t>> tables(seqs.size());
    std::vector<int32_t> tokens;
    std::vector<BatchSequence> batch;
    int32_t next_block = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      for (size_t b = 0; b < (seqs[s].size() + 3) / 4; ++b) tables[s].push_back(next_block++);
      tokens.insert(tokens.end(), seqs[s].begin(), seqs[s].end());
      BatchSequence& member = batch.emplace_back();
      member.n_tokens = static_cast<int64_t>(seqs[s].size());
      // Every group reads the same blocks: the window (Gemma 3's) reaches past these prompts.
      for (size_t g = 0; g < (*model)->kv_groups().size(); ++g) member.block_tables[g] = tables[s];
      member.logits = mixed && s == 1 ? LogitsMode::kLast : LogitsMode::kLastArgmax;
    }
    auto runner = (*model)->new_batch_runner();
    ASSERT_TRUE(runner->run(tokens, batch, *kv).ok());
    ASSERT_EQ(runner->n_logit_rows(), 3);
    for (size_t s = 0; s < seqs.size(); ++s) {
      const auto row = static_cast<int64_t>(s);
      if (mixed || capped) {
        EXPECT_EQ(runner->greedy_token(row), -1) << s;
        EXPECT_TRUE(bitwise_equal(runner->logits(row), alone[s])) << s;
      } else {
        const auto first = static_cast<int32_t>(std::max_element(alone[s].begin(), alone[s].end()) - alone[s].begin());
        EXPECT_EQ(runner->greedy_token(row), first) << s;
      }
    }
  }
}

TEST_P(BatchRunnerTest, RejectsBadBatches) {
  auto model = testing::load_model(tiny_dir(GetParam()).string());
  ASSERT_TRUE(model.ok());
  auto kv = std::move((*model)->new_kv_cache(4, DType::kF32, 4)).value();
  auto runner = (*model)->new_batch_runner();
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5};
  const std::vector<int32_t> short_table = {0};
  const std::vector<int32_t> bad_table = {0, 9};
  const std::vector<int32_t> good_table = {0, 1};
  BatchSequence seq;
  seq.n_tokens = 5;
  seq.block_tables[0] = short_table;
  EXPECT_EQ(runner->run(tokens, std::span(&seq, 1), *kv).code(), StatusCode::kInvalidArgument);
  seq.block_tables[0] = bad_table;
  EXPECT_EQ(runner->run(tokens, std::span(&seq, 1), *kv).code(), StatusCode::kInvalidArgument);
  seq.block_tables[0] = good_table;
  seq.n_tokens = 4;  // does not add up to 5 tokens
  EXPECT_EQ(runner->run(tokens, std::span(&seq, 1), *kv).code(), StatusCode::kInvalidArgument);
  seq.n_tokens = 5;
  const std::vector<int32_t> out_of_vocab = {1, 2, 3, 4, 1 << 30};
  EXPECT_EQ(runner->run(out_of_vocab, std::span(&seq, 1), *kv).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(runner->run(tokens, std::span(&seq, 1), *kv).ok());
}

INSTANTIATE_TEST_SUITE_P(Tiny, BatchRunnerTest, ::testing::Values("llama_gqa_tied", "qwen2_gqa", "llama3_rope_scaling"));

INSTANTIATE_TEST_SUITE_P(Tiny, GreedyRowsTest,
                         ::testing::Values("llama_gqa_tied", "qwen2_gqa", "gemma3_sliding", "gemma3_softcap_linear"));

// Gemma 3 (window 8, layers sliding, sliding, full, sliding) over a cache with a small sliding
// pool: the sliding layers' table keeps only the blocks inside the window (-1 below it), four
// physical blocks used as a ring, and a replay over shared full-attention blocks.
class SlidingPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path dir = tiny_dir("gemma3_sliding");
    auto model = testing::load_model(dir.string());
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    model_ = std::move(model).value();
    ASSERT_EQ(model_->kv_groups().size(), 2u);  // full and sliding
    prompt_ = golden_prompt(dir);
    ASSERT_EQ(prompt_.size(), 40u);
    auto ctx = std::move(model_->new_context(64)).value();
    ASSERT_TRUE(ctx->eval(prompt_, LogitsMode::kLast).ok());
    reference_.assign(ctx->logits(0).begin(), ctx->logits(0).end());
  }

  // Runs prompt[from..40) in chunks of 4 with the sliding ring in physical blocks ring..ring+3.
  std::unique_ptr<backend::KvCache> make_kv(int64_t n_full, int64_t n_sliding) {
    const int64_t n_blocks[] = {n_full, n_sliding};
    return std::move(model_->new_kv_cache(4, DType::kF32, n_blocks)).value();
  }

  std::vector<float> run_chunks(backend::KvCache& kv, int64_t from, int64_t n_shared, int32_t ring) {
    auto runner = model_->new_batch_runner();
    const std::vector<int32_t> full = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    std::vector<int32_t> sliding(10, -1);
    for (int64_t p = from; p < 40; p += 4) {
      const int64_t b = p / 4;
      sliding[static_cast<size_t>(b)] = ring + static_cast<int32_t>(b % 4);
      // Blocks wholly below the next query's window are gone (their ring slot is reused).
      for (int64_t d = 0; d < b && (d + 1) * 4 - 1 < p - 8 + 1; ++d) sliding[static_cast<size_t>(d)] = -1;
      BatchSequence seq;
      seq.n_tokens = 4;
      seq.first_position = p;
      seq.block_tables[0] = full;
      seq.block_tables[1] = sliding;
      seq.logits = p + 4 == 40 ? LogitsMode::kLast : LogitsMode::kNone;
      seq.replay_start = from;
      seq.n_shared = n_shared;
      EXPECT_TRUE(runner->run(std::span(prompt_).subspan(static_cast<size_t>(p), 4), std::span(&seq, 1), kv).ok())
          << p;
    }
    return {runner->logits(0).begin(), runner->logits(0).end()};
  }

  std::unique_ptr<Model> model_;
  std::vector<int32_t> prompt_;
  std::vector<float> reference_;
};

TEST_F(SlidingPoolTest, RingOfWindowBlocksGivesTheLogitsOfAWholeCache) {
  auto kv = make_kv(/*n_full=*/10, /*n_sliding=*/8);
  const int64_t kv_dim = model_->config().n_head_kv * model_->config().head_dim;
  EXPECT_EQ(kv->bytes(), (3 * 8 + 1 * 10) * 4 * kv_dim * 2 * sizeof(float));  // 3 sliding layers, 1 full
  EXPECT_TRUE(bitwise_equal(run_chunks(*kv, 0, 0, 0), reference_));
}

TEST_F(SlidingPoolTest, ReplayKeepsSharedFullRowsAndIsExactWithEnoughLookback) {
  auto kv = make_kv(10, 8);
  run_chunks(*kv, 0, 0, 0);
  // The only full layer is 2 (group 0); remember its shared rows (blocks 0..8 of the identity
  // table: positions 0..35), then replay from 4 with 36 tokens shared: 3 sliding layers x 7 + 8
  // <= 32 replayed tokens rebuild exact windows.
  ASSERT_EQ(kv->groups()[0].layers, std::vector<int32_t>{2});
  auto shared_rows = [&] {
    std::vector<uint8_t> bytes(kv->groups()[0].block_bytes() * 9);
    for (int32_t b = 0; b < 9; ++b) {
      const size_t n = kv->groups()[0].block_bytes();
      EXPECT_TRUE(kv->read_block(0, b, std::span(bytes).subspan(b * n, n)).ok());
    }
    return bytes;
  };
  const std::vector<uint8_t> before = shared_rows();
  EXPECT_TRUE(bitwise_equal(run_chunks(*kv, /*from=*/4, /*n_shared=*/36, /*ring=*/4), reference_));
  EXPECT_EQ(shared_rows(), before);
  // One window (from 28): the rebuilt rows come from cut windows, so the logits differ and
  // layer 2's recomputed rows 28..35 would too: the shared ones must still be the cold run's.
  const std::vector<float> approx = run_chunks(*kv, /*from=*/28, /*n_shared=*/36, /*ring=*/0);
  EXPECT_FALSE(bitwise_equal(approx, reference_));
  for (size_t i = 0; i < approx.size(); ++i) ASSERT_NEAR(approx[i], reference_[i], 1.0f) << i;
  EXPECT_EQ(shared_rows(), before);
}

TEST_F(SlidingPoolTest, SlidingTableMustCoverTheWindowOnly) {
  auto kv = make_kv(10, 8);
  auto runner = model_->new_batch_runner();
  const std::vector<int32_t> full = {0, 1, 2, 3, 4};
  BatchSequence seq;
  seq.n_tokens = 4;
  seq.first_position = 16;  // reads from position 9 (block 2) on
  seq.block_tables[0] = full;
  std::vector<int32_t> sliding = {-1, -1, 2, 3, 4};
  seq.block_tables[1] = sliding;
  EXPECT_TRUE(runner->run(std::span(prompt_).first(4), std::span(&seq, 1), *kv).ok());
  sliding = {-1, -1, -1, 3, 4};  // block 2 still in the window
  EXPECT_EQ(runner->run(std::span(prompt_).first(4), std::span(&seq, 1), *kv).code(),
            StatusCode::kInvalidArgument);
  sliding = {-1, -1, 2, 3, 8};  // past the sliding pool
  EXPECT_EQ(runner->run(std::span(prompt_).first(4), std::span(&seq, 1), *kv).code(),
            StatusCode::kInvalidArgument);
  seq.replay_start = 17;  // past the first position
  sliding = {-1, -1, 2, 3, 4};
  EXPECT_EQ(runner->run(std::span(prompt_).first(4), std::span(&seq, 1), *kv).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deepinfer
