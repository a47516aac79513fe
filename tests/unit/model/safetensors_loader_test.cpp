// open_safetensors on Hugging Face directories written by the test itself: single files,
// sharded checkpoints, every supported dtype, tensor renaming, and damaged files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/half.h"
#include "model/loader/block_scaled.h"
#include "model/loader/hf_config.h"
#include "model/loader/safetensors.h"
#include "model/loader/tensor_source.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A tensor to write: `bytes` is its raw little-endian data.
struct FakeTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<uint8_t> u16_bytes(const std::vector<uint16_t>& v) {
  std::vector<uint8_t> out(v.size() * 2);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Counting floats (start, start + 1, ...) make every element distinguishable.
FakeTensor f32_tensor(std::string name, std::vector<int64_t> shape, float start) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return {std::move(name), "F32", std::move(shape), f32_bytes(v)};
}

// The header the tensors would get, offsets packed in order.
json make_header(const std::vector<FakeTensor>& tensors) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const FakeTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  return header;
}

std::vector<uint8_t> concat_data(const std::vector<FakeTensor>& tensors) {
  std::vector<uint8_t> data;
  for (const FakeTensor& t : tensors) data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  return data;
}

// Writes the raw layout, so tests can lie in any part of it.
void write_raw(const fs::path& path, uint64_t header_len, const std::string& header, const std::vector<uint8_t>& data) {
  std::ofstream f(path, std::ios::binary);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(header_len >> (8 * i));
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

void write_header_and_data(const fs::path& path, const json& header, const std::vector<uint8_t>& data) {
  const std::string text = header.dump();
  write_raw(path, text.size(), text, data);
}

void write_safetensors(const fs::path& path, const std::vector<FakeTensor>& tensors) {
  write_header_and_data(path, make_header(tensors), concat_data(tensors));
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

constexpr int64_t kVocab = 6;
constexpr int64_t kEmbd = 4;

json llama_config(bool tied = false) {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"hidden_size", kEmbd},
          {"intermediate_size", 8},
          {"num_hidden_layers", 1},
          {"num_attention_heads", 2},
          {"num_key_value_heads", 1},
          {"vocab_size", kVocab},
          {"rms_norm_eps", 1e-5},
          {"tie_word_embeddings", tied}};
}

// One layer of a Llama model with Hugging Face names.
std::vector<FakeTensor> llama_tensors() {
  return {
      f32_tensor("model.embed_tokens.weight", {kVocab, kEmbd}, 0),
      f32_tensor("model.norm.weight", {kEmbd}, 100),
      f32_tensor("lm_head.weight", {kVocab, kEmbd}, 200),
      f32_tensor("model.layers.0.input_layernorm.weight", {kEmbd}, 300),
      f32_tensor("model.layers.0.self_attn.q_proj.weight", {kEmbd, kEmbd}, 400),
      f32_tensor("model.layers.0.self_attn.k_proj.weight", {2, kEmbd}, 500),
      f32_tensor("model.layers.0.self_attn.v_proj.weight", {2, kEmbd}, 600),
      f32_tensor("model.layers.0.self_attn.o_proj.weight", {kEmbd, kEmbd}, 700),
      f32_tensor("model.layers.0.post_attention_layernorm.weight", {kEmbd}, 800),
      f32_tensor("model.layers.0.mlp.gate_proj.weight", {8, kEmbd}, 900),
      f32_tensor("model.layers.0.mlp.up_proj.weight", {8, kEmbd}, 1000),
      f32_tensor("model.layers.0.mlp.down_proj.weight", {kEmbd, 8}, 1100),
  };
}

float f32_at(const TensorView& t, size_t i) {
  float v;
  std::memcpy(&v, t.data + 4 * i, 4);
  return v;
}

class SafetensorsLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / (std::string("deepinfer_st_") + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_text(dir_ / "config.json", llama_config().dump());
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string dir() const { return dir_.string(); }
  fs::path file(const std::string& name) const { return dir_ / name; }

  // Opens the directory expecting failure; returns the status.
  Status open_error() {
    auto r = open_safetensors(dir());
    EXPECT_FALSE(r.ok()) << "opened a bad directory";
    return r.ok() ? Status() : r.status();
  }

  fs::path dir_;
};

#define EXPECT_MESSAGE_HAS(status, text) \
  EXPECT_NE((status).message().find(text), std::string::npos) << (status).to_string()

