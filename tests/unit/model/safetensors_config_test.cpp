// config.json -> GGUF-style metadata (parse_hf_config), for the configs transformers writes
// (version 5 puts rope_theta and scaling under "rope_parameters") and older ones (top-level
// rope_theta, "rope_scaling").
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "model/loader/hf_config.h"

namespace deepinfer {
namespace {

using nlohmann::json;

const std::string kPath = "/models/tiny-llama/config.json";

json llama() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 3},
          {"num_attention_heads", 8},
          {"num_key_value_heads", 2},
          {"vocab_size", 320},
          {"max_position_embeddings", 256},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"hidden_act", "silu"},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"tie_word_embeddings", false}};
}

Metadata parse_ok(const json& cfg) {
  auto r = parse_hf_config(cfg.dump(), kPath);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : Metadata();
}

Status parse_error(const std::string& text) {
  auto r = parse_hf_config(text, kPath);
  EXPECT_FALSE(r.ok()) << "parsed a bad config: " << text;
  return r.ok() ? Status() : r.status();
}

uint64_t u(const Metadata& md, const char* key) {
  auto r = md.get_uint(key);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : 0;
}
double f(const Metadata& md, const char* key) {
  auto r = md.get_float(key);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : 0;
}
std::string s(const Metadata& md, const char* key) {
  auto r = md.get_string(key);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : "";
}

#define EXPECT_MESSAGE_HAS(status, text) \
  EXPECT_NE((status).message().find(text), std::string::npos) << (status).to_string()

