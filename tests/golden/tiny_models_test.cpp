// Golden equality with Hugging Face transformers on tiny random models
// (tests/golden/tiny/<name>/: config.json, safetensors, golden.json from
// tools/golden/make_tiny_models.py), loaded from safetensors and, for some, from GGUF copies
// (tests/golden/tiny_gguf/), run whole, in chunks, and batched over a paged cache.
//
// Tolerance: both sides compute in float32 from the same float32 (or bf16-widened) weights, so
// logits differ only by summation order and libm rounding. Over 2-3 layers that stays near
// 1e-6 relative to the logit scale (measured: at most 8e-6 absolute for logits up to ~4);
// we allow 2e-5 x (1 + max |logit|), several times
// of headroom and still far below what a wrong rope pairing, a missing bias or a wrong GQA
// mapping produces (those move logits by O(1)).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "model/arch/registry.h"
#include "model/model.h"
#include "test_backend.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> tiny_model_dirs() {
  std::vector<std::string> dirs;
  const fs::path root = fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny";
  if (fs::exists(root)) {
    for (const auto& e : fs::directory_iterator(root)) {
      if (fs::exists(e.path() / "golden.json")) dirs.push_back(e.path().string());
    }
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

struct Compare {
  double max_err = 0;
  double max_ref = 0;
};

Compare compare_logits(std::span<const float> ours, const nlohmann::json& ref) {
  Compare c;
  EXPECT_EQ(ours.size(), ref.size());
  for (size_t i = 0; i < ours.size() && i < ref.size(); ++i) {
    const double r = ref[i].get<double>();
    c.max_err = std::max(c.max_err, std::abs(ours[i] - r));
    c.max_ref = std::max(c.max_ref, std::abs(r));
  }
  return c;
}

class TinyModel : public ::testing::TestWithParam<std::string> {};

TEST(TinyModels, EveryRegisteredArchitectureHasGoldenData) {
  std::set<std::string> covered;
  for (const std::string& dir : tiny_model_dirs()) {
    auto model = testing::load_model(dir);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    covered.insert((*model)->config().architecture);
  }
  // Architectures whose golden data has a directory and a test of its own (its format differs
  // from tiny/'s: per-position logits, decode steps, indexer gaps).
  if (fs::exists(fs::path(DEEPINFER_TEST_DATA) / "golden" / "dsv4_tiny" / "golden.json")) covered.insert("deepseek_v4");
  if (fs::exists(fs::path(DEEPINFER_TEST_DATA) / "golden" / "dsv41_tiny" / "golden.json")) covered.insert("deepseek_v41");
  for (const ArchEntry& arch : registered_architectures()) {
    EXPECT_TRUE(covered.count(std::string(arch.name)))
        << "architecture '" << arch.name << "' is registered without golden data under tests/golden/tiny/";
  }
}

TEST(TinyModels, AllPresent) {
  // The golden set must not silently vanish: at least the six configurations of issue 2.
  EXPECT_GE(tiny_model_dirs().size(), 6u);
}

TEST_P(TinyModel, LogitsMatchTransformers) {
  const fs::path dir = GetParam();
  const auto golden = read_json(dir / "golden.json");
  auto model = testing::load_model(dir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto prompt = golden["prompt_ids"].get<std::vector<int32_t>>();

  // Whole prompt in one pass, and again in three uneven chunks: the KV cache must make them equal.
  for (const std::vector<size_t>& cuts : {std::vector<size_t>{prompt.size()}, std::vector<size_t>{1, 7, prompt.size()}}) {
    auto ctx = (*model)->new_context(256);
    ASSERT_TRUE(ctx.ok());
    size_t begin = 0;
    for (size_t cut : cuts) {
      std::span<const int32_t> piece(prompt.data() + begin, cut - begin);
      ASSERT_TRUE((*ctx)->eval(piece, LogitsMode::kAll).ok());
      for (size_t p = begin; p < cut; ++p) {
        Compare c = compare_logits((*ctx)->logits(static_cast<int64_t>(p - begin)), golden["logits"][p]);
        EXPECT_LE(c.max_err, 2e-5 * (1.0 + c.max_ref)) << dir.filename() << " position " << p;
      }
      begin = cut;
    }
  }
}

TEST_P(TinyModel, GreedyContinuationMatchesTransformers) {
  const fs::path dir = GetParam();
  const auto golden = read_json(dir / "golden.json");
  auto model = testing::load_model(dir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto prompt = golden["prompt_ids"].get<std::vector<int32_t>>();
  const auto expected = golden["greedy"].get<std::vector<int32_t>>();
  ASSERT_EQ(expected.size(), 16u);
  auto ctx = (*model)->new_context(256);
  ASSERT_TRUE(ctx.ok());
  ASSERT_TRUE((*ctx)->eval(prompt, LogitsMode::kLast).ok());
  std::vector<int32_t> got;
  for (size_t i = 0; i < expected.size(); ++i) {
    const int32_t next = Sampler::argmax((*ctx)->logits(0));
    got.push_back(next);
    ASSERT_TRUE((*ctx)->eval(std::span<const int32_t>(&next, 1), LogitsMode::kLast).ok());
  }
  EXPECT_EQ(got, expected) << dir.filename();
}

TEST_P(TinyModel, LongPromptLastLogitsMatch) {
  const fs::path dir = GetParam();
  const auto golden = read_json(dir / "golden.json");
  if (!golden.contains("long_prompt_ids")) GTEST_FAIL() << dir << ": golden.json lacks long_prompt_ids";
  auto model = testing::load_model(dir.string());
  ASSERT_TRUE(model.ok());
  const auto prompt = golden["long_prompt_ids"].get<std::vector<int32_t>>();
  auto ctx = (*model)->new_context(static_cast<int64_t>(prompt.size()));
  ASSERT_TRUE((*ctx)->eval(prompt, LogitsMode::kLast).ok());
  Compare c = compare_logits((*ctx)->logits(0), golden["long_last_logits"]);
  EXPECT_LE(c.max_err, 2e-5 * (1.0 + c.max_ref)) << dir.filename();
}

// Tokens [begin, end) of one sequence as a batch entry (the rest of BatchSequence at its
// defaults), every KV group on the same table (every group's pool has the same size here).
BatchSequence chunk_of(size_t begin, size_t end, std::span<const int32_t> table, LogitsMode logits) {
  BatchSequence s;
  s.n_tokens = static_cast<int64_t>(end - begin);
  s.first_position = static_cast<int64_t>(begin);
  s.block_tables.fill(table);
  s.logits = logits;
  return s;
}

// The engine's path: two sequences share each forward pass, in uneven chunks, over a paged
// cache of 4-token blocks laid out out of order, so sliding windows (8 and 12 positions) start
// and end inside blocks that are not adjacent. The golden prompt's logits must not change.
TEST_P(TinyModel, PagedBatchedChunksMatchTransformers) {
  const fs::path dir = GetParam();
  const auto golden = read_json(dir / "golden.json");
  auto model = testing::load_model(dir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto a = golden["prompt_ids"].get<std::vector<int32_t>>();
  auto b = golden["long_prompt_ids"].get<std::vector<int32_t>>();
  b.resize(30);
  constexpr int64_t kBlock = 4;
  auto kv = std::move((*model)->new_kv_cache(kBlock, DType::kF32, 40)).value();
  // Blocks of the two sequences interleaved and reversed: a uses 39, 37, ..., b 38, 36, ...
  std::vector<int32_t> table_a, table_b;
  for (int32_t i = 0; i < 20; ++i) {
    table_a.push_back(39 - 2 * i);
    table_b.push_back(38 - 2 * i);
  }
  auto runner = (*model)->new_batch_runner();
  const size_t cuts_a[] = {0, 13, 14, 40};
  const size_t cuts_b[] = {0, 7, 21, 30};
  for (int step = 0; step < 3; ++step) {
    std::vector<int32_t> tokens(b.begin() + static_cast<std::ptrdiff_t>(cuts_b[step]),
                                b.begin() + static_cast<std::ptrdiff_t>(cuts_b[step + 1]));
    tokens.insert(tokens.end(), a.begin() + static_cast<std::ptrdiff_t>(cuts_a[step]),
                  a.begin() + static_cast<std::ptrdiff_t>(cuts_a[step + 1]));
    const BatchSequence seqs[] = {
        chunk_of(cuts_b[step], cuts_b[step + 1], table_b, LogitsMode::kLast),
        chunk_of(cuts_a[step], cuts_a[step + 1], table_a, LogitsMode::kAll),
    };
    ASSERT_TRUE(runner->run(tokens, seqs, *kv).ok());
    ASSERT_EQ(runner->n_logit_rows(), static_cast<int64_t>(1 + cuts_a[step + 1] - cuts_a[step]));
    for (size_t p = cuts_a[step]; p < cuts_a[step + 1]; ++p) {
      Compare c = compare_logits(runner->logits(static_cast<int64_t>(1 + p - cuts_a[step])), golden["logits"][p]);
      EXPECT_LE(c.max_err, 2e-5 * (1.0 + c.max_ref)) << dir.filename() << " position " << p;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, TinyModel, ::testing::ValuesIn(tiny_model_dirs()),
                         [](const auto& info) { return fs::path(info.param).filename().string(); });

// GGUF copies of some tiny models (tests/golden/tiny_gguf/<name>.gguf from
// tools/golden/make_tiny_gguf.py): the same float32 weights under llama.cpp's names and keys
// (Gemma norms stored as 1 + w, MoE experts stacked in one tensor), held to the Hugging Face
// folder's golden data with the same tolerance.
std::vector<std::string> tiny_gguf_names() {
  std::vector<std::string> names;
  const fs::path root = fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny_gguf";
  if (fs::exists(root)) {
    for (const auto& e : fs::directory_iterator(root)) {
      if (e.path().extension() == ".gguf") names.push_back(e.path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(TinyGguf, AllPresent) {
  EXPECT_EQ(tiny_gguf_names(), (std::vector<std::string>{"gemma3_sliding", "qwen3_gqa", "qwen3_moe"}));
}

class TinyGguf : public ::testing::TestWithParam<std::string> {};

TEST_P(TinyGguf, LogitsMatchTransformers) {
  const fs::path golden_dir = fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny" / GetParam();
  const auto golden = read_json(golden_dir / "golden.json");
  const fs::path file = fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny_gguf" / (GetParam() + ".gguf");
  auto model = testing::load_model(file.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto hf = testing::load_model(golden_dir.string());
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  EXPECT_EQ((*model)->config().architecture, (*hf)->config().architecture);
  const auto prompt = golden["prompt_ids"].get<std::vector<int32_t>>();
  auto ctx = (*model)->new_context(256);
  ASSERT_TRUE(ctx.ok());
  ASSERT_TRUE((*ctx)->eval(prompt, LogitsMode::kAll).ok());
  for (size_t p = 0; p < prompt.size(); ++p) {
    Compare c = compare_logits((*ctx)->logits(static_cast<int64_t>(p)), golden["logits"][p]);
    EXPECT_LE(c.max_err, 2e-5 * (1.0 + c.max_ref)) << file.filename() << " position " << p;
  }
  const auto long_prompt = golden["long_prompt_ids"].get<std::vector<int32_t>>();
  auto long_ctx = (*model)->new_context(static_cast<int64_t>(long_prompt.size()));
  ASSERT_TRUE(long_ctx.ok());
  ASSERT_TRUE((*long_ctx)->eval(long_prompt, LogitsMode::kLast).ok());
  Compare c = compare_logits((*long_ctx)->logits(0), golden["long_last_logits"]);
  EXPECT_LE(c.max_err, 2e-5 * (1.0 + c.max_ref)) << file.filename();
}

INSTANTIATE_TEST_SUITE_P(Golden, TinyGguf, ::testing::ValuesIn(tiny_gguf_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace deepinfer