TEST_F(SafetensorsLoaderTest, SingleFileTensorsAreRenamedAndReadInPlace) {
  write_safetensors(file("model.safetensors"), llama_tensors());
  auto r = open_safetensors(dir());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const TensorSource& src = **r;
  EXPECT_EQ(src.path(), dir());
  EXPECT_EQ(src.tensors().size(), 12u);

  auto embd = src.get("token_embd.weight");
  ASSERT_TRUE(embd.ok());
  EXPECT_EQ((*embd)->dtype, DType::kF32);
  EXPECT_EQ((*embd)->shape, (std::vector<int64_t>{kVocab, kEmbd}));
  EXPECT_EQ((*embd)->n_bytes, static_cast<size_t>(kVocab * kEmbd * 4));
  EXPECT_EQ((*embd)->file, file("model.safetensors").string());
  for (size_t i = 0; i < static_cast<size_t>(kVocab * kEmbd); ++i) EXPECT_EQ(f32_at(**embd, i), static_cast<float>(i));

  // Each renamed tensor carries its own data (the counting start identifies it).
  const std::pair<const char*, float> expected[] = {
      {"output_norm.weight", 100},     {"output.weight", 200},        {"blk.0.attn_norm.weight", 300},
      {"blk.0.attn_q.weight", 400},    {"blk.0.attn_k.weight", 500},  {"blk.0.attn_v.weight", 600},
      {"blk.0.attn_output.weight", 700}, {"blk.0.ffn_norm.weight", 800}, {"blk.0.ffn_gate.weight", 900},
      {"blk.0.ffn_up.weight", 1000},   {"blk.0.ffn_down.weight", 1100},
  };
  for (const auto& [name, first] : expected) {
    const TensorView* t = src.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(f32_at(*t, 0), first) << name;
    EXPECT_EQ(f32_at(*t, static_cast<size_t>(t->n_elements() - 1)), first + static_cast<float>(t->n_elements() - 1));
  }
  EXPECT_EQ(src.find("blk.0.ffn_down.weight")->shape, (std::vector<int64_t>{kEmbd, 8}));  // as stored: [out, in]

  const Metadata& md = src.metadata();
  EXPECT_EQ(*md.get_string("general.architecture"), "llama");
  EXPECT_EQ(*md.get_uint("llama.embedding_length"), static_cast<uint64_t>(kEmbd));
  EXPECT_EQ(*md.get_string("deepinfer.source_format"), "safetensors");
  EXPECT_EQ(*md.get_string("general.name"), dir_.filename().string());
}

TEST_F(SafetensorsLoaderTest, F16AndBF16ValuesReadBack) {
  const std::vector<float> values = {1.0f, -2.5f, 0.1f, 65504.0f, -0.0f, 3.140625f};
  std::vector<uint16_t> h, b;
  for (float v : values) {
    h.push_back(fp32_to_fp16(v));
    b.push_back(fp32_to_bf16(v));
  }
  std::vector<FakeTensor> tensors = llama_tensors();
  tensors.push_back({"extra.half", "F16", {2, 3}, u16_bytes(h)});
  tensors.push_back({"extra.bf16", "BF16", {6}, u16_bytes(b)});
  write_safetensors(file("model.safetensors"), tensors);
  auto r = open_safetensors(dir());
  ASSERT_TRUE(r.ok()) << r.status().to_string();

  const TensorView* th = (*r)->find("extra.half");  // unknown names are kept as they are
  const TensorView* tb = (*r)->find("extra.bf16");
  ASSERT_NE(th, nullptr);
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(th->dtype, DType::kF16);
  EXPECT_EQ(tb->dtype, DType::kBF16);
  EXPECT_EQ(th->shape, (std::vector<int64_t>{2, 3}));
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t hv, bv;
    std::memcpy(&hv, th->data + 2 * i, 2);
    std::memcpy(&bv, tb->data + 2 * i, 2);
    EXPECT_EQ(fp16_to_fp32(hv), fp16_to_fp32(fp32_to_fp16(values[i]))) << i;
    EXPECT_EQ(bf16_to_fp32(bv), bf16_to_fp32(fp32_to_bf16(values[i]))) << i;
  }
  uint16_t first;
  std::memcpy(&first, th->data, 2);
  EXPECT_EQ(fp16_to_fp32(first), 1.0f);
  std::memcpy(&first, tb->data + 2, 2);
  EXPECT_EQ(bf16_to_fp32(first), -2.5f);
}

