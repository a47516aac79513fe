// Flattened batches over a paged KV cache: several sequences with scattered block tables,
// mixing prefill chunks and decodes, give each sequence bitwise the logits it gets alone.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

class BatchRunnerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchRunnerTest, MixedBatchEqualsEachSequenceAlone) {
  const fs::path dir = fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny" / GetParam();
  auto model = Model::load(dir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  std::ifstream in(dir / "golden.json");
  const auto prompt = nlohmann::json::parse(in)["prompt_ids"].get<std::vector<int32_t>>();
  ASSERT_GE(prompt.size(), 33u);
  ThreadPool pool(2);

  // Three sequences: prompts of 13, 30 and 5 tokens, then two more tokens each.
  const std::vector<std::vector<int32_t>> seqs = {
      {prompt.begin(), prompt.begin() + 15}, {prompt.begin() + 1, prompt.begin() + 33}, {prompt.begin() + 3, prompt.begin() + 10}};
  const std::vector<int64_t> n_prompt = {13, 30, 5};

  // Reference: each sequence alone, token by token after its prompt.
  std::vector<std::vector<std::vector<float>>> alone(seqs.size());
  for (size_t s = 0; s < seqs.size(); ++s) {
    auto ctx = (*model)->new_context(64);
    ASSERT_TRUE(ctx.ok());
    ASSERT_TRUE((*ctx)->eval(std::span(seqs[s]).first(n_prompt[s]), LogitsMode::kLast, pool).ok());
    alone[s].emplace_back((*ctx)->logits(0).begin(), (*ctx)->logits(0).end());
    for (size_t i = n_prompt[s]; i < seqs[s].size(); ++i) {
      ASSERT_TRUE((*ctx)->eval(std::span(seqs[s]).subspan(i, 1), LogitsMode::kLast, pool).ok());
      alone[s].emplace_back((*ctx)->logits(0).begin(), (*ctx)->logits(0).end());
    }
  }

  // Batched: block size 4, tables interleaved so no sequence owns contiguous memory.
  PagedKvCache kv((*model)->config(), 40, 4);
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
      batch.push_back({step[s], done[s], tables[s], complete ? LogitsMode::kLast : LogitsMode::kNone});
      members.push_back(s);
    }
    ASSERT_TRUE(runner->run(tokens, batch, kv, pool).ok());
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

TEST_P(BatchRunnerTest, RejectsBadBatches) {
  const fs::path dir = fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny" / GetParam();
  auto model = Model::load(dir.string());
  ASSERT_TRUE(model.ok());
  PagedKvCache kv((*model)->config(), 4, 4);
  auto runner = (*model)->new_batch_runner();
  ThreadPool pool(1);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5};
  const std::vector<int32_t> short_table = {0};
  const std::vector<int32_t> bad_table = {0, 9};
  const std::vector<int32_t> good_table = {0, 1};
  BatchSequence seq{5, 0, short_table, LogitsMode::kLast};
  EXPECT_EQ(runner->run(tokens, std::span(&seq, 1), kv, pool).code(), StatusCode::kInvalidArgument);
  seq.block_table = bad_table;
  EXPECT_EQ(runner->run(tokens, std::span(&seq, 1), kv, pool).code(), StatusCode::kInvalidArgument);
  seq.block_table = good_table;
  seq.n_tokens = 4;  // does not add up to 5 tokens
  EXPECT_EQ(runner->run(tokens, std::span(&seq, 1), kv, pool).code(), StatusCode::kInvalidArgument);
  seq.n_tokens = 5;
  const std::vector<int32_t> out_of_vocab = {1, 2, 3, 4, 1 << 30};
  EXPECT_EQ(runner->run(out_of_vocab, std::span(&seq, 1), kv, pool).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(runner->run(tokens, std::span(&seq, 1), kv, pool).ok());
}

INSTANTIATE_TEST_SUITE_P(Tiny, BatchRunnerTest, ::testing::Values("llama_gqa_tied", "qwen2_gqa", "llama3_rope_scaling"));

}  // namespace
}  // namespace deepinfer
