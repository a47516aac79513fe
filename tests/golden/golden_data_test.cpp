// The tiny Hugging Face models under tests/golden/tiny/ (written by
// tools/golden/make_tiny_models.py) load through the safetensors loader, and their golden.json
// files have the shape the forward-pass golden test relies on. This checks the data, not the
// forward pass: a regenerated model with a changed layout or a truncated golden file fails here
// with a clear message instead of as a numeric mismatch elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "model/loader/safetensors.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kTinyDir = fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny";
constexpr size_t kPromptLen = 40;
constexpr size_t kLongPromptLen = 100;
constexpr size_t kGreedyLen = 16;

struct TinyModel {
  const char* name;
  const char* architecture;
  int64_t n_vocab;
  int64_t n_layer;
  bool tied;
  DType dtype;
  bool qkv_bias;
  const char* rope_scaling;  // "none" or the scaling type
  uint64_t n_shards;         // 0: a single model.safetensors
  size_t per_layer;          // tensors a layer holds after renaming
};

constexpr TinyModel kModels[] = {
    {"llama_mha_untied", "llama", 320, 2, false, DType::kF32, false, "none", 0, 9},
    {"llama_gqa_tied", "llama", 256, 3, true, DType::kF32, false, "none", 0, 9},
    {"llama3_rope_scaling", "llama", 384, 2, false, DType::kF32, false, "llama3", 0, 9},
    {"qwen2_gqa", "qwen2", 448, 2, false, DType::kF32, true, "none", 0, 12},
    {"llama_sharded", "llama", 320, 2, false, DType::kF32, false, "none", 3, 9},
    {"llama_bf16", "llama", 256, 3, true, DType::kBF16, false, "none", 0, 9},
    // Llama's 9 plus QK-norm (2) and sandwich norms (2).
    {"gemma3_sliding", "gemma3", 256, 4, true, DType::kF32, false, "none", 0, 13},
    {"gemma3_softcap_linear", "gemma3", 320, 7, false, DType::kF32, false, "linear", 0, 13},
    {"qwen3_gqa", "qwen3", 384, 2, false, DType::kF32, false, "none", 0, 11},
    // 4 attention matrices, 2 norms, QK-norm (2), the router and 3 matrices per expert.
    {"qwen3_moe", "qwen3moe", 320, 2, false, DType::kF32, false, "none", 0, 9 + 3 * 8},
    {"qwen3_moe_unnormalized", "qwen3moe", 256, 2, true, DType::kBF16, false, "none", 0, 9 + 3 * 4},
};

class TinyModelData : public ::testing::TestWithParam<TinyModel> {};

TEST_P(TinyModelData, LoadsWithTheExpectedTensors) {
  const TinyModel& m = GetParam();
  auto r = open_safetensors((kTinyDir / m.name).string());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const TensorSource& src = **r;
  const Metadata& md = src.metadata();
  const std::string p = std::string(m.architecture) + ".";
  EXPECT_EQ(*md.get_string("general.architecture"), m.architecture);
  EXPECT_EQ(*md.get_uint(p + "vocab_size"), static_cast<uint64_t>(m.n_vocab));
  EXPECT_EQ(*md.get_uint(p + "block_count"), static_cast<uint64_t>(m.n_layer));
  EXPECT_EQ(*md.get_bool("deepinfer.tied_embeddings"), m.tied);
  EXPECT_EQ(*md.get_string("deepinfer.rope_style"), "half");
  EXPECT_EQ(*md.get_string_or(p + "rope.scaling.type", "none"), m.rope_scaling);
  EXPECT_EQ(*md.get_uint_or("deepinfer.safetensors_shards", 0), m.n_shards);

  // Embedding, final norm, the layers' tensors and the untied output matrix.
  EXPECT_EQ(src.tensors().size(), 2 + m.per_layer * static_cast<size_t>(m.n_layer) + (m.tied ? 0 : 1));
  for (const TensorView& t : src.tensors()) {
    EXPECT_EQ(t.dtype, m.dtype) << t.name;
    EXPECT_EQ(t.name.find("model."), std::string::npos) << "not renamed: " << t.name;
  }
  auto embd = src.get("token_embd.weight");
  ASSERT_TRUE(embd.ok()) << embd.status().to_string();
  EXPECT_EQ((*embd)->dim(0), m.n_vocab);
  EXPECT_EQ((*embd)->dim(1), static_cast<int64_t>(*md.get_uint(p + "embedding_length")));
  EXPECT_EQ(src.find("output.weight") == nullptr, m.tied);
  EXPECT_EQ(src.find("blk.0.attn_q.bias") != nullptr, m.qkv_bias);
}