TEST_F(SafetensorsLoaderTest, RotaryBuffersAreDroppedAndBiasesRenamed) {
  std::vector<FakeTensor> tensors = llama_tensors();
  tensors.push_back(f32_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", {1}, 0));
  tensors.push_back(f32_tensor("model.layers.0.self_attn.q_proj.bias", {kEmbd}, 50));
  write_safetensors(file("model.safetensors"), tensors);
  auto r = open_safetensors(dir());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->tensors().size(), 13u);
  for (const TensorView& t : (*r)->tensors()) EXPECT_EQ(t.name.find("inv_freq"), std::string::npos);
  ASSERT_NE((*r)->find("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(f32_at(*(*r)->find("blk.0.attn_q.bias"), 1), 51.0f);
}

TEST_F(SafetensorsLoaderTest, ShardedCheckpointOpensEveryShardOnce) {
  std::vector<FakeTensor> all = llama_tensors();
  std::vector<FakeTensor> a(all.begin(), all.begin() + 5), b(all.begin() + 5, all.end());
  write_safetensors(file("model-00001-of-00002.safetensors"), a);
  write_safetensors(file("model-00002-of-00002.safetensors"), b);
  json index = {{"metadata", {{"total_size", 1}}}, {"weight_map", json::object()}};
  for (const FakeTensor& t : a) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const FakeTensor& t : b) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  write_text(file("model.safetensors.index.json"), index.dump());

  auto r = open_safetensors(dir());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->tensors().size(), all.size());
  EXPECT_EQ(*(*r)->metadata().get_uint("deepinfer.safetensors_shards"), 2u);
  EXPECT_EQ((*r)->find("token_embd.weight")->file, file("model-00001-of-00002.safetensors").string());
  EXPECT_EQ((*r)->find("blk.0.ffn_down.weight")->file, file("model-00002-of-00002.safetensors").string());
  EXPECT_EQ(f32_at(*(*r)->find("blk.0.ffn_down.weight"), 3), 1103.0f);
}

TEST_F(SafetensorsLoaderTest, OpenTensorSourceAcceptsTheDirectoryOrItsFile) {
  write_safetensors(file("model.safetensors"), llama_tensors());
  for (const std::string& path : {dir(), file("model.safetensors").string(), file("config.json").string()}) {
    auto r = open_tensor_source(path);
    ASSERT_TRUE(r.ok()) << path << ": " << r.status().to_string();
    EXPECT_NE((*r)->find("output.weight"), nullptr);
  }
}

TEST_F(SafetensorsLoaderTest, TiedConfigIgnoresAStoredLmHead) {
  // transformers ties lm_head to the embedding whenever the config says so.
  write_text(file("config.json"), llama_config(/*tied=*/true).dump());
  write_safetensors(file("model.safetensors"), llama_tensors());
  auto r = open_safetensors(dir());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->find("output.weight"), nullptr);
  EXPECT_TRUE(*(*r)->metadata().get_bool("deepinfer.tied_embeddings"));
}

TEST_F(SafetensorsLoaderTest, UntiedConfigWithoutLmHeadIsAnError) {
  std::vector<FakeTensor> tensors = llama_tensors();
  tensors.erase(tensors.begin() + 2);  // lm_head.weight
  write_safetensors(file("model.safetensors"), tensors);
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_MESSAGE_HAS(s, "config.json");
  EXPECT_MESSAGE_HAS(s, "lm_head.weight");
}

// ---- damaged or incomplete directories ----

TEST_F(SafetensorsLoaderTest, MissingConfigJson) {
  fs::remove(file("config.json"));
  write_safetensors(file("model.safetensors"), llama_tensors());
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_MESSAGE_HAS(s, dir());
  EXPECT_MESSAGE_HAS(s, "config.json is missing");
}

TEST_F(SafetensorsLoaderTest, ConfigJsonThatIsNotJson) {
  write_text(file("config.json"), "{\"architectures\": [\"LlamaForCausalLM\"");
  write_safetensors(file("model.safetensors"), llama_tensors());
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_MESSAGE_HAS(s, file("config.json").string());
  EXPECT_MESSAGE_HAS(s, "not valid JSON");
}

TEST_F(SafetensorsLoaderTest, UnknownArchitecture) {
  json cfg = llama_config();
  cfg["architectures"] = {"GPT2LMHeadModel"};
  write_text(file("config.json"), cfg.dump());
  write_safetensors(file("model.safetensors"), llama_tensors());
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_MESSAGE_HAS(s, file("config.json").string());
  EXPECT_MESSAGE_HAS(s, "GPT2LMHeadModel");
}

