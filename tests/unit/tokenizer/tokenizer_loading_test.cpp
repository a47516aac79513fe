// load_tokenizer(): every kind of path a model or a tokenizer comes as, and "no tokenizer" as
// an outcome of its own (null, or NOT_FOUND when required), apart from broken files.
#include "tokenizer/tokenizer_loading.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

const fs::path kData = DEEPINFER_TEST_DATA;
const fs::path kFixture = kData / "golden/tokenizer/hf_fixtures/fixture_bytelevel_added";
const fs::path kTinyModel = kData / "golden/tiny/llama_gqa_tied";

fs::path default_model() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const fs::path base = xdg && *xdg ? fs::path(xdg) : fs::path(home ? home : ".") / ".cache";
  return base / "deepinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// A fresh directory under the test's temporary directory.
fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::path(testing::TempDir()) / ("tokenizer_loading_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<int32_t> ids_of(const Tokenizer& t, const std::string& text) { return t.encode(text, {}); }

TEST(TokenizerLoading, GgufFileWithVocabulary) {
  if (!fs::exists(default_model())) GTEST_SKIP() << default_model() << " is missing (deepinfer pull)";
  auto t = load_tokenizer(default_model().string(), TokenizerPresence::kRequired);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_NE(*t, nullptr);
  EXPECT_EQ((*t)->n_vocab(), 49152);
  EXPECT_TRUE((*t)->find_token("<|im_start|>").has_value());
}

TEST(TokenizerLoading, TokenizerJsonFileAndItsDirectoryAgree) {
  auto file = load_tokenizer((kFixture / "tokenizer.json").string(), TokenizerPresence::kRequired);
  auto dir = load_tokenizer(kFixture.string(), TokenizerPresence::kRequired);  // a tokenizer alone
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  ASSERT_TRUE(dir.ok()) << dir.status().to_string();
  ASSERT_TRUE(*file && *dir);
  EXPECT_EQ((*file)->n_vocab(), (*dir)->n_vocab());
  EXPECT_EQ(ids_of(**file, "hello world"), ids_of(**dir, "hello world"));
}

// A Hugging Face checkpoint (config.json + safetensors) with tokenizer.json, named by its
// directory or by one of its files as Model::load accepts them.
TEST(TokenizerLoading, HuggingFaceCheckpointDirectory) {
  const fs::path dir = temp_dir("checkpoint");
  fs::copy_file(kTinyModel / "config.json", dir / "config.json");
  fs::copy_file(kTinyModel / "model.safetensors", dir / "model.safetensors");
  fs::copy_file(kFixture / "tokenizer.json", dir / "tokenizer.json");
  std::ofstream(dir / "tokenizer_config.json") << R"({"add_bos_token": false, "chat_template": "{{ messages }}"})";
  for (const fs::path& path : {dir, dir / "model.safetensors", dir / "config.json", dir / "tokenizer.json"}) {
    auto t = load_tokenizer(path.string(), TokenizerPresence::kRequired);
    ASSERT_TRUE(t.ok()) << path << ": " << t.status().to_string();
    ASSERT_NE(*t, nullptr) << path;
    // tokenizer_config.json was read with it, whichever file named the directory.
    EXPECT_EQ((*t)->chat_template(), "{{ messages }}") << path;
  }
}

TEST(TokenizerLoading, NoTokenizerIsAbsenceOrNotFound) {
  const std::string gguf = (kData / "golden/tiny_gguf/qwen3_gqa.gguf").string();
  for (const std::string& path : {kTinyModel.string(), (kTinyModel / "model.safetensors").string(), gguf}) {
    auto optional = load_tokenizer(path, TokenizerPresence::kOptional);
    ASSERT_TRUE(optional.ok()) << path << ": " << optional.status().to_string();
    EXPECT_EQ(*optional, nullptr) << path;
    auto required = load_tokenizer(path, TokenizerPresence::kRequired);
    ASSERT_FALSE(required.ok()) << path;
    EXPECT_EQ(required.status().code(), StatusCode::kNotFound);
    EXPECT_NE(required.status().message().find("carries no tokenizer"), std::string::npos)
        << required.status().message();
  }
}

// Broken or missing files are errors even when a tokenizer is optional, and say which file.
TEST(TokenizerLoading, BrokenFilesAreErrorsEitherWay) {
  const fs::path dir = temp_dir("broken");
  std::ofstream(dir / "garbage.gguf") << "this is not a model file at all";
  std::ofstream(dir / "tokenizer.json") << "{not json";
  for (const fs::path& path : {dir / "garbage.gguf", dir / "tokenizer.json", dir / "missing.gguf"}) {
    auto t = load_tokenizer(path.string(), TokenizerPresence::kOptional);
    ASSERT_FALSE(t.ok()) << path;
    EXPECT_NE(t.status().message().find(path.filename().string()), std::string::npos) << t.status().message();
    EXPECT_EQ(t.status().message().find("carries no tokenizer"), std::string::npos) << t.status().message();
  }
}

}  // namespace
}  // namespace deepinfer
