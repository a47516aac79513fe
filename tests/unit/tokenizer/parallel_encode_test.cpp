// encode_parallel must give exactly encode()'s ids: long texts built from the golden corpus,
// with and without special-token spellings, and texts with awkward cut points, on the
// tokenizers that cut text and on those that fall back.
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
    for (int threads : {2, 3, 8}) {  // 32, 48 and 128 parts (fewer where cut points are scarce)
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

// Texts whose likely cut points are traps or absent: a part ending in "\n\n" splits that as one
// piece where GPT-2's \s+(?!\S) splits "\n\nThe" as "\n" "\n" "The"; a long stretch with no
// newline leaves parts empty; CJK and digit runs at part bounds.
std::vector<std::string> awkward_texts() {
  std::vector<std::string> texts;
  std::string paragraphs;
  for (int i = 0; paragraphs.size() < 200 * 1024; ++i) {
    paragraphs += "Paragraph " + std::to_string(i) + " ends here.\n\nThe next one starts\n\n\n  \nand" + (i % 7 ? "" : "\t") + "\n\n";
  }
  texts.push_back(paragraphs);
  std::string one_line;
  while (one_line.size() < 150 * 1024) one_line += "多语言文本，没有换行 12345 ";
  texts.push_back(one_line + "\n" + paragraphs.substr(0, 60 * 1024) + one_line + "\nEnd");
  std::string lines;
  for (int i = 0; lines.size() < 120 * 1024; ++i) lines += (i % 3 ? "x\n" : " \n") + std::string(i % 5, ' ') + "Word" + std::to_string(i);
  texts.push_back(lines);
  return texts;
}

void expect_awkward_equal(const Tokenizer& tok) {
  for (const std::string& text : awkward_texts()) {
    const std::vector<int32_t> want = tok.encode(text, EncodeOptions{});
    for (int threads : {2, 5}) {
      ThreadPool pool(threads);
      EXPECT_TRUE(tok.encode_parallel(text, EncodeOptions{}, pool) == want) << threads << " threads, " << text.size() << " bytes";
    }
  }
}

TEST(ParallelEncode, AwkwardCutPoints) {
  auto source = open_gguf((model_cache() / "SmolLM2-135M-Instruct.Q4_1.gguf").string());
  ASSERT_TRUE(source.ok()) << source.status().to_string() << " (deepinfer pull smollm2-135m-instruct)";
  auto smollm = Tokenizer::from_metadata((*source)->metadata());
  ASSERT_TRUE(smollm.ok());
  expect_awkward_equal(**smollm);
  auto deepseek = Tokenizer::from_hf_dir((model_cache() / "deepseek-v4-tokenizer").string());
  ASSERT_TRUE(deepseek.ok()) << deepseek.status().to_string() << " (python tools/golden/make_tokenizer_hf.py --install)";
  expect_awkward_equal(**deepseek);
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