TEST_F(SafetensorsLoaderTest, NoSafetensorsFiles) {
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_MESSAGE_HAS(s, dir());
  EXPECT_MESSAGE_HAS(s, "model.safetensors");
}

TEST_F(SafetensorsLoaderTest, FileShorterThanTheLengthField) {
  write_text(file("model.safetensors"), "abc");
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_MESSAGE_HAS(s, file("model.safetensors").string());
  EXPECT_MESSAGE_HAS(s, "too short");
}

TEST_F(SafetensorsLoaderTest, HeaderLengthPastTheEnd) {
  const std::string header = make_header(llama_tensors()).dump();
  write_raw(file("model.safetensors"), header.size() + 1000000, header, concat_data(llama_tensors()));
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_MESSAGE_HAS(s, file("model.safetensors").string());
  EXPECT_MESSAGE_HAS(s, "runs past the end");
}

TEST_F(SafetensorsLoaderTest, HeaderThatIsNotJson) {
  const std::string header = "{\"model.norm.weight\": {\"dtype\": ";
  write_raw(file("model.safetensors"), header.size(), header, {});
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_MESSAGE_HAS(s, file("model.safetensors").string());
  EXPECT_MESSAGE_HAS(s, "not valid JSON");
}

TEST_F(SafetensorsLoaderTest, TruncatedData) {
  std::vector<uint8_t> data = concat_data(llama_tensors());
  data.resize(data.size() - 10);  // the last tensor's tail is gone
  write_header_and_data(file("model.safetensors"), make_header(llama_tensors()), data);
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_MESSAGE_HAS(s, file("model.safetensors").string());
  EXPECT_MESSAGE_HAS(s, "model.layers.0.mlp.down_proj.weight");
  EXPECT_MESSAGE_HAS(s, "past the end of the data");
}

TEST_F(SafetensorsLoaderTest, DataOffsetsPastTheEnd) {
  json header = make_header(llama_tensors());
  header["model.norm.weight"]["data_offsets"] = {1u << 20, (1u << 20) + 16};
  write_header_and_data(file("model.safetensors"), header, concat_data(llama_tensors()));
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_MESSAGE_HAS(s, file("model.safetensors").string());
  EXPECT_MESSAGE_HAS(s, "model.norm.weight");
  EXPECT_MESSAGE_HAS(s, "past the end");
}

TEST_F(SafetensorsLoaderTest, DataOffsetsThatEndBeforeTheyBegin) {
  json header = make_header(llama_tensors());
  header["model.norm.weight"]["data_offsets"] = {16, 0};
  write_header_and_data(file("model.safetensors"), header, concat_data(llama_tensors()));
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_MESSAGE_HAS(s, file("model.safetensors").string());
  EXPECT_MESSAGE_HAS(s, "end before they begin");
}

TEST_F(SafetensorsLoaderTest, OverlappingTensorsAreAllowed) {
  json header = make_header(llama_tensors());
  header["model.norm.weight"]["data_offsets"] = {0, 16};  // the embedding's first row
  write_header_and_data(file("model.safetensors"), header, concat_data(llama_tensors()));
  auto r = open_safetensors(dir());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(f32_at(*(*r)->find("output_norm.weight"), 2), 2.0f);
}

TEST_F(SafetensorsLoaderTest, ByteSizeThatDoesNotMatchTheShape) {
  json header = make_header(llama_tensors());
  header["model.norm.weight"]["shape"] = {kEmbd + 1};
  write_header_and_data(file("model.safetensors"), header, concat_data(llama_tensors()));
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_MESSAGE_HAS(s, file("model.safetensors").string());
  EXPECT_MESSAGE_HAS(s, "model.norm.weight");
  EXPECT_MESSAGE_HAS(s, "16 bytes of data, but shape [5] of F32 needs 20");
}

TEST_F(SafetensorsLoaderTest, MissingField) {
  json header = make_header(llama_tensors());
  header["model.norm.weight"].erase("dtype");
  write_header_and_data(file("model.safetensors"), header, concat_data(llama_tensors()));
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_MESSAGE_HAS(s, file("model.safetensors").string());
  EXPECT_MESSAGE_HAS(s, "no 'dtype'");
}