TEST(HfConfig, LlamaKeysMatchGgufNames) {
  Metadata md = parse_ok(llama());
  EXPECT_EQ(s(md, "general.architecture"), "llama");
  EXPECT_EQ(s(md, "general.name"), "tiny-llama");
  EXPECT_EQ(u(md, "llama.context_length"), 256u);
  EXPECT_EQ(u(md, "llama.embedding_length"), 64u);
  EXPECT_EQ(u(md, "llama.block_count"), 3u);
  EXPECT_EQ(u(md, "llama.feed_forward_length"), 128u);
  EXPECT_EQ(u(md, "llama.attention.head_count"), 8u);
  EXPECT_EQ(u(md, "llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(u(md, "llama.attention.key_length"), 8u);
  EXPECT_EQ(u(md, "llama.rope.dimension_count"), 8u);
  EXPECT_EQ(u(md, "llama.vocab_size"), 320u);
  EXPECT_FLOAT_EQ(static_cast<float>(f(md, "llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(f(md, "llama.rope.freq_base"), 10000.0);
  EXPECT_EQ(s(md, "deepinfer.rope_style"), "half");
  EXPECT_EQ(s(md, "deepinfer.source_format"), "safetensors");
  EXPECT_FALSE(*md.get_bool("deepinfer.tied_embeddings"));
  EXPECT_EQ(u(md, "tokenizer.ggml.bos_token_id"), 1u);
  EXPECT_EQ(u(md, "tokenizer.ggml.eos_token_id"), 2u);
  EXPECT_FALSE(md.has("llama.rope.scaling.type"));
  EXPECT_FALSE(md.has("llama.attention.sliding_window"));
  EXPECT_FALSE(md.has("deepinfer.eos_token_ids"));
  // GGUF's value types: counts are uint32, hyperparameters float32.
  EXPECT_EQ(md.find("llama.block_count")->type, MetaType::kU32);
  EXPECT_EQ(md.find("llama.rope.freq_base")->type, MetaType::kF32);
}

TEST(HfConfig, DefaultsFollowTheConfigClass) {
  json cfg = llama();
  for (const char* key : {"num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta",
                          "tie_word_embeddings", "bos_token_id", "eos_token_id"}) {
    cfg.erase(key);
  }
  cfg["eos_token_id"] = nullptr;
  Metadata md = parse_ok(cfg);
  EXPECT_EQ(u(md, "llama.attention.head_count_kv"), 8u);  // = heads
  EXPECT_EQ(u(md, "llama.context_length"), 2048u);        // LlamaConfig's default
  EXPECT_FLOAT_EQ(static_cast<float>(f(md, "llama.attention.layer_norm_rms_epsilon")), 1e-6f);
  EXPECT_EQ(f(md, "llama.rope.freq_base"), 10000.0);
  EXPECT_FALSE(*md.get_bool("deepinfer.tied_embeddings"));
  EXPECT_FALSE(md.has("tokenizer.ggml.bos_token_id"));
  EXPECT_FALSE(md.has("tokenizer.ggml.eos_token_id"));
}

TEST(HfConfig, ExplicitHeadDimAndTiedEmbeddings) {
  json cfg = llama();
  cfg["head_dim"] = 32;  // wider than hidden_size / heads = 8
  cfg["tie_word_embeddings"] = true;
  Metadata md = parse_ok(cfg);
  EXPECT_EQ(u(md, "llama.attention.key_length"), 32u);
  EXPECT_EQ(u(md, "llama.attention.value_length"), 32u);
  EXPECT_EQ(u(md, "llama.rope.dimension_count"), 32u);
  EXPECT_TRUE(*md.get_bool("deepinfer.tied_embeddings"));
}

TEST(HfConfig, Llama3RopeScalingOldStyle) {
  json cfg = llama();
  cfg["rope_theta"] = 500000.0;
  cfg["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  Metadata md = parse_ok(cfg);
  EXPECT_EQ(f(md, "llama.rope.freq_base"), 500000.0);
  EXPECT_EQ(s(md, "llama.rope.scaling.type"), "llama3");
  EXPECT_EQ(f(md, "llama.rope.scaling.factor"), 8.0);
  EXPECT_EQ(f(md, "llama.rope.scaling.low_freq_factor"), 1.0);
  EXPECT_EQ(f(md, "llama.rope.scaling.high_freq_factor"), 4.0);
  EXPECT_EQ(u(md, "llama.rope.scaling.original_context_length"), 8192u);
}

TEST(HfConfig, Llama3RopeScalingTransformers5Style) {
  json cfg = llama();
  cfg.erase("rope_theta");
  cfg["rope_parameters"] = {{"rope_type", "llama3"},       {"rope_theta", 500000.0},
                            {"factor", 32.0},              {"low_freq_factor", 2.0},
                            {"high_freq_factor", 8.0},     {"original_max_position_embeddings", 32}};
  Metadata md = parse_ok(cfg);
  EXPECT_EQ(f(md, "llama.rope.freq_base"), 500000.0);
  EXPECT_EQ(s(md, "llama.rope.scaling.type"), "llama3");
  EXPECT_EQ(f(md, "llama.rope.scaling.factor"), 32.0);
  EXPECT_EQ(f(md, "llama.rope.scaling.low_freq_factor"), 2.0);
  EXPECT_EQ(f(md, "llama.rope.scaling.high_freq_factor"), 8.0);
  EXPECT_EQ(u(md, "llama.rope.scaling.original_context_length"), 32u);
}

TEST(HfConfig, DefaultRopeParametersMeanNoScaling) {
  json cfg = llama();
  cfg.erase("rope_theta");
  cfg["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  Metadata md = parse_ok(cfg);
  EXPECT_EQ(f(md, "llama.rope.freq_base"), 1000000.0);
  EXPECT_FALSE(md.has("llama.rope.scaling.type"));
}

TEST(HfConfig, LinearRopeScaling) {
  json cfg = llama();
  cfg["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  Metadata md = parse_ok(cfg);
  EXPECT_EQ(s(md, "llama.rope.scaling.type"), "linear");
  EXPECT_EQ(f(md, "llama.rope.scaling.factor"), 4.0);
  EXPECT_FALSE(md.has("llama.rope.scaling.original_context_length"));
}

TEST(HfConfig, PartialRotaryFactor) {
  json cfg = llama();
  cfg["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(u(parse_ok(cfg), "llama.rope.dimension_count"), 4u);
}

TEST(HfConfig, Qwen2) {
  json cfg = llama();
  cfg["architectures"] = {"Qwen2ForCausalLM"};
  cfg["model_type"] = "qwen2";
  cfg["rope_theta"] = 1000000.0;
  cfg["eos_token_id"] = {151645, 151643};
  cfg["sliding_window"] = 131072;  // present in Qwen2.5 configs, inactive without use_sliding_window
  cfg["use_sliding_window"] = false;
  Metadata md = parse_ok(cfg);
  EXPECT_EQ(s(md, "general.architecture"), "qwen2");
  EXPECT_EQ(u(md, "qwen2.embedding_length"), 64u);
  EXPECT_EQ(u(md, "qwen2.attention.head_count_kv"), 2u);
  EXPECT_EQ(f(md, "qwen2.rope.freq_base"), 1000000.0);
  EXPECT_FALSE(md.has("llama.embedding_length"));
  EXPECT_FALSE(md.has("qwen2.attention.sliding_window"));
  EXPECT_EQ(s(md, "deepinfer.rope_style"), "half");
  EXPECT_EQ(u(md, "tokenizer.ggml.eos_token_id"), 151645u);
  auto ids = md.get_int_array("deepinfer.eos_token_ids");
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  EXPECT_EQ(*ids, (std::vector<int64_t>{151645, 151643}));

  cfg["use_sliding_window"] = true;
  Status st = parse_error(cfg.dump());
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_MESSAGE_HAS(st, "use_sliding_window");
}

TEST(HfConfig, MistralIsLlamaWithASlidingWindow) {
  json cfg = llama();
  cfg["architectures"] = {"MistralForCausalLM"};
  cfg["sliding_window"] = 4000;
  Metadata md = parse_ok(cfg);
  EXPECT_EQ(s(md, "general.architecture"), "llama");
  EXPECT_EQ(u(md, "llama.attention.sliding_window"), 4000u);

  cfg["sliding_window"] = nullptr;
  EXPECT_FALSE(parse_ok(cfg).has("llama.attention.sliding_window"));
  cfg.erase("sliding_window");  // MistralConfig's default
  EXPECT_EQ(u(parse_ok(cfg), "llama.attention.sliding_window"), 4096u);
  cfg.erase("max_position_embeddings");
  EXPECT_EQ(u(parse_ok(cfg), "llama.context_length"), 131072u);
}

TEST(HfConfig, ModelTypeStandsInForArchitectures) {
  json cfg = llama();
  cfg.erase("architectures");
  cfg["model_type"] = "qwen2";
  EXPECT_EQ(s(parse_ok(cfg), "general.architecture"), "qwen2");
}

TEST(HfConfig, UnknownArchitecture) {
  json cfg = llama();
  cfg["architectures"] = {"Phi3ForCausalLM"};
  Status st = parse_error(cfg.dump());
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_MESSAGE_HAS(st, kPath);
  EXPECT_MESSAGE_HAS(st, "Phi3ForCausalLM");

  cfg.erase("architectures");
  cfg["model_type"] = "gpt2";
  st = parse_error(cfg.dump());
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_MESSAGE_HAS(st, "gpt2");
}

TEST(HfConfig, BadInputNamesFileAndField) {
  Status st = parse_error("not json at all");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_MESSAGE_HAS(st, kPath);
  EXPECT_MESSAGE_HAS(st, "not valid JSON");

  st = parse_error("[1, 2]");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_MESSAGE_HAS(st, "object");

  json cfg = llama();
  cfg.erase("hidden_size");
  st = parse_error(cfg.dump());
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_MESSAGE_HAS(st, kPath);
  EXPECT_MESSAGE_HAS(st, "'hidden_size' is missing");

  cfg = llama();
  cfg["num_hidden_layers"] = "three";
  st = parse_error(cfg.dump());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_MESSAGE_HAS(st, "'num_hidden_layers' must be");

  cfg = llama();
  cfg["num_attention_heads"] = 0;
  st = parse_error(cfg.dump());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_MESSAGE_HAS(st, "num_attention_heads");

  cfg = llama();
  cfg["hidden_size"] = 65;  // not a multiple of 8 heads, no head_dim
  st = parse_error(cfg.dump());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_MESSAGE_HAS(st, "not a multiple");

  cfg = llama();
  cfg["eos_token_id"] = "</s>";
  st = parse_error(cfg.dump());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_MESSAGE_HAS(st, "eos_token_id");
}

TEST(HfConfig, UnsupportedFeaturesAreRefused) {
  json cfg = llama();
  cfg["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  Status st = parse_error(cfg.dump());
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_MESSAGE_HAS(st, kPath);
  EXPECT_MESSAGE_HAS(st, "'yarn'");

  cfg = llama();
  cfg["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  st = parse_error(cfg.dump());
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_MESSAGE_HAS(st, "original_max_position_embeddings");

  cfg = llama();
  cfg["hidden_act"] = "gelu";
  st = parse_error(cfg.dump());
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_MESSAGE_HAS(st, "gelu");

  cfg = llama();
  cfg["quantization_config"] = {{"quant_method", "gptq"}};
  st = parse_error(cfg.dump());
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_MESSAGE_HAS(st, "quantization_config");

  // fp8 is read when it is block-scaled (the loader pairs each weight with its scales).
  cfg["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}};
  st = parse_error(cfg.dump());
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_MESSAGE_HAS(st, "weight_block_size");
  cfg["quantization_config"]["weight_block_size"] = {128, 128};
  cfg["quantization_config"]["fmt"] = "e5m2";
  st = parse_error(cfg.dump());
  EXPECT_MESSAGE_HAS(st, "e5m2");
  cfg["quantization_config"]["fmt"] = "e4m3";
  EXPECT_TRUE(parse_hf_config(cfg.dump(), "config.json").ok());
}

// Gemma 3 as transformers 4 wrote it: top-level rope_theta and rope_local_base_freq, layer
// kinds from sliding_window_pattern (every 6th layer global), norms with (1 + w).
TEST(HfConfig, Gemma3LegacyKeys) {
  json cfg = llama();
  cfg["architectures"] = {"Gemma3ForCausalLM"};
  cfg.erase("hidden_act");
  cfg["hidden_activation"] = "gelu_pytorch_tanh";
  cfg["num_hidden_layers"] = 7;
  cfg["head_dim"] = 32;
  cfg["rope_theta"] = 1000000.0;
  cfg["rope_local_base_freq"] = 10000.0;
  cfg["sliding_window"] = 512;
  cfg["sliding_window_pattern"] = 6;
  cfg["query_pre_attn_scalar"] = 32;
  cfg["final_logit_softcapping"] = nullptr;
  cfg["attn_logit_softcapping"] = nullptr;
  cfg.erase("tie_word_embeddings");
  const Metadata md = parse_ok(cfg);
  EXPECT_EQ(s(md, "general.architecture"), "gemma3");
  EXPECT_EQ(f(md, "gemma3.rope.freq_base"), 1000000.0);
  EXPECT_EQ(f(md, "gemma3.rope.freq_base_swa"), 10000.0);
  EXPECT_EQ(u(md, "gemma3.attention.sliding_window"), 512u);
  EXPECT_EQ(f(md, "deepinfer.query_pre_attn_scalar"), 32.0);
  EXPECT_FALSE(md.has("gemma3.final_logit_softcapping"));
  EXPECT_TRUE(*md.get_bool("deepinfer.tied_embeddings"));  // Gemma3TextConfig's default
  const MetaValue* kinds = md.find("gemma3.attention.sliding_window_pattern");
  ASSERT_NE(kinds, nullptr);
  const auto& items = std::get<std::shared_ptr<MetaArray>>(kinds->value)->items;
  ASSERT_EQ(items.size(), 7u);
  for (size_t l = 0; l < items.size(); ++l) EXPECT_EQ(std::get<bool>(items[l].value), l != 5) << l;

  cfg["attn_logit_softcapping"] = 50.0;
  EXPECT_EQ(parse_error(cfg.dump()).code(), StatusCode::kUnimplemented);
  cfg["attn_logit_softcapping"] = nullptr;
  cfg["hidden_activation"] = "gelu";
  EXPECT_EQ(parse_error(cfg.dump()).code(), StatusCode::kUnimplemented);
}

TEST(HfConfig, Qwen3MoeExperts) {
  json cfg = llama();
  cfg["architectures"] = {"Qwen3MoeForCausalLM"};
  cfg["num_experts"] = 128;
  cfg["num_experts_per_tok"] = 8;
  cfg["moe_intermediate_size"] = 768;
  cfg["norm_topk_prob"] = true;
  cfg["mlp_only_layers"] = json::array();
  const Metadata md = parse_ok(cfg);
  EXPECT_EQ(s(md, "general.architecture"), "qwen3moe");
  EXPECT_EQ(u(md, "qwen3moe.expert_count"), 128u);
  EXPECT_EQ(u(md, "qwen3moe.expert_used_count"), 8u);
  EXPECT_EQ(u(md, "qwen3moe.expert_feed_forward_length"), 768u);
  EXPECT_TRUE(*md.get_bool("qwen3moe.expert_weights_norm"));
  EXPECT_EQ(u(md, "qwen3moe.attention.key_length"), 8u);  // no head_dim: hidden / heads, as transformers does

  cfg["mlp_only_layers"] = {0};
  EXPECT_EQ(parse_error(cfg.dump()).code(), StatusCode::kUnimplemented);
  cfg["mlp_only_layers"] = json::array();
  cfg["num_experts_per_tok"] = 200;
  EXPECT_EQ(parse_error(cfg.dump()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deepinfer
