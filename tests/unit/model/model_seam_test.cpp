// What the model layer promises the layers above it through the backend seam: the KV groups
// an architecture declares, the weights' fingerprint (the prefix-cache key that outlives a
// process), and a clear load-time error when the backend lacks an op the forward pass needs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "model/loader/tensor_source.h"
#include "model/model.h"
#include "test_backend.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

fs::path tiny(const std::string& name) { return fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny" / name; }

TEST(KvGroups, EachArchitectureDeclaresItsLayerGroups) {
  auto llama = std::move(testing::load_model(tiny("llama_gqa_tied").string())).value();
  const std::vector<KvGroupSpec> one = llama->kv_groups();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].name, "full");
  EXPECT_EQ(one[0].kind, KvGroupKind::kFull);
  EXPECT_EQ(static_cast<int64_t>(one[0].layers.size()), llama->config().n_layer);
  EXPECT_EQ(one[0].n_head_kv, llama->config().n_head_kv);
  EXPECT_EQ(one[0].head_dim, llama->config().head_dim);

  // Gemma 3's tiny model: layers sliding, sliding, full, sliding with a window of 8.
  auto gemma = std::move(testing::load_model(tiny("gemma3_sliding").string())).value();
  const std::vector<KvGroupSpec> two = gemma->kv_groups();
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].layers, std::vector<int32_t>{2});
  EXPECT_EQ(two[1].name, "sliding");
  EXPECT_EQ(two[1].kind, KvGroupKind::kSlidingWindow);
  EXPECT_EQ(two[1].layers, (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(two[1].window, 8);
  EXPECT_FALSE(two[1].prefix_cached());

  const int64_t n_blocks[] = {3, 5};
  auto kv = std::move(gemma->new_kv_cache(4, DType::kF16, n_blocks)).value();
  ASSERT_EQ(kv->groups().size(), 2u);
  EXPECT_EQ(kv->groups()[1].n_blocks, 5);
  EXPECT_EQ(kv->bytes(), kv->groups()[0].block_bytes() * 3 + kv->groups()[1].block_bytes() * 5);
  EXPECT_EQ(gemma->new_kv_cache(4, DType::kQ8_0, 3).status().code(), StatusCode::kInvalidArgument);
  const int64_t wrong_count[] = {1, 2, 3};
  EXPECT_EQ(gemma->new_kv_cache(4, DType::kF16, wrong_count).status().code(), StatusCode::kInvalidArgument);
}

class Fingerprint : public ::testing::Test {
 protected:
  void SetUp() override {
    copy_ = fs::temp_directory_path() / ("deepinfer_fingerprint_" + std::to_string(::getpid()));
    fs::remove_all(copy_);
    fs::create_directories(copy_);
    for (const auto& e : fs::directory_iterator(tiny("llama_gqa_tied"))) fs::copy(e.path(), copy_ / e.path().filename());
  }
  void TearDown() override { fs::remove_all(copy_); }

  std::string fingerprint_of(const fs::path& dir) {
    auto source = open_tensor_source(dir.string());
    EXPECT_TRUE(source.ok()) << source.status().to_string();
    return source.ok() ? model_fingerprint(**source, testing::test_pool()) : "";
  }

  fs::path copy_;
};

TEST_F(Fingerprint, FollowsTheWeightsNotThePath) {
  const std::string original = fingerprint_of(tiny("llama_gqa_tied"));
  EXPECT_EQ(original.size(), 64u);
  EXPECT_EQ(fingerprint_of(copy_), original);                           // another path, same bytes
  EXPECT_NE(fingerprint_of(tiny("llama_mha_untied")), original);        // other weights
  // One byte of one tensor's data flipped (the last byte of the file is tensor data).
  {
    std::fstream f(copy_ / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(c ^ 1));
  }
  EXPECT_NE(fingerprint_of(copy_), original);
}

TEST_F(Fingerprint, FollowsTheHyperparameters) {
  const std::string original = fingerprint_of(copy_);
  nlohmann::json config;
  {
    std::ifstream in(copy_ / "config.json");
    config = nlohmann::json::parse(in);
  }
  config["rms_norm_eps"] = 1e-3;  // the same weights compute other KV
  std::ofstream(copy_ / "config.json") << config.dump(2);
  EXPECT_NE(fingerprint_of(copy_), original);
}

// The CPU backend with one op taken away, as a backend without that kernel would be.
class WithoutOp final : public backend::Backend {
 public:
  WithoutOp(backend::Backend& inner, backend::Op missing) : inner_(inner), missing_(missing) {}
  std::string_view name() const override { return "partial"; }
  std::string describe() const override { return "partial"; }
  bool supports(const backend::OpUse& use) const override { return use.op != missing_ && inner_.supports(use); }
  Result<backend::DeviceBuffer> allocate(size_t bytes) override { return inner_.allocate(bytes); }
  std::unique_ptr<backend::WeightStore> new_weight_store() override { return inner_.new_weight_store(); }
  Result<std::unique_ptr<backend::KvCache>> allocate_kv(std::vector<KvGroupSpec> groups) override {
    return inner_.allocate_kv(std::move(groups));
  }
  std::unique_ptr<backend::Queue> new_queue() override { return inner_.new_queue(); }

 private:
  backend::Backend& inner_;
  backend::Op missing_;
};

TEST(BackendSupport, AMissingKernelIsALoadTimeErrorNamingTheOp) {
  WithoutOp no_rope(testing::test_backend(), backend::Op::kRope);
  auto m = Model::load(tiny("llama_gqa_tied").string(), no_rope);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(m.status().message().find("rope (half rotation)"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("partial backend"), std::string::npos) << m.status().message();

  WithoutOp no_attention(testing::test_backend(), backend::Op::kAttention);
  auto loaded = Model::load(tiny("llama_gqa_tied").string(), no_attention);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();  // attention is checked with the KV type
  auto kv = (*loaded)->new_kv_cache(16, DType::kF16, 4);
  EXPECT_EQ(kv.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(kv.status().message().find("attention over a f16 KV cache"), std::string::npos) << kv.status().message();

  WithoutOp no_moe(testing::test_backend(), backend::Op::kMoeDispatch);
  EXPECT_TRUE(Model::load(tiny("llama_gqa_tied").string(), no_moe).ok());  // a dense model needs none
  auto moe = Model::load(tiny("qwen3_moe").string(), no_moe);
  ASSERT_FALSE(moe.ok());
  EXPECT_NE(moe.status().message().find("moe_dispatch"), std::string::npos) << moe.status().message();
}

}  // namespace
}  // namespace deepinfer