TEST_F(SafetensorsLoaderTest, NegativeShape) {
  json header = make_header(llama_tensors());
  header["model.norm.weight"]["shape"] = {-4};
  write_header_and_data(file("model.safetensors"), header, concat_data(llama_tensors()));
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_MESSAGE_HAS(s, "model.norm.weight");
  EXPECT_MESSAGE_HAS(s, "shape");
}

TEST_F(SafetensorsLoaderTest, IntegerWeightIsUnsupported) {
  std::vector<FakeTensor> tensors = llama_tensors();
  tensors[1].dtype = "I32";  // model.norm.weight, 4 elements of 4 bytes: a valid I32 tensor
  write_safetensors(file("model.safetensors"), tensors);
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_MESSAGE_HAS(s, file("model.safetensors").string());
  EXPECT_MESSAGE_HAS(s, "model.norm.weight");
  EXPECT_MESSAGE_HAS(s, "dtype I32");
}

TEST_F(SafetensorsLoaderTest, UnknownDType) {
  std::vector<FakeTensor> tensors = llama_tensors();
  tensors[1].dtype = "Q4_K";
  write_safetensors(file("model.safetensors"), tensors);
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_MESSAGE_HAS(s, file("model.safetensors").string());
  EXPECT_MESSAGE_HAS(s, "unknown dtype 'Q4_K'");
}

class ShardedErrorTest : public SafetensorsLoaderTest {
 protected:
  void write_shards(const json& weight_map) {
    std::vector<FakeTensor> all = llama_tensors();
    write_safetensors(file("a.safetensors"), {all.begin(), all.begin() + 6});
    write_safetensors(file("b.safetensors"), {all.begin() + 6, all.end()});
    write_text(file("model.safetensors.index.json"), json{{"weight_map", weight_map}}.dump());
  }
  json good_map() {
    json map = json::object();
    std::vector<FakeTensor> all = llama_tensors();
    for (size_t i = 0; i < all.size(); ++i) map[all[i].name] = i < 6 ? "a.safetensors" : "b.safetensors";
    return map;
  }
};

TEST_F(ShardedErrorTest, GoodIndexOpens) {
  write_shards(good_map());
  auto r = open_safetensors(dir());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->tensors().size(), 12u);
}

TEST_F(ShardedErrorTest, IndexNamesAMissingShard) {
  json map = good_map();
  map["model.norm.weight"] = "c.safetensors";
  write_shards(map);
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_MESSAGE_HAS(s, file("model.safetensors.index.json").string());
  EXPECT_MESSAGE_HAS(s, "shard 'c.safetensors'");
  EXPECT_MESSAGE_HAS(s, "does not exist");
}

TEST_F(ShardedErrorTest, IndexPutsATensorInTheWrongShard) {
  json map = good_map();
  map["model.norm.weight"] = "b.safetensors";
  write_shards(map);
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_MESSAGE_HAS(s, file("model.safetensors.index.json").string());
  EXPECT_MESSAGE_HAS(s, "'model.norm.weight'");
  EXPECT_MESSAGE_HAS(s, "does not hold it");
}

TEST_F(ShardedErrorTest, IndexListsATensorNoShardHolds) {
  json map = good_map();
  map["model.layers.1.mlp.up_proj.weight"] = "a.safetensors";
  write_shards(map);
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_MESSAGE_HAS(s, "model.layers.1.mlp.up_proj.weight");
  EXPECT_MESSAGE_HAS(s, "does not hold it");
}

TEST_F(ShardedErrorTest, ShardPathOutsideTheDirectory) {
  json map = good_map();
  map["model.norm.weight"] = "../a.safetensors";
  write_shards(map);
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_MESSAGE_HAS(s, file("model.safetensors.index.json").string());
  EXPECT_MESSAGE_HAS(s, "not a plain file name");
}

TEST_F(ShardedErrorTest, IndexWithoutWeightMap) {
  write_shards(good_map());
  write_text(file("model.safetensors.index.json"), "{\"metadata\": {}}");
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_MESSAGE_HAS(s, file("model.safetensors.index.json").string());
  EXPECT_MESSAGE_HAS(s, "weight_map");
}

TEST_F(ShardedErrorTest, TensorInTwoShards) {
  std::vector<FakeTensor> all = llama_tensors();
  write_safetensors(file("a.safetensors"), {all.begin(), all.begin() + 7});
  write_safetensors(file("b.safetensors"), {all.begin() + 6, all.end()});  // both hold all[6]
  write_text(file("model.safetensors.index.json"), json{{"weight_map", good_map()}}.dump());
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_MESSAGE_HAS(s, "model.layers.0.self_attn.v_proj.weight");
  EXPECT_MESSAGE_HAS(s, "appears again");
}

