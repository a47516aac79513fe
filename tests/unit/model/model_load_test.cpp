// Model::load on damaged Hugging Face directories: each problem gives one clear error naming
// the file, never a crash. Built from a copy of a golden tiny model.
#include "model/model.h"
#include "test_backend.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

class DamagedModel : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny" / "llama_gqa_tied";
    ASSERT_TRUE(fs::exists(src_ / "config.json")) << "golden tiny model missing: " << src_;
    dir_ = fs::temp_directory_path() / ("deepinfer_damaged_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const auto& e : fs::directory_iterator(src_)) {
      if (e.path().filename() != "golden.json") fs::copy(e.path(), dir_ / e.path().filename());
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  void edit_config(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json cfg;
    {
      std::ifstream in(dir_ / "config.json");
      cfg = nlohmann::json::parse(in);
    }
    edit(cfg);
    std::ofstream(dir_ / "config.json") << cfg.dump(2);
  }

  std::string load_error() {
    auto m = testing::load_model(dir_.string());
    EXPECT_FALSE(m.ok());
    return m.ok() ? "" : m.status().message();
  }

  fs::path src_, dir_;
};

TEST_F(DamagedModel, IntactCopyLoads) {
  auto m = testing::load_model(dir_.string());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->config().architecture, "llama");
}

TEST_F(DamagedModel, ShapeThatDoesNotMatchTheArchitecture) {
  edit_config([](nlohmann::json& c) { c["intermediate_size"] = c["intermediate_size"].get<int>() * 2; });
  const std::string err = load_error();
  EXPECT_NE(err.find("ffn_gate.weight"), std::string::npos) << err;
  EXPECT_NE(err.find("shape"), std::string::npos) << err;
}

TEST_F(DamagedModel, MissingConfig) {
  fs::remove(dir_ / "config.json");
  const std::string err = load_error();
  EXPECT_NE(err.find("config.json"), std::string::npos) << err;
}

TEST_F(DamagedModel, TruncatedWeights) {
  const fs::path st = dir_ / "model.safetensors";
  ASSERT_TRUE(fs::exists(st));
  fs::resize_file(st, fs::file_size(st) / 2);
  const std::string err = load_error();
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
}

TEST_F(DamagedModel, UnknownArchitecture) {
  edit_config([](nlohmann::json& c) { c["architectures"] = {"FancyNewForCausalLM"}; });
  const std::string err = load_error();
  EXPECT_NE(err.find("FancyNewForCausalLM"), std::string::npos) << err;
}

TEST(ModelLoad, MissingPathIsNotFound) {
  auto m = testing::load_model("/nonexistent/deepinfer/model.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("/nonexistent/deepinfer/model.gguf"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer
