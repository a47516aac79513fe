// bench serve's datasets (exact lengths, shared prefixes, sessions, trace replay) and its arrival
// process (mean rate, burstiness, seeds), with token counters that need no server.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <map>
#include <set>
#include <sstream>

#include "cli/bench_serve_dataset.h"

namespace deepinfer::cli {
namespace {

// Every byte is a token: a tokenizer whose tokens do not line up with words, so a cut lands
// inside a word and the round trip must still give the exact count.
class ByteCounter final : public TokenCounter {
 public:
  Result<std::vector<int32_t>> tokenize(const std::string& text) override {
    ++calls;
    return std::vector<int32_t>(text.begin(), text.end());
  }
  Result<std::string> detokenize(const std::vector<int32_t>& ids) override { return std::string(ids.begin(), ids.end()); }
  bool exact() const override { return true; }
  int calls = 0;
};

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

TEST(BenchServeDataset, RandomPromptsHaveTheExactLength) {
  ByteCounter counter;
  DatasetOptions o;
  o.num_prompts = 20;
  o.random_input_len = 57;
  o.random_output_len = 9;
  auto jobs = make_dataset(o, counter);
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  ASSERT_EQ(jobs->size(), 20u);
  std::set<std::string> texts;
  for (const Job& j : *jobs) {
    ASSERT_EQ(j.requests.size(), 1u);
    EXPECT_EQ(j.requests[0].prompt_len, 57);
    EXPECT_EQ(j.requests[0].turns[0].text.size(), 57u);
    EXPECT_EQ(j.requests[0].output_len, 9);
    texts.insert(j.requests[0].turns[0].text);
  }
  EXPECT_EQ(texts.size(), 20u);  // random, not one prompt repeated
}

TEST(BenchServeDataset, RangeRatioBoundsBothLengths) {
  auto counter = make_word_counter();
  DatasetOptions o;
  o.num_prompts = 200;
  o.random_input_len = 100;
  o.random_output_len = 40;
  o.random_range_ratio = 0.5;
  auto jobs = make_dataset(o, *counter);
  ASSERT_TRUE(jobs.ok());
  int64_t lo = 1000, hi = 0;
  for (const Job& j : *jobs) {
    const RequestSpec& r = j.requests[0];
    EXPECT_EQ(static_cast<int64_t>(words(r.turns[0].text).size()), r.prompt_len);
    EXPECT_GE(r.prompt_len, 50);
    EXPECT_LE(r.prompt_len, 150);
    EXPECT_GE(r.output_len, 20);
    EXPECT_LE(r.output_len, 60);
    lo = std::min(lo, r.prompt_len);
    hi = std::max(hi, r.prompt_len);
  }
  EXPECT_LT(lo, 70);  // the range is used, not just its middle
  EXPECT_GT(hi, 130);
}

TEST(BenchServeDataset, SameSeedSameDataset) {
  auto counter = make_word_counter();
  DatasetOptions o;
  o.num_prompts = 5;
  o.random_input_len = 30;
  auto a = make_dataset(o, *counter), b = make_dataset(o, *counter);
  o.seed = 7;
  auto c = make_dataset(o, *counter);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ((*a)[3].requests[0].turns[0].text, (*b)[3].requests[0].turns[0].text);
  EXPECT_NE((*a)[3].requests[0].turns[0].text, (*c)[3].requests[0].turns[0].text);
}

TEST(BenchServeDataset, PrefixRepetitionSharesEachPrefixEqually) {
  auto counter = make_word_counter();
  DatasetOptions o;
  o.name = "prefix-repetition";
  o.num_prompts = 12;
  o.num_prefixes = 3;
  o.prefix_len = 20;
  o.suffix_len = 10;
  o.prefix_output_len = 7;
  auto jobs = make_dataset(o, *counter);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 12u);
  std::map<std::string, int> per_prefix;
  std::set<std::string> suffixes;
  for (const Job& j : *jobs) {
    std::vector<std::string> w = words(j.requests[0].turns[0].text);
    ASSERT_EQ(w.size(), 30u);
    EXPECT_EQ(j.requests[0].prompt_len, 30);
    EXPECT_EQ(j.requests[0].output_len, 7);
    per_prefix[std::accumulate(w.begin(), w.begin() + 20, std::string())]++;
    suffixes.insert(std::accumulate(w.begin() + 20, w.end(), std::string()));
  }
  ASSERT_EQ(per_prefix.size(), 3u);
  for (const auto& [prefix, n] : per_prefix) EXPECT_EQ(n, 4);
  EXPECT_EQ(suffixes.size(), 12u);
}

TEST(BenchServeDataset, MultiTurnSessionsAreChained) {
  auto counter = make_word_counter();
  DatasetOptions o;
  o.name = "multi-turn";
  o.num_prompts = 3;
  o.num_turns = 4;
  o.random_input_len = 10;
  o.random_output_len = 5;
  auto jobs = make_dataset(o, *counter);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 3u);
  for (const Job& j : *jobs) {
    EXPECT_TRUE(j.chained);
    ASSERT_EQ(j.requests.size(), 4u);
    for (const RequestSpec& r : j.requests) {
      ASSERT_EQ(r.turns.size(), 1u);
      EXPECT_EQ(r.turns[0].role, "user");
      EXPECT_EQ(r.prompt_len, 10);
    }
  }
}

TEST(BenchServeDataset, SharegptConversationsEndWithTheUser) {
  auto counter = make_word_counter();
  DatasetOptions o;
  o.name = "sharegpt";
  o.num_prompts = 50;
  auto jobs = make_dataset(o, *counter);
  ASSERT_TRUE(jobs.ok());
  std::set<size_t> shapes;
  for (const Job& j : *jobs) {
    const RequestSpec& r = j.requests[0];
    EXPECT_EQ(r.turns.size() % 2, 1u);
    EXPECT_EQ(r.turns.back().role, "user");
    EXPECT_GE(r.prompt_len, 4);
    EXPECT_LE(r.prompt_len, 1024);
    EXPECT_LE(r.prompt_len + r.output_len, 2048);
    shapes.insert(r.turns.size());
  }
  EXPECT_GT(shapes.size(), 1u);
}

TEST(BenchServeDataset, MooncakeTraceSharesBlocksByHashId) {
  const auto path = std::filesystem::temp_directory_path() / "bench_serve_trace_test.jsonl";
  {
    std::ofstream f(path);
    f << R"({"timestamp": 1000, "input_length": 1024, "output_length": 512, "hash_ids": [5, 6]})" << "\n";
    f << R"({"timestamp": 1500, "input_length": 768, "output_length": 256, "hash_ids": [5, 7]})" << "\n";
  }
  auto counter = make_word_counter();
  DatasetOptions o;
  o.name = "mooncake";
  o.dataset_path = path.string();
  o.trace_block_tokens = 8;  // lengths scale by 8 / 512: 16 and 12 tokens, 8 and 4 out
  auto jobs = make_dataset(o, *counter);
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  ASSERT_EQ(jobs->size(), 2u);
  const auto a = words((*jobs)[0].requests[0].turns[0].text), b = words((*jobs)[1].requests[0].turns[0].text);
  ASSERT_EQ(a.size(), 16u);
  ASSERT_EQ(b.size(), 12u);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 8, b.begin()));  // block 5 in both
  EXPECT_FALSE(std::equal(a.begin() + 8, a.begin() + 12, b.begin() + 8));
  EXPECT_EQ((*jobs)[0].requests[0].output_len, 8);
  EXPECT_DOUBLE_EQ((*jobs)[0].arrival, 0.0);
  EXPECT_DOUBLE_EQ((*jobs)[1].arrival, 0.5);

  std::ofstream(path, std::ios::app) << R"({"timestamp": 2000, "input_length": "many"})" << "\n";
  o.num_prompts = 10;
  auto bad = make_dataset(o, *counter);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(":3: \"input_length\""), std::string::npos) << bad.status().message();
  std::filesystem::remove(path);
}

TEST(BenchServeDataset, UnknownDatasetIsNamed) {
  auto counter = make_word_counter();
  DatasetOptions o;
  o.name = "sonnet";
  auto r = make_dataset(o, *counter);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'sonnet'"), std::string::npos);
}

std::vector<double> gaps(const std::vector<double>& at) {
  std::vector<double> g(at.size());
  for (size_t i = 0; i < at.size(); ++i) g[i] = at[i] - (i ? at[i - 1] : 0.0);
  return g;
}

double coefficient_of_variation(const std::vector<double>& g) {
  const double mean = std::accumulate(g.begin(), g.end(), 0.0) / g.size();
  double sq = 0;
  for (double v : g) sq += (v - mean) * (v - mean);
  return std::sqrt(sq / g.size()) / mean;
}

TEST(BenchServeArrival, PoissonAtTheRate) {
  const std::vector<double> at = arrival_times(4000, 20.0, 1.0, 3);
  ASSERT_EQ(at.size(), 4000u);
  EXPECT_NEAR(at.back(), 200.0, 1e-9);  // rescaled: the n-th arrival at n / rate
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end()));
  // Requests per 10-second window: mean 200; a Poisson count has sd sqrt(200) ~ 14.
  std::vector<int> windows(20, 0);
  for (double t : at) windows[std::min<size_t>(19, static_cast<size_t>(t / 10))]++;
  for (int w : windows) EXPECT_NEAR(w, 200, 70);
  EXPECT_NEAR(coefficient_of_variation(gaps(at)), 1.0, 0.06);  // exponential gaps
}

TEST(BenchServeArrival, BurstinessShapesTheGaps) {
  EXPECT_NEAR(coefficient_of_variation(gaps(arrival_times(4000, 5.0, 4.0, 1))), 0.5, 0.04);  // 1 / sqrt(4)
  EXPECT_NEAR(coefficient_of_variation(gaps(arrival_times(4000, 5.0, 0.25, 1))), 2.0, 0.25);
  EXPECT_NEAR(coefficient_of_variation(gaps(arrival_times(100, 5.0, INFINITY, 1))), 0.0, 1e-9);
}

TEST(BenchServeArrival, SeededAndInfiniteRate) {
  EXPECT_EQ(arrival_times(50, 3.0, 1.0, 9), arrival_times(50, 3.0, 1.0, 9));
  EXPECT_NE(arrival_times(50, 3.0, 1.0, 9), arrival_times(50, 3.0, 1.0, 10));
  for (double t : arrival_times(10, INFINITY, 1.0, 0)) EXPECT_EQ(t, 0.0);
}

}  // namespace
}  // namespace deepinfer::cli