// ---- name mapping on its own ----

TEST(HfTensorNames, MapToGgufNames) {
  const std::pair<const char*, const char*> cases[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
      {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"},
      {"model.layers.17.post_attention_layernorm.weight", "blk.17.ffn_norm.weight"},
      {"model.layers.3.self_attn.q_proj.weight", "blk.3.attn_q.weight"},
      {"model.layers.3.self_attn.k_proj.bias", "blk.3.attn_k.bias"},
      {"model.layers.3.self_attn.v_proj.weight", "blk.3.attn_v.weight"},
      {"model.layers.3.self_attn.o_proj.weight", "blk.3.attn_output.weight"},
      {"model.layers.3.mlp.gate_proj.weight", "blk.3.ffn_gate.weight"},
      {"model.layers.3.mlp.up_proj.weight", "blk.3.ffn_up.weight"},
      {"model.layers.10.mlp.down_proj.weight", "blk.10.ffn_down.weight"},
      {"model.layers.3.self_attn.q_norm.weight", "blk.3.attn_q_norm.weight"},
      {"model.layers.3.self_attn.k_norm.weight", "blk.3.attn_k_norm.weight"},
      {"model.layers.2.mlp.gate.weight", "blk.2.ffn_gate_inp.weight"},
      {"model.layers.2.mlp.experts.13.gate_proj.weight", "blk.2.ffn_gate_exps.13.weight"},
      {"model.layers.2.mlp.experts.0.up_proj.weight", "blk.2.ffn_up_exps.0.weight"},
      {"model.layers.2.mlp.experts.7.down_proj.weight", "blk.2.ffn_down_exps.7.weight"},
      // Unknown names stay as they are.
      {"model.layers.3.self_attn.q_ln.weight", "model.layers.3.self_attn.q_ln.weight"},
      {"model.layers.2.mlp.experts.x.gate_proj.weight", "model.layers.2.mlp.experts.x.gate_proj.weight"},
      {"model.layers.x.input_layernorm.weight", "model.layers.x.input_layernorm.weight"},
      {"model.layers.3.self_attn.q_proj.scales", "model.layers.3.self_attn.q_proj.scales"},
      {"vision_tower.blocks.0.weight", "vision_tower.blocks.0.weight"},
  };
  for (const auto& [hf, gguf] : cases) {
    std::optional<std::string> got = hf_to_gguf_tensor_name(hf);
    ASSERT_TRUE(got.has_value()) << hf;
    EXPECT_EQ(*got, gguf) << hf;
  }
  EXPECT_FALSE(hf_to_gguf_tensor_name("model.layers.0.self_attn.rotary_emb.inv_freq").has_value());
  EXPECT_FALSE(hf_to_gguf_tensor_name("model.rotary_emb.inv_freq").has_value());
}

TEST(HfTensorNames, GemmaSandwichNormsMapByArchitecture) {
  // Gemma's post_attention_layernorm normalises the attention output; its FFN input norm is
  // pre_feedforward_layernorm. Other architectures keep Llama's meaning.
  EXPECT_EQ(*hf_to_gguf_tensor_name("model.layers.4.post_attention_layernorm.weight", "gemma3"),
            "blk.4.post_attention_norm.weight");
  EXPECT_EQ(*hf_to_gguf_tensor_name("model.layers.4.pre_feedforward_layernorm.weight", "gemma3"),
            "blk.4.ffn_norm.weight");
  EXPECT_EQ(*hf_to_gguf_tensor_name("model.layers.4.post_feedforward_layernorm.weight", "gemma3"),
            "blk.4.post_ffw_norm.weight");
  EXPECT_EQ(*hf_to_gguf_tensor_name("model.layers.4.post_attention_layernorm.weight", "qwen3"),
            "blk.4.ffn_norm.weight");
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// ---- block-scaled FP8 / FP4 (DeepSeek's release format, transformers' fp8) ----

FakeTensor byte_tensor(std::string name, std::string dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  return {std::move(name), std::move(dtype), std::move(shape), std::move(bytes)};
}

float bf16_at(const TensorView& t, size_t i) {
  uint16_t v;
  std::memcpy(&v, t.data + 2 * i, 2);
  return bf16_to_fp32(v);
}

// q_proj [4, 4] in FP8 with one F32 scale per [2, 4] block (transformers' weight_scale_inv);
// gate_proj [8, 4] as DeepSeek's packed FP4 (I8, [8, 2] bytes) with an E8M0 scale per [1, 2].
std::vector<FakeTensor> block_scaled_llama() {
  std::vector<FakeTensor> tensors = llama_tensors();
  std::vector<uint8_t> q(16);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(0x38 + i);  // 1, 1.125, ..., 2, 2.25, ...
  tensors[4] = byte_tensor("model.layers.0.self_attn.q_proj.weight", "F8_E4M3", {4, 4}, q);
  tensors.push_back({"model.layers.0.self_attn.q_proj.weight_scale_inv", "F32", {2, 1}, f32_bytes({0.5f, 4.0f})});
  std::vector<uint8_t> gate(16);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = static_cast<uint8_t>(((i + 1) % 16) << 4 | (i % 16));
  tensors[9] = byte_tensor("model.layers.0.mlp.gate_proj.weight", "I8", {8, 2}, gate);
  std::vector<uint8_t> scales(16);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(120 + i);
  tensors.push_back(byte_tensor("model.layers.0.mlp.gate_proj.scale", "F8_E8M0", {8, 2}, scales));
  return tensors;
}

TEST_F(SafetensorsLoaderTest, BlockScaledWeightsBecomeBf16AndTheirScalesGo) {
  write_safetensors(file("model.safetensors"), block_scaled_llama());
  auto r = open_safetensors(dir());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->tensors().size(), 12u);  // the two scale tensors are folded in
  const TensorView* q = (*r)->find("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::kBF16);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{4, 4}));
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(bf16_at(*q, i), e4m3fn_to_float(static_cast<uint8_t>(0x38 + i)) * (i < 8 ? 0.5f : 4.0f)) << i;
  }
  const TensorView* gate = (*r)->find("blk.0.ffn_gate.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->dtype, DType::kBF16);
  EXPECT_EQ(gate->shape, (std::vector<int64_t>{8, 4}));  // two codes a byte
  for (size_t row = 0; row < 8; ++row) {
    for (size_t col = 0; col < 4; ++col) {
      const size_t byte = row * 2 + col / 2;
      const uint8_t nibble = col % 2 ? static_cast<uint8_t>((byte + 1) % 16) : static_cast<uint8_t>(byte % 16);
      const float scale = std::ldexp(1.0f, static_cast<int>(120 + row * 2 + col / 2) - 127);
      EXPECT_EQ(bf16_at(*gate, row * 4 + col), e2m1_to_float(nibble) * scale) << row << "," << col;
    }
  }
  EXPECT_EQ((*r)->find("model.layers.0.mlp.gate_proj.scale"), nullptr);
}

// FP4 with a UE8M0 scale per 32 inputs (DeepSeek V4's experts) stays MXFP4: 17 bytes per 32.
TEST_F(SafetensorsLoaderTest, Fp4OnBlocksOf32IsKeptAsMxfp4) {
  std::vector<FakeTensor> tensors = block_scaled_llama();
  std::vector<uint8_t> gate(2 * 32);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = static_cast<uint8_t>(i * 7);
  tensors[9] = byte_tensor("model.layers.0.mlp.gate_proj.weight", "I8", {2, 32}, gate);
  tensors.back() = byte_tensor("model.layers.0.mlp.gate_proj.scale", "F8_E8M0", {2, 2}, {120, 121, 122, 123});
  write_safetensors(file("model.safetensors"), tensors);
  auto r = open_safetensors(dir());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const TensorView* t = (*r)->find("blk.0.ffn_gate.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::kMXFP4);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 64}));
  ASSERT_EQ(t->n_bytes, 4u * 17);
  EXPECT_EQ(t->data[17], 121);  // row 0's second block starts with its scale
  EXPECT_EQ(*(*r)->metadata().get_uint("deepinfer.mxfp4_matrices"), 1u);
}

TEST_F(SafetensorsLoaderTest, ScalesMayLiveInAnotherShardAndF4CountsCodes) {
  std::vector<FakeTensor> all = block_scaled_llama();
  // safetensors' F4 dtype counts codes: the same bytes as I8 [8, 2] under shape [8, 4].
  all[9].dtype = "F4";
  all[9].shape = {8, 4};
  std::vector<FakeTensor> a(all.begin(), all.end() - 2), b(all.end() - 2, all.end());
  write_safetensors(file("a.safetensors"), a);
  write_safetensors(file("b.safetensors"), b);
  json index = {{"weight_map", json::object()}};
  for (const FakeTensor& t : a) index["weight_map"][t.name] = "a.safetensors";
  for (const FakeTensor& t : b) index["weight_map"][t.name] = "b.safetensors";
  write_text(file("model.safetensors.index.json"), index.dump());
  auto r = open_safetensors(dir());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const TensorView* gate = (*r)->find("blk.0.ffn_gate.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(bf16_at(*gate, 1), e2m1_to_float(1) * std::ldexp(1.0f, -7));
  EXPECT_EQ(gate->file, file("a.safetensors").string());
}

TEST_F(SafetensorsLoaderTest, Fp8WithoutItsScalesIsAnError) {
  std::vector<FakeTensor> tensors = block_scaled_llama();
  tensors.erase(tensors.begin() + 12);  // q_proj.weight_scale_inv
  write_safetensors(file("model.safetensors"), tensors);
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_MESSAGE_HAS(s, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_MESSAGE_HAS(s, "F8_E4M3");
  EXPECT_MESSAGE_HAS(s, "q_proj.scale' or 'model.layers.0.self_attn.q_proj.weight_scale_inv'");
}

TEST_F(SafetensorsLoaderTest, ScalesOfTheWrongShapeAreAnError) {
  std::vector<FakeTensor> tensors = block_scaled_llama();
  tensors[12] = {"model.layers.0.self_attn.q_proj.weight_scale_inv", "F32", {3, 1}, f32_bytes({1, 1, 1})};
  write_safetensors(file("model.safetensors"), tensors);
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_MESSAGE_HAS(s, "[3, 1]");
  EXPECT_MESSAGE_HAS(s, "no power-of-two block size");
}

TEST_F(SafetensorsLoaderTest, AScaleWithoutCodesIsAnErrorAndAFloatScaleNameIsKept) {
  std::vector<FakeTensor> tensors = llama_tensors();
  tensors.push_back(f32_tensor("model.layers.0.self_attn.o_proj.weight_scale_inv", {1, 1}, 1));  // o_proj is F32
  write_safetensors(file("model.safetensors"), tensors);
  auto r = open_safetensors(dir());
  ASSERT_TRUE(r.ok()) << r.status().to_string();  // not block-scaled: an ordinary (unused) tensor
  EXPECT_NE((*r)->find("model.layers.0.self_attn.o_proj.weight_scale_inv"), nullptr);

  tensors.push_back(byte_tensor("model.layers.0.mlp.up_proj.scale", "F8_E8M0", {8, 1}, std::vector<uint8_t>(8, 127)));
  write_safetensors(file("model.safetensors"), tensors);
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_MESSAGE_HAS(s, "mlp.up_proj.scale");
  EXPECT_MESSAGE_HAS(s, "is not block-scaled FP8 or FP4");
}

// Scales are read as their file dtype says: 1-byte integers are not F32 scales (reading them so
// would run past their bytes).
TEST_F(SafetensorsLoaderTest, ScalesOfAnotherDtypeAreRefused) {
  std::vector<FakeTensor> tensors = block_scaled_llama();
  tensors[12] = byte_tensor("model.layers.0.self_attn.q_proj.weight_scale_inv", "I8", {2, 1}, {1, 1});
  write_safetensors(file("model.safetensors"), tensors);
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_MESSAGE_HAS(s, "have dtype I8");
  EXPECT_MESSAGE_HAS(s, "F8_E8M0, F32 or BF16");
}

TEST_F(SafetensorsLoaderTest, EmptyBlockScaledMatricesAreAnError) {
  std::vector<FakeTensor> tensors = block_scaled_llama();
  tensors[9] = byte_tensor("model.layers.0.mlp.gate_proj.weight", "I8", {0, 2}, {});
  write_safetensors(file("model.safetensors"), tensors);
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_MESSAGE_HAS(s, "is empty");
}

TEST_F(SafetensorsLoaderTest, ANaNBlockScaleIsAnError) {
  std::vector<FakeTensor> tensors = block_scaled_llama();
  tensors.back().bytes[5] = 255;
  write_safetensors(file("model.safetensors"), tensors);
  Status s = open_error();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_MESSAGE_HAS(s, "gate_proj.weight");
  EXPECT_MESSAGE_HAS(s, "block (2, 1)");
}

}  // namespace
}  // namespace deepinfer
