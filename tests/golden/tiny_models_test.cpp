// Golden equality with Hugging Face transformers on tiny random models
// (tests/golden/tiny/<name>/: config.json, safetensors, golden.json from
// tools/golden/make_tiny_models.py).
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
    auto model = Model::load(dir);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    covered.insert((*model)->config().architecture);
  }
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
  auto model = Model::load(dir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto prompt = golden["prompt_ids"].get<std::vector<int32_t>>();
  ThreadPool pool(2);

  // Whole prompt in one pass, and again in three uneven chunks: the KV cache must make them equal.
  for (const std::vector<size_t>& cuts : {std::vector<size_t>{prompt.size()}, std::vector<size_t>{1, 7, prompt.size()}}) {
    auto ctx = (*model)->new_context(256);
    ASSERT_TRUE(ctx.ok());
    size_t begin = 0;
    for (size_t cut : cuts) {
      std::span<const int32_t> piece(prompt.data() + begin, cut - begin);
      ASSERT_TRUE((*ctx)->eval(piece, LogitsMode::kAll, pool).ok());
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
  auto model = Model::load(dir.string());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto prompt = golden["prompt_ids"].get<std::vector<int32_t>>();
  const auto expected = golden["greedy"].get<std::vector<int32_t>>();
  ASSERT_EQ(expected.size(), 16u);
  ThreadPool pool(2);
  auto ctx = (*model)->new_context(256);
  ASSERT_TRUE(ctx.ok());
  ASSERT_TRUE((*ctx)->eval(prompt, LogitsMode::kLast, pool).ok());
  std::vector<int32_t> got;
  for (size_t i = 0; i < expected.size(); ++i) {
    const int32_t next = Sampler::argmax((*ctx)->logits(0));
    got.push_back(next);
    ASSERT_TRUE((*ctx)->eval(std::span<const int32_t>(&next, 1), LogitsMode::kLast, pool).ok());
  }
  EXPECT_EQ(got, expected) << dir.filename();
}

TEST_P(TinyModel, LongPromptLastLogitsMatch) {
  const fs::path dir = GetParam();
  const auto golden = read_json(dir / "golden.json");
  if (!golden.contains("long_prompt_ids")) GTEST_FAIL() << dir << ": golden.json lacks long_prompt_ids";
  auto model = Model::load(dir.string());
  ASSERT_TRUE(model.ok());
  const auto prompt = golden["long_prompt_ids"].get<std::vector<int32_t>>();
  ThreadPool pool(1);
  auto ctx = (*model)->new_context(static_cast<int64_t>(prompt.size()));
  ASSERT_TRUE((*ctx)->eval(prompt, LogitsMode::kLast, pool).ok());
  Compare c = compare_logits((*ctx)->logits(0), golden["long_last_logits"]);
  EXPECT_LE(c.max_err, 2e-5 * (1.0 + c.max_ref)) << dir.filename();
}

INSTANTIATE_TEST_SUITE_P(Golden, TinyModel, ::testing::ValuesIn(tiny_model_dirs()),
                         [](const auto& info) { return fs::path(info.param).filename().string(); });

}  // namespace
}  // namespace deepinfer