std::vector<double> row_of(const json& v) {
  std::vector<double> out;
  if (!v.is_array()) return out;
  for (const json& x : v) out.push_back(x.is_number() ? x.get<double>() : NAN);
  return out;
}

void expect_ids(const json& ids, size_t n, int64_t n_vocab, const char* field) {
  ASSERT_TRUE(ids.is_array()) << field;
  EXPECT_EQ(ids.size(), n) << field;
  for (const json& id : ids) {
    ASSERT_TRUE(id.is_number_integer()) << field;
    EXPECT_GE(id.get<int64_t>(), 0) << field;
    EXPECT_LT(id.get<int64_t>(), n_vocab) << field;
  }
}

void expect_logit_row(const std::vector<double>& row, int64_t n_vocab, const std::string& where) {
  ASSERT_EQ(row.size(), static_cast<size_t>(n_vocab)) << where;
  double sum = 0, sum2 = 0;
  for (double x : row) {
    ASSERT_TRUE(std::isfinite(x)) << where;
    sum += x;
    sum2 += x * x;
  }
  // Random weights were scaled up so logits spread out; a flat row means a broken generator.
  const double mean = sum / static_cast<double>(row.size());
  EXPECT_GT(std::sqrt(sum2 / static_cast<double>(row.size()) - mean * mean), 0.3) << where;
}

TEST_P(TinyModelData, GoldenJsonHasTheRightShape) {
  const TinyModel& m = GetParam();
  const fs::path path = kTinyDir / m.name / "golden.json";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path << " is missing";
  const json g = json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(g.is_discarded()) << path << " is not valid JSON";

  expect_ids(g["prompt_ids"], kPromptLen, m.n_vocab, "prompt_ids");
  expect_ids(g["greedy"], kGreedyLen, m.n_vocab, "greedy");
  expect_ids(g["long_prompt_ids"], kLongPromptLen, m.n_vocab, "long_prompt_ids");
  ASSERT_TRUE(g["logits"].is_array());
  ASSERT_EQ(g["logits"].size(), kPromptLen);
  for (size_t i = 0; i < kPromptLen; ++i) {
    expect_logit_row(row_of(g["logits"][i]), m.n_vocab, path.string() + " logits[" + std::to_string(i) + "]");
  }
  expect_logit_row(row_of(g["long_last_logits"]), m.n_vocab, path.string() + " long_last_logits");
  EXPECT_TRUE(g["transformers_version"].is_string());
  EXPECT_TRUE(g["torch_version"].is_string());

  // The first greedy token is the argmax of the last prompt position's logits, and the
  // continuation is not one token repeated.
  const std::vector<double> last = row_of(g["logits"][kPromptLen - 1]);
  const auto argmax = std::max_element(last.begin(), last.end()) - last.begin();
  EXPECT_EQ(g["greedy"][0].get<int64_t>(), argmax);
  std::set<int64_t> distinct;
  for (const json& id : g["greedy"]) distinct.insert(id.get<int64_t>());
  EXPECT_GT(distinct.size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Tiny, TinyModelData, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<TinyModel>& info) { return std::string(info.param.name); });

TEST(TinyModelDataSet, EveryDirectoryIsListed) {
  std::set<std::string> listed;
  for (const TinyModel& m : kModels) listed.insert(m.name);
  size_t n_dirs = 0;
  for (const auto& entry : fs::directory_iterator(kTinyDir)) {
    if (!entry.is_directory()) continue;
    ++n_dirs;
    EXPECT_TRUE(listed.count(entry.path().filename().string()))
        << entry.path() << " has no expectations in golden_data_test.cpp";
  }
  EXPECT_EQ(n_dirs, listed.size());
}

}  // namespace
}  // namespace deepinfer
