// encode_parallel must give exactly encode()'s ids: long texts built from the golden corpus,
// with and without special-token spellings, on the tokenizers that cut text and on those that
// fall back.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "model/loader/gguf.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

const std::filesystem::path kGoldenDir = std::filesystem::path(DEEPINFER_TEST_DATA) / "golden" / "tokenizer";

std::filesystem::path model_cache() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::filesystem::path base = xdg && *xdg ? xdg : std::filesystem::path(home ? home : ".") / ".cache";
  return base / "deepinfer" / "models";
}

// About 600 KB: the committed DeepSeek golden documents and case texts, repeated.
std::string long_text(bool with_specials) {
  std::ifstream in(kGoldenDir / "hf_deepseek_v4.json");
  const auto golden = nlohmann::json::parse(in);
  std::string text;
  for (const auto& doc : golden["documents"]) text += doc["text"].get<std::string>() + "\n";
  for (const auto& c : golden["cases"]) {
    if (!c.contains("text")) continue;
    const std::string t = c["text"].get<std::string>();
    if (!with_specials && t.find('<') != std::string::npos) continue;
    text += t + "\n";
  }
  std::string out;
  while (out.size() < 600 * 1024) out += text;
  return out;
}

void expect_parallel_equal(const Tokenizer& tok, bool expect_cuts) {
  EXPECT_EQ(tok.can_encode_in_parallel(), expect_cuts);
  for (bool specials : {false, true}) {
    const std::string text = long_text(specials);
    EncodeOptions options;
    options.parse_special = specials;
    options.add_bos = true;
    const std::vector<int32_t> want = tok.encode(text, options);
    for (int threads : {2, 3, 8}) {
      ThreadPool pool(threads);
      EXPECT_TRUE(tok.encode_parallel(text, options, pool) == want) << threads << " threads, specials " << specials;
    }
  }
}

TEST(ParallelEncode, DeepSeekV4) {
  auto tok = Tokenizer::from_hf_dir((model_cache() / "deepseek-v4-tokenizer").string());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string() << " (python tools/golden/make_tokenizer_hf.py --install)";
  expect_parallel_equal(**tok, /*expect_cuts=*/true);
}

TEST(ParallelEncode, SmolLm2Gguf) {
  auto source = open_gguf((model_cache() / "SmolLM2-135M-Instruct.Q4_1.gguf").string());
  ASSERT_TRUE(source.ok()) << source.status().to_string() << " (deepinfer pull smollm2-135m-instruct)";
  auto tok = Tokenizer::from_metadata((*source)->metadata());
  ASSERT_TRUE(tok.ok());
  expect_parallel_equal(**tok, /*expect_cuts=*/true);
}

TEST(ParallelEncode, FallsBackWhereCuttingIsUnsafe) {
  auto source = open_gguf((model_cache() / "gemma-3-270m-q4_k_m.gguf").string());
  ASSERT_TRUE(source.ok()) << source.status().to_string() << " (deepinfer pull gemma3-270m)";
  auto gemma = Tokenizer::from_metadata((*source)->metadata());
  ASSERT_TRUE(gemma.ok());
  expect_parallel_equal(**gemma, /*expect_cuts=*/false);  // SentencePiece merges cross newlines
  auto added = Tokenizer::from_tokenizer_json((kGoldenDir / "hf_fixtures" / "fixture_bytelevel_added" / "tokenizer.json").string());
  ASSERT_TRUE(added.ok());
  expect_parallel_equal(**added, /*expect_cuts=*/false);  // lstrip/rstrip tokens, a normalizer
}

}  // namespace
}  // namespace deepinfer
