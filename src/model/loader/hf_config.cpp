#include "model/loader/hf_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"

namespace deepinfer {
namespace {

using nlohmann::json;

// Hyperparameter defaults of the transformers config classes, used when config.json leaves a
// field out (transformers then falls back to the same values).
struct ArchInfo {
  std::string_view hf_name;
  std::string_view gguf_arch;
  int64_t default_context;
  bool has_sliding_window;  // MistralConfig: sliding_window defaults to 4096, null turns it off
  bool default_tied = false;
  int64_t default_head_dim = 0;  // 0: hidden_size / num_attention_heads
  std::string_view activation = "silu";
};

constexpr ArchInfo kArchitectures[] = {
    {"LlamaForCausalLM", "llama", 2048, false},
    {"MistralForCausalLM", "llama", 4096 * 32, true},
    {"Qwen2ForCausalLM", "qwen2", 32768, false},
    {"Gemma3ForCausalLM", "gemma3", 131072, false, true, 256, "gelu_pytorch_tanh"},
    {"Qwen3ForCausalLM", "qwen3", 32768, false, false, 128},
    {"Qwen3MoeForCausalLM", "qwen3moe", 32768, false, false, 0},
};
constexpr std::string_view kModelTypes[][2] = {
    {"llama", "LlamaForCausalLM"},      {"mistral", "MistralForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"},
    {"gemma3_text", "Gemma3ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"},   {"qwen3_moe", "Qwen3MoeForCausalLM"}};
constexpr double kDefaultRmsEps = 1e-6;
constexpr double kDefaultRopeTheta = 10000.0;
constexpr int64_t kMistralDefaultWindow = 4096;

// Reads typed fields of one JSON object, naming the file in every error.
class ConfigReader {
 public:
  ConfigReader(const json& obj, const std::string& path, std::string prefix = "")
      : obj_(obj), path_(path), prefix_(std::move(prefix)) {}

  bool has(const char* key) const {
    auto it = obj_.find(key);
    return it != obj_.end() && !it->is_null();
  }
  const json* get(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }

  Result<std::optional<int64_t>> opt_int(const char* key) const {
    const json* v = get(key);
    if (!v) return std::optional<int64_t>();
    if (v->is_number_integer()) return std::optional<int64_t>(v->get<int64_t>());
    // 4096.0 is written by some exporters; accept integral floats only.
    if (v->is_number_float()) {
      const double d = v->get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
        return std::optional<int64_t>(static_cast<int64_t>(d));
      }
    }
    return bad(key, "an integer");
  }
  Result<int64_t> positive_int(const char* key) const {
    DI_ASSIGN_OR_RETURN(std::optional<int64_t> v, opt_int(key));
    if (!v) return not_found(path_ + ": required field '" + name(key) + "' is missing");
    if (*v <= 0) return bad(key, "a positive integer");
    return *v;
  }
  Result<int64_t> positive_int_or(const char* key, int64_t fallback) const {
    if (!has(key)) return fallback;
    return positive_int(key);
  }
  Result<std::optional<double>> opt_float(const char* key) const {
    const json* v = get(key);
    if (!v) return std::optional<double>();
    if (!v->is_number()) return bad(key, "a number");
    return std::optional<double>(v->get<double>());
  }
  Result<double> positive_float_or(const char* key, double fallback) const {
    DI_ASSIGN_OR_RETURN(std::optional<double> v, opt_float(key));
    if (!v) return fallback;
    if (!(*v > 0) || !std::isfinite(*v)) return bad(key, "a positive number");
    return *v;
  }
  Result<std::optional<bool>> opt_bool(const char* key) const {
    const json* v = get(key);
    if (!v) return std::optional<bool>();
    if (!v->is_boolean()) return bad(key, "true or false");
    return std::optional<bool>(v->get<bool>());
  }
  Result<std::optional<std::string>> opt_string(const char* key) const {
    const json* v = get(key);
    if (!v) return std::optional<std::string>();
    if (!v->is_string()) return bad(key, "a string");
    return std::optional<std::string>(v->get<std::string>());
  }

  Status bad(const char* key, const char* want) const {
    return invalid_argument(path_ + ": field '" + name(key) + "' must be " + want + ", got " + get_dump(key));
  }

 private:
  std::string name(const char* key) const { return prefix_ + key; }
  std::string get_dump(const char* key) const {
    auto it = obj_.find(key);
    std::string s = it == obj_.end() ? "nothing" : it->dump();
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return s;
  }

  const json& obj_;
  const std::string& path_;
  std::string prefix_;
};

MetaValue u32(int64_t v) { return MetaValue::of_uint(static_cast<uint64_t>(v), MetaType::kU32); }
// GGUF stores these hyperparameters as float32; rounding here gives the forward pass the same
// value from either format (and transformers adds eps to float32 tensors, so it rounds too).
MetaValue f32(double v) { return MetaValue::of_float(static_cast<float>(v), MetaType::kF32); }

Result<const ArchInfo*> find_architecture(const ConfigReader& cfg, const std::string& path) {
  std::string hf_name;
  std::string shown;  // how the error names what was asked for
  if (const json* archs = cfg.get("architectures")) {
    if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
      return cfg.bad("architectures", "a non-empty list of class names");
    }
    hf_name = (*archs)[0].get<std::string>();
    shown = "'" + hf_name + "'";
  } else {
    // Older or hand-written configs may name only the model type; transformers' Auto classes
    // resolve it the same way.
    DI_ASSIGN_OR_RETURN(std::optional<std::string> model_type, cfg.opt_string("model_type"));
    if (!model_type) return not_found(path + ": neither 'architectures' nor 'model_type' is present");
    shown = "of model_type '" + *model_type + "'";
    for (const auto& mt : kModelTypes) {
      if (mt[0] == *model_type) hf_name = std::string(mt[1]);
    }
  }
  for (const ArchInfo& a : kArchitectures) {
    if (a.hf_name == hf_name) return &a;
  }
  return unimplemented(path + ": architecture " + shown +
                       " is not supported (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                       "Gemma3ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, DeepseekV4ForCausalLM)");
}

// rope_theta, partial rotation and scaling. transformers 5 writes them together under
// "rope_parameters"; older configs have top-level "rope_theta" and a "rope_scaling" object.
Status read_rope(const json& root, const std::string& path, const std::string& p, int64_t head_dim, Metadata* md) {
  ConfigReader cfg(root, path);
  const json* params = cfg.get("rope_parameters");
  const char* params_name = "rope_parameters";
  if (!params) {
    params = cfg.get("rope_scaling");
    params_name = "rope_scaling";
  }
  if (params && !params->is_object()) return cfg.bad(params_name, "an object");
  static const json kEmpty = json::object();
  ConfigReader rope(params ? *params : kEmpty, path, std::string(params_name) + ".");

  double theta = kDefaultRopeTheta;
  if (rope.has("rope_theta")) {
    DI_ASSIGN_OR_RETURN(theta, rope.positive_float_or("rope_theta", kDefaultRopeTheta));
  } else {
    DI_ASSIGN_OR_RETURN(theta, cfg.positive_float_or("rope_theta", kDefaultRopeTheta));
  }
  md->set(p + "rope.freq_base", f32(theta));

  double partial = 1.0;
  if (rope.has("partial_rotary_factor")) {
    DI_ASSIGN_OR_RETURN(partial, rope.positive_float_or("partial_rotary_factor", 1.0));
  } else {
    DI_ASSIGN_OR_RETURN(partial, cfg.positive_float_or("partial_rotary_factor", 1.0));
  }
  if (partial > 1.0) return cfg.bad("partial_rotary_factor", "at most 1");
  md->set(p + "rope.dimension_count", u32(static_cast<int64_t>(static_cast<double>(head_dim) * partial)));

  std::optional<std::string> type;
  if (rope.has("rope_type")) {
    DI_ASSIGN_OR_RETURN(type, rope.opt_string("rope_type"));
  } else {
    DI_ASSIGN_OR_RETURN(type, rope.opt_string("type"));
  }
  if (!type || *type == "default") return {};
  auto required_factor = [&]() -> Result<double> {
    if (!rope.has("factor")) return not_found(path + ": " + params_name + " of type '" + *type + "' has no 'factor'");
    return rope.positive_float_or("factor", 1.0);
  };
  if (*type == "linear") {
    DI_ASSIGN_OR_RETURN(double factor, required_factor());
    md->set(p + "rope.scaling.type", MetaValue::of_string("linear"));
    md->set(p + "rope.scaling.factor", f32(factor));
    return {};
  }
  if (*type == "llama3") {
    DI_ASSIGN_OR_RETURN(double factor, required_factor());
    DI_ASSIGN_OR_RETURN(double low, rope.positive_float_or("low_freq_factor", 1.0));
    DI_ASSIGN_OR_RETURN(double high, rope.positive_float_or("high_freq_factor", 4.0));
    DI_ASSIGN_OR_RETURN(int64_t original, rope.positive_int("original_max_position_embeddings"));
    if (!(high > low)) {
      return invalid_argument(path + ": llama3 rope scaling needs high_freq_factor > low_freq_factor");
    }
    md->set(p + "rope.scaling.type", MetaValue::of_string("llama3"));
    md->set(p + "rope.scaling.factor", f32(factor));
    md->set(p + "rope.scaling.low_freq_factor", f32(low));
    md->set(p + "rope.scaling.high_freq_factor", f32(high));
    md->set(p + "rope.scaling.original_context_length", u32(original));
    return {};
  }
  return unimplemented(path + ": rope scaling type '" + *type + "' is not supported (supported: linear, llama3)");
}

// Gemma 3: rope per layer type, layer types, query scaling, soft-capping. transformers 5 writes
// rope_parameters as {"full_attention": {...}, "sliding_attention": {...}}; older configs have
// rope_theta / rope_scaling (global layers) and rope_local_base_freq (sliding layers).
constexpr double kGemmaLocalRopeBase = 10000.0;
constexpr int64_t kGemmaGlobalEvery = 6;
constexpr int64_t kGemmaDefaultWindow = 4096;
constexpr double kGemmaDefaultQueryScalar = 256.0;

Status read_gemma3(const json& root, const std::string& path, const std::string& p, int64_t n_layer,
                   int64_t head_dim, Metadata* md) {
  ConfigReader cfg(root, path);
  const json* params = cfg.get("rope_parameters");
  double local_base = kGemmaLocalRopeBase;
  if (params && params->is_object() && params->contains("full_attention")) {
    json global_root = json::object();
    global_root["rope_parameters"] = (*params)["full_attention"];
    DI_RETURN_IF_ERROR(read_rope(global_root, path, p, head_dim, md));
    if (const auto it = params->find("sliding_attention"); it != params->end() && it->is_object()) {
      ConfigReader local(*it, path, "rope_parameters.sliding_attention.");
      DI_ASSIGN_OR_RETURN(std::optional<std::string> type, local.opt_string("rope_type"));
      if (type && *type != "default") {
        return unimplemented(path + ": rope scaling '" + *type + "' on Gemma 3 sliding layers is not supported");
      }
      DI_ASSIGN_OR_RETURN(local_base, local.positive_float_or("rope_theta", kGemmaLocalRopeBase));
    }
  } else {
    DI_RETURN_IF_ERROR(read_rope(root, path, p, head_dim, md));
    DI_ASSIGN_OR_RETURN(local_base, cfg.positive_float_or("rope_local_base_freq", kGemmaLocalRopeBase));
  }
  md->set(p + "rope.freq_base_swa", f32(local_base));

  // Layer kinds: layer_types, else a pattern where every pattern-th layer is global.
  MetaArray kinds{MetaType::kBool, {}};
  if (const json* types = cfg.get("layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != n_layer) {
      return cfg.bad("layer_types", "a list with one entry per layer");
    }
    for (const json& t : *types) {
      if (t == "sliding_attention") {
        kinds.items.push_back(MetaValue::of_bool(true));
      } else if (t == "full_attention") {
        kinds.items.push_back(MetaValue::of_bool(false));
      } else {
        return cfg.bad("layer_types", "a list of \"sliding_attention\" and \"full_attention\"");
      }
    }
  } else {
    const char* key = cfg.has("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
    DI_ASSIGN_OR_RETURN(int64_t every, cfg.positive_int_or(key, kGemmaGlobalEvery));
    for (int64_t l = 0; l < n_layer; ++l) kinds.items.push_back(MetaValue::of_bool((l + 1) % every != 0));
  }
  auto it = root.find("sliding_window");
  if (it == root.end() || !it->is_null()) {
    DI_ASSIGN_OR_RETURN(int64_t window, cfg.positive_int_or("sliding_window", kGemmaDefaultWindow));
    md->set(p + "attention.sliding_window", u32(window));
    md->set(p + "attention.sliding_window_pattern", MetaValue::of_array(std::move(kinds)));
  }

  DI_ASSIGN_OR_RETURN(double scalar, cfg.positive_float_or("query_pre_attn_scalar", kGemmaDefaultQueryScalar));
  md->set("deepinfer.query_pre_attn_scalar", f32(scalar));
  DI_ASSIGN_OR_RETURN(std::optional<double> final_cap, cfg.opt_float("final_logit_softcapping"));
  if (final_cap) {
    if (!(*final_cap > 0)) return cfg.bad("final_logit_softcapping", "a positive number or null");
    md->set(p + "final_logit_softcapping", f32(*final_cap));
  }
  if (cfg.has("attn_logit_softcapping")) {
    return unimplemented(path + ": attn_logit_softcapping is not supported for Gemma 3");
  }
  DI_ASSIGN_OR_RETURN(std::optional<bool> bidirectional, cfg.opt_bool("use_bidirectional_attention"));
  if (bidirectional.value_or(false)) {
    return unimplemented(path + ": use_bidirectional_attention true (an encoder) is not supported");
  }
  return {};
}

// Qwen3-MoE: experts on every layer (decoder_sparse_step 1, no mlp_only_layers).
Status read_qwen3_moe(const ConfigReader& cfg, const std::string& path, const std::string& p, Metadata* md) {
  const char* count_key = cfg.has("num_experts") ? "num_experts" : "num_local_experts";
  DI_ASSIGN_OR_RETURN(int64_t n_expert, cfg.positive_int(count_key));
  DI_ASSIGN_OR_RETURN(int64_t n_used, cfg.positive_int("num_experts_per_tok"));
  DI_ASSIGN_OR_RETURN(int64_t n_ff, cfg.positive_int("moe_intermediate_size"));
  if (n_used > n_expert) return cfg.bad("num_experts_per_tok", "at most the number of experts");
  DI_ASSIGN_OR_RETURN(std::optional<bool> norm, cfg.opt_bool("norm_topk_prob"));
  DI_ASSIGN_OR_RETURN(int64_t step, cfg.positive_int_or("decoder_sparse_step", 1));
  const json* dense = cfg.get("mlp_only_layers");
  if (step != 1 || (dense && !(dense->is_array() && dense->empty()))) {
    return unimplemented(path + ": Qwen3-MoE with dense layers (decoder_sparse_step or mlp_only_layers) is not supported");
  }
  md->set(p + "expert_count", u32(n_expert));
  md->set(p + "expert_used_count", u32(n_used));
  md->set(p + "expert_feed_forward_length", u32(n_ff));
  md->set(p + "expert_weights_norm", MetaValue::of_bool(norm.value_or(false)));
  return {};
}

// bos_token_id / eos_token_id: an id, null, or (eos, in newer configs) a list of ids.
Status read_special_tokens(const ConfigReader& cfg, Metadata* md) {
  auto valid_id = [](const json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= UINT32_MAX; };
  if (const json* bos = cfg.get("bos_token_id")) {
    if (!valid_id(*bos)) return cfg.bad("bos_token_id", "a token id");
    md->set("tokenizer.ggml.bos_token_id", u32(bos->get<int64_t>()));
  }
  if (const json* eos = cfg.get("eos_token_id")) {
    if (valid_id(*eos)) {
      md->set("tokenizer.ggml.eos_token_id", u32(eos->get<int64_t>()));
    } else if (eos->is_array() && !eos->empty()) {
      MetaArray ids{MetaType::kU32, {}};
      for (const json& id : *eos) {
        if (!valid_id(id)) return cfg.bad("eos_token_id", "a token id or a list of token ids");
        ids.items.push_back(u32(id.get<int64_t>()));
      }
      md->set("tokenizer.ggml.eos_token_id", ids.items.front());
      md->set("deepinfer.eos_token_ids", MetaValue::of_array(std::move(ids)));
    } else {
      return cfg.bad("eos_token_id", "a token id or a list of token ids");
    }
  }
  return {};
}

// quantization_config: only block-scaled FP8 (quant_method "fp8", e4m3 codes, a scale per block
// in "<weight>.scale" or "<weight>.weight_scale_inv"; DeepSeek's FP4 experts ride along under the
// same config) is read, by the safetensors loader (block_scaled.h). The other methods (GPTQ, AWQ,
// bitsandbytes, per-tensor fp8) pack weights in ways the loader does not unpack. Activations are
// not quantized here: "activation_scheme" names what an FP8 GPU kernel does with its inputs.
Status check_block_fp8(const ConfigReader& cfg, const std::string& path) {
  const json* q = cfg.get("quantization_config");
  if (q == nullptr) return {};
  if (!q->is_object()) return cfg.bad("quantization_config", "an object");
  const auto text = [&](const char* key) -> std::string {
    auto it = q->find(key);
    return it != q->end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string method = text("quant_method");
  if (method.empty()) return unimplemented(path + ": quantization_config has no quant_method; block-scaled fp8 is supported");
  if (method != "fp8") {
    return unimplemented(path + ": quantization_config quant_method '" + method +
                         "' is not supported; block-scaled fp8 (with DeepSeek's FP4 experts) is, and F32, F16 "
                         "or BF16 checkpoints are");
  }
  if (const std::string fmt = text("fmt"); !fmt.empty() && fmt != "e4m3") {
    return unimplemented(path + ": fp8 format '" + fmt + "' is not supported (e4m3 is)");
  }
  // Required, but not compared with each tensor's scales: the loader reads every tensor's block
  // off its scales' shape (V4's FP4 experts use 1 x 32 under a config that says 128 x 128).
  auto block = q->find("weight_block_size");
  if (block == q->end() || !block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
      !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() <= 0 || (*block)[1].get<int64_t>() <= 0) {
    return unimplemented(path + ": fp8 without weight_block_size (a scale per tensor or per channel) is not "
                         "supported; block-scaled fp8 is");
  }
  return {};
}

// DeepSeek V4 (DeepseekV4ForCausalLM, model_type deepseek_v4): keys "deepseek_v4.*" that
// model/arch/deepseek_v4.cpp reads. Both the config transformers writes (layer_types,
// mlp_layer_types, compress_rates, rope_parameters {main, compress}) and the legacy fields of
// the official release (compress_ratios, num_hash_layers, compress_rate_csa/hca,
// qk_rope_head_dim, flat rope_parameters or rope_scaling for the compress rope) are read.
enum class DeepseekVersion { kNone, kV4, kV41 };

DeepseekVersion deepseek_version(const ConfigReader& cfg) {
  if (const json* archs = cfg.get("architectures"); archs && archs->is_array() && !archs->empty()) {
    if ((*archs)[0] == "DeepseekV4ForCausalLM") return DeepseekVersion::kV4;
    if ((*archs)[0] == "DeepseekV41ForCausalLM") return DeepseekVersion::kV41;
  }
  const json* mt = cfg.get("model_type");
  if (mt && *mt == "deepseek_v4") return DeepseekVersion::kV4;
  if (mt && *mt == "deepseek_v41") return DeepseekVersion::kV41;
  return DeepseekVersion::kNone;
}

// A list of layer ids, each below n_layer (ids at or past it belong to layers a shortened
// checkpoint left out and are dropped), strictly increasing.
Result<std::vector<int64_t>> layer_ids(const ConfigReader& cfg, const char* key, std::vector<int64_t> fallback,
                                       int64_t n_layer) {
  std::vector<int64_t> ids = std::move(fallback);
  if (const json* v = cfg.get(key)) {
    if (!v->is_array()) return cfg.bad(key, "a list of layer ids");
    ids.clear();
    for (const json& e : *v) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0) return cfg.bad(key, "a list of layer ids");
      ids.push_back(e.get<int64_t>());
    }
  }
  for (size_t i = 1; i < ids.size(); ++i) {
    if (ids[i] <= ids[i - 1]) return cfg.bad(key, "a strictly increasing list of layer ids");
  }
  std::erase_if(ids, [&](int64_t id) { return id >= n_layer; });
  return ids;
}

// DeepSeek V4.1's layer schedule (CSA2): per layer a compress ratio (0: window only), the KV
// sources that own a compressor (each serving the following layers of its ratio), the index
// sources that select their own entries (the rest reuse the last selection), and the candidate
// source. Written as deepseek_v41.{compress_ratios, kv_source_layers, index_source_layers,
// candidate_*}, with layer_types (0 window only, 3 CSA2) and mlp_hash (none) as V4 has them.
Status read_v41_schedule(const ConfigReader& cfg, const std::string& path, int64_t n_layer, const std::string& p,
                         Metadata* md) {
  const json* ratios = cfg.get("compress_ratios");
  if (!ratios || !ratios->is_array() || static_cast<int64_t>(ratios->size()) < n_layer) {
    return cfg.bad("compress_ratios", "a list with one entry per layer");
  }
  std::vector<int64_t> ratio;
  for (int64_t l = 0; l < n_layer; ++l) {
    const json& r = (*ratios)[static_cast<size_t>(l)];
    if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() > 1024) {
      return cfg.bad("compress_ratios", "a list of non-negative compress ratios");
    }
    ratio.push_back(r.get<int64_t>());
  }
  DI_ASSIGN_OR_RETURN(std::vector<int64_t> kv_sources, layer_ids(cfg, "kv_source_layer_ids", {2, 8, 14, 20}, n_layer));
  DI_ASSIGN_OR_RETURN(std::vector<int64_t> index_sources,
                      layer_ids(cfg, "index_source_layer_ids", {2, 8, 14, 20, 24, 28, 32, 36}, n_layer));
  const auto contains = [](const std::vector<int64_t>& v, int64_t x) { return std::ranges::find(v, x) != v.end(); };
  int64_t owner_ratio = -1;
  MetaArray kinds{MetaType::kU32, {}}, hash{MetaType::kBool, {}}, ratio_items{MetaType::kU32, {}};
  for (int64_t l = 0; l < n_layer; ++l) {
    const int64_t r = ratio[static_cast<size_t>(l)];
    const bool source = contains(kv_sources, l);
    if (r == 0 && (source || contains(index_sources, l))) {
      return invalid_argument(path + ": layer " + std::to_string(l) +
                              " has compress ratio 0 (window only) but is listed as a KV or index source");
    }
    if (source && !contains(index_sources, l)) {
      return invalid_argument(path + ": KV source layer " + std::to_string(l) + " is not in index_source_layer_ids");
    }
    if (source) owner_ratio = r;
    if (r != 0 && owner_ratio != r) {
      return invalid_argument(path + ": compressed layer " + std::to_string(l) + " (ratio " + std::to_string(r) +
                              ") has no preceding KV source layer of the same ratio");
    }
    kinds.items.push_back(u32(r == 0 ? 0 : 3));
    hash.items.push_back(MetaValue::of_bool(false));
    ratio_items.items.push_back(u32(r));
  }
  md->set(p + "layer_types", MetaValue::of_array(std::move(kinds)));
  md->set(p + "mlp_hash", MetaValue::of_array(std::move(hash)));
  md->set(p + "compress_ratios", MetaValue::of_array(std::move(ratio_items)));
  const auto id_array = [](const std::vector<int64_t>& ids) {
    MetaArray a{MetaType::kU32, {}};
    for (int64_t id : ids) a.items.push_back(u32(id));
    return MetaValue::of_array(std::move(a));
  };
  md->set(p + "kv_source_layers", id_array(kv_sources));
  md->set(p + "index_source_layers", id_array(index_sources));
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> candidate, cfg.opt_int("candidate_source_layer_id"));
  const int64_t cand = candidate.value_or(20);
  if (cand < -1) return cfg.bad("candidate_source_layer_id", "-1 (off) or a layer id");
  if (cand >= 0 && cand < n_layer) {
    if (!contains(kv_sources, cand)) {
      return invalid_argument(path + ": candidate_source_layer_id " + std::to_string(cand) + " is not a KV source layer");
    }
    DI_ASSIGN_OR_RETURN(int64_t block, cfg.positive_int_or("candidate_block_size", 8));
    DI_ASSIGN_OR_RETURN(int64_t top, cfg.positive_int_or("candidate_topk_blocks", 2048));
    md->set(p + "candidate_source_layer", u32(cand));
    md->set(p + "candidate_block_size", u32(block));
    md->set(p + "candidate_top_blocks", u32(top));
  }
  // DSpark's draft layers (num_nextn_predict_layers of them, window-only: their compress ratios,
  // after the model's, are 0), fed by the streams of dspark_target_layer_ids.
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> n_draft, cfg.opt_int("num_nextn_predict_layers"));
  if (n_draft.value_or(0) > 0) {
    for (int64_t l = n_layer; l < n_layer + *n_draft && l < static_cast<int64_t>(ratios->size()); ++l) {
      if ((*ratios)[static_cast<size_t>(l)] != 0) {
        return invalid_argument(path + ": DSpark draft layer " + std::to_string(l - n_layer) +
                                " must be window-only (compress ratio 0)");
      }
    }
    DI_ASSIGN_OR_RETURN(std::vector<int64_t> targets,
                        layer_ids(cfg, "dspark_target_layer_ids", {37, 38, 39}, n_layer + 1024));
    if (targets.empty() || targets.back() >= n_layer) {
      return cfg.bad("dspark_target_layer_ids", "a list of the model's layers");
    }
    DI_ASSIGN_OR_RETURN(int64_t block, cfg.positive_int_or("dspark_block_size", 5));
    DI_ASSIGN_OR_RETURN(std::optional<int64_t> noise, cfg.opt_int("dspark_noise_token_id"));
    DI_ASSIGN_OR_RETURN(int64_t rank, cfg.positive_int_or("dspark_markov_rank", 256));
    DI_ASSIGN_OR_RETURN(int64_t experts, cfg.positive_int_or("dspark_n_routed_experts", 128));
    DI_ASSIGN_OR_RETURN(int64_t used, cfg.positive_int_or("dspark_num_experts_per_tok", 3));
    if (noise.value_or(128799) < 0 || block > 64) return cfg.bad("dspark_noise_token_id", "a token id");
    md->set(p + "dspark_layers", u32(*n_draft));
    md->set(p + "dspark_target_layers", id_array(targets));
    md->set(p + "dspark_block_size", u32(block));
    md->set(p + "dspark_noise_token", u32(noise.value_or(128799)));
    md->set(p + "dspark_markov_rank", u32(rank));
    md->set(p + "dspark_experts", u32(experts));
    md->set(p + "dspark_experts_used", u32(used));
  }
  // Engram: n-gram hash tables read before the attention site of their layers.
  const json* all_engram = cfg.get("engram_layer_ids");
  const size_t n_listed = all_engram && all_engram->is_array() ? all_engram->size() : 2;
  DI_ASSIGN_OR_RETURN(std::vector<int64_t> engram, layer_ids(cfg, "engram_layer_ids", {1, 14}, n_layer));
  if (engram.empty()) return {};
  const json* rows = cfg.get("engram_num_embeddings");
  if (!rows || !rows->is_array() || rows->size() != n_listed) {
    return cfg.bad("engram_num_embeddings", "a list with one table size per engram_layer_ids entry");
  }
  MetaArray table_rows{MetaType::kU32, {}};
  for (size_t i = 0; i < engram.size(); ++i) {
    const json& r = (*rows)[i];
    if (!r.is_number_integer() || r.get<int64_t>() <= 0 || r.get<int64_t>() >= (int64_t{1} << 31)) {
      return cfg.bad("engram_num_embeddings", "a list of table sizes below 2^31");
    }
    table_rows.items.push_back(u32(r.get<int64_t>()));
  }
  md->set(p + "engram_layers", id_array(engram));
  md->set(p + "engram_table_rows", MetaValue::of_array(std::move(table_rows)));
  DI_ASSIGN_OR_RETURN(int64_t max_ngram, cfg.positive_int_or("engram_max_ngram_size", 4));
  if (max_ngram < 2 || max_ngram > 16) return cfg.bad("engram_max_ngram_size", "an n-gram order from 2 to 16");
  DI_ASSIGN_OR_RETURN(int64_t buckets, cfg.positive_int_or("engram_vocab_size", 16000000));
  DI_ASSIGN_OR_RETURN(int64_t heads, cfg.positive_int_or("engram_n_heads", 8));
  DI_ASSIGN_OR_RETURN(int64_t head_dim, cfg.positive_int_or("engram_head_dim", 256));
  DI_ASSIGN_OR_RETURN(int64_t classes, cfg.positive_int_or("engram_compressed_vocab_size", 99092));
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> pad, cfg.opt_int("engram_pad_token_id"));
  if (pad.value_or(2) < 0) return cfg.bad("engram_pad_token_id", "a token id");
  md->set(p + "engram_max_ngram", u32(max_ngram));
  md->set(p + "engram_buckets", u32(std::min<int64_t>(buckets, int64_t{1} << 31)));
  md->set(p + "engram_heads", u32(heads));
  md->set(p + "engram_head_dim", u32(head_dim));
  md->set(p + "engram_classes", u32(classes));
  md->set(p + "engram_pad_token", u32(pad.value_or(2)));
  return {};
}

// V4's layer schedule: compress rates (CSA, HCA), per layer its type (layer_types, or the
// release's compress_ratios) and whether its MoE is hash-routed.
Status read_v4_schedule(const ConfigReader& cfg, const std::string& path, int64_t n_layer, const std::string& p,
                        Metadata* md) {
  Metadata& m = *md;
  // Compress rates.
  int64_t rate_csa = 4, rate_hca = 128;
  if (const json* rates = cfg.get("compress_rates")) {
    if (!rates->is_object()) return cfg.bad("compress_rates", "an object");
    ConfigReader r(*rates, path, "compress_rates.");
    DI_ASSIGN_OR_RETURN(rate_csa, r.positive_int_or("compressed_sparse_attention", 4));
    DI_ASSIGN_OR_RETURN(rate_hca, r.positive_int_or("heavily_compressed_attention", 128));
  }
  DI_ASSIGN_OR_RETURN(rate_csa, cfg.positive_int_or("compress_rate_csa", rate_csa));
  DI_ASSIGN_OR_RETURN(rate_hca, cfg.positive_int_or("compress_rate_hca", rate_hca));
  m.set(p + "compress_rate_csa", u32(rate_csa));
  m.set(p + "compress_rate_hca", u32(rate_hca));

  // Layer types: 0 sliding, 1 CSA, 2 HCA.
  MetaArray kinds{MetaType::kU32, {}};
  if (const json* types = cfg.get("layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) < n_layer) {
      return cfg.bad("layer_types", "a list with one entry per layer");
    }
    for (int64_t l = 0; l < n_layer; ++l) {
      const json& t = (*types)[static_cast<size_t>(l)];
      if (t == "sliding_attention") {
        kinds.items.push_back(u32(0));
      } else if (t == "compressed_sparse_attention") {
        kinds.items.push_back(u32(1));
      } else if (t == "heavily_compressed_attention") {
        kinds.items.push_back(u32(2));
      } else {
        return cfg.bad("layer_types", "a list of sliding_attention, compressed_sparse_attention and "
                                      "heavily_compressed_attention");
      }
    }
  } else if (const json* ratios = cfg.get("compress_ratios")) {
    if (!ratios->is_array() || static_cast<int64_t>(ratios->size()) < n_layer) {
      return cfg.bad("compress_ratios", "a list with one entry per layer");
    }
    for (int64_t l = 0; l < n_layer; ++l) {
      const json& r = (*ratios)[static_cast<size_t>(l)];
      if (!r.is_number_integer()) return cfg.bad("compress_ratios", "a list of 0, 4 and 128");
      const int64_t v = r.get<int64_t>();
      if (v == 0) {
        kinds.items.push_back(u32(0));
      } else if (v == rate_csa) {
        kinds.items.push_back(u32(1));
      } else if (v == rate_hca) {
        kinds.items.push_back(u32(2));
      } else {
        return cfg.bad("compress_ratios", "a list of 0 and the CSA and HCA compress rates");
      }
    }
  } else {
    // transformers' default: two HCA layers, then CSA and HCA alternating (V4-Pro's schedule).
    for (int64_t l = 0; l < n_layer; ++l) kinds.items.push_back(u32(l < 2 ? 2 : (l - 2) % 2 ? 1 : 2));
  }
  m.set(p + "layer_types", MetaValue::of_array(std::move(kinds)));

  MetaArray hash{MetaType::kBool, {}};
  if (const json* types = cfg.get("mlp_layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) < n_layer) {
      return cfg.bad("mlp_layer_types", "a list with one entry per layer");
    }
    for (int64_t l = 0; l < n_layer; ++l) {
      const json& t = (*types)[static_cast<size_t>(l)];
      if (t != "hash_moe" && t != "moe") return cfg.bad("mlp_layer_types", "a list of hash_moe and moe");
      hash.items.push_back(MetaValue::of_bool(t == "hash_moe"));
    }
  } else {
    DI_ASSIGN_OR_RETURN(std::optional<int64_t> n_hash, cfg.opt_int("num_hash_layers"));
    for (int64_t l = 0; l < n_layer; ++l) hash.items.push_back(MetaValue::of_bool(l < n_hash.value_or(3)));
  }
  m.set(p + "mlp_hash", MetaValue::of_array(std::move(hash)));

  return {};
}

Result<Metadata> parse_deepseek_v4(const json& root, const std::string& path, DeepseekVersion version) {
  const bool v41 = version == DeepseekVersion::kV41;
  // V4.1's checkpoint config nests the text model's fields under text_config (beside the
  // vision tower's); a flat config is read as is.
  const bool nested = v41 && root.contains("text_config") && root["text_config"].is_object();
  ConfigReader cfg(nested ? root["text_config"] : root, path, nested ? "text_config." : "");
  DI_RETURN_IF_ERROR(check_block_fp8(ConfigReader(root, path), path));
  Metadata md;
  const std::string arch = v41 ? "deepseek_v41" : "deepseek_v4";
  const std::string p = arch + ".";
  md.set("general.architecture", MetaValue::of_string(arch));
  std::string name = std::filesystem::path(path).parent_path().filename().string();
  md.set("general.name", MetaValue::of_string(name.empty() ? arch : name));
  md.set("deepinfer.source_format", MetaValue::of_string("safetensors"));
  const auto set_int = [&](const char* key, const std::string& gguf, std::optional<int64_t> fallback) -> Status {
    int64_t v = 0;
    if (fallback) {
      DI_ASSIGN_OR_RETURN(v, cfg.positive_int_or(key, *fallback));
    } else {
      DI_ASSIGN_OR_RETURN(v, cfg.positive_int(key));
    }
    md.set(p + gguf, u32(v));
    return {};
  };
  DI_RETURN_IF_ERROR(set_int("hidden_size", "embedding_length", 4096));
  DI_RETURN_IF_ERROR(set_int("num_hidden_layers", "block_count", 43));
  DI_RETURN_IF_ERROR(set_int("num_attention_heads", "attention.head_count", 64));
  DI_RETURN_IF_ERROR(set_int("num_key_value_heads", "attention.head_count_kv", 1));
  DI_RETURN_IF_ERROR(set_int("head_dim", "attention.key_length", 512));
  DI_RETURN_IF_ERROR(set_int("vocab_size", "vocab_size", 129280));
  DI_RETURN_IF_ERROR(set_int("max_position_embeddings", "context_length", 1048576));
  DI_RETURN_IF_ERROR(set_int("q_lora_rank", "q_lora_rank", 1024));
  DI_RETURN_IF_ERROR(set_int("o_groups", "o_groups", 8));
  DI_RETURN_IF_ERROR(set_int("o_lora_rank", "o_lora_rank", 1024));
  DI_RETURN_IF_ERROR(set_int("sliding_window", "attention.sliding_window", 128));
  DI_RETURN_IF_ERROR(set_int("n_routed_experts", "expert_count", 256));
  DI_RETURN_IF_ERROR(set_int("num_experts_per_tok", "expert_used_count", 6));
  DI_RETURN_IF_ERROR(set_int("moe_intermediate_size", "expert_feed_forward_length", 2048));
  DI_RETURN_IF_ERROR(set_int("hc_mult", "hc_mult", 4));
  DI_RETURN_IF_ERROR(set_int("hc_sinkhorn_iters", "hc_sinkhorn_iters", 20));
  DI_RETURN_IF_ERROR(set_int("index_n_heads", "index_n_heads", 64));
  DI_RETURN_IF_ERROR(set_int("index_head_dim", "index_head_dim", 128));
  DI_RETURN_IF_ERROR(set_int("index_topk", "index_topk", 512));
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> n_shared, cfg.opt_int("n_shared_experts"));
  md.set(p + "expert_shared_count", u32(n_shared.value_or(1)));
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> n_mtp, cfg.opt_int("num_nextn_predict_layers"));
  // V4.1's next-n layers are DSpark's draft layers, not MTP ones: not bound as a draft head.
  md.set(p + "nextn_predict_layers", u32(v41 ? 0 : n_mtp.value_or(1)));
  // NeMo's V4.1 port defaults to 1e-20; V4's configs default to 1e-6.
  DI_ASSIGN_OR_RETURN(double eps, cfg.positive_float_or("rms_norm_eps", v41 ? 1e-20 : 1e-6));
  md.set(p + "attention.layer_norm_rms_epsilon", f32(eps));
  DI_ASSIGN_OR_RETURN(double hc_eps, cfg.positive_float_or("hc_eps", 1e-6));
  md.set(p + "hc_eps", f32(hc_eps));
  DI_ASSIGN_OR_RETURN(double routed_scale, cfg.positive_float_or("routed_scaling_factor", 1.5));
  md.set(p + "expert_weights_scale", f32(routed_scale));
  DI_ASSIGN_OR_RETURN(double limit, cfg.positive_float_or("swiglu_limit", 10.0));
  md.set(p + "swiglu_limit", f32(limit));
  DI_ASSIGN_OR_RETURN(std::optional<std::string> scoring, cfg.opt_string("scoring_func"));
  if (scoring.value_or("sqrtsoftplus") != "sqrtsoftplus") {
    return unimplemented(path + ": DeepSeek V4 scoring_func '" + *scoring + "' is not supported (sqrtsoftplus)");
  }
  DI_ASSIGN_OR_RETURN(std::optional<bool> norm_topk, cfg.opt_bool("norm_topk_prob"));
  if (!norm_topk.value_or(true)) return unimplemented(path + ": DeepSeek V4 with norm_topk_prob false is not supported");
  DI_ASSIGN_OR_RETURN(std::optional<std::string> act, cfg.opt_string("hidden_act"));
  if (act.value_or("silu") != "silu") return unimplemented(path + ": hidden_act '" + *act + "' is not supported");
  DI_ASSIGN_OR_RETURN(std::optional<bool> tied, cfg.opt_bool("tie_word_embeddings"));
  if (tied.value_or(false)) return unimplemented(path + ": DeepSeek V4 with tied embeddings is not supported");
  DI_ASSIGN_OR_RETURN(int64_t n_layer, cfg.positive_int_or("num_hidden_layers", 43));
  DI_ASSIGN_OR_RETURN(int64_t head_dim, cfg.positive_int_or("head_dim", 512));

  if (v41) {
    DI_RETURN_IF_ERROR(read_v41_schedule(cfg, path, n_layer, p, &md));
  } else {
    DI_RETURN_IF_ERROR(read_v4_schedule(cfg, path, n_layer, p, &md));
  }

  // Rope: partial (trailing channels), main (sliding layers) and compress (CSA/HCA layers).
  double partial = 64.0 / 512.0;
  if (cfg.has("partial_rotary_factor")) {
    DI_ASSIGN_OR_RETURN(partial, cfg.positive_float_or("partial_rotary_factor", partial));
  } else if (cfg.has("qk_rope_head_dim")) {
    DI_ASSIGN_OR_RETURN(int64_t rope_dim, cfg.positive_int("qk_rope_head_dim"));
    partial = static_cast<double>(rope_dim) / static_cast<double>(head_dim);
  }
  md.set(p + "rope.dimension_count", u32(static_cast<int64_t>(static_cast<double>(head_dim) * partial)));
  DI_ASSIGN_OR_RETURN(double theta, cfg.positive_float_or("rope_theta", 10000.0));
  DI_ASSIGN_OR_RETURN(double compress_theta, cfg.positive_float_or("compress_rope_theta", 160000.0));
  const json* params = cfg.get("rope_parameters");
  if (!params) params = cfg.get("rope_scaling");
  static const json kEmpty = json::object();
  const json* compress = &kEmpty;
  if (params && params->is_object()) {
    if (params->contains("main") && (*params)["main"].is_object()) {
      ConfigReader main((*params)["main"], path, "rope_parameters.main.");
      DI_ASSIGN_OR_RETURN(theta, main.positive_float_or("rope_theta", theta));
      DI_ASSIGN_OR_RETURN(std::optional<std::string> type, main.opt_string("rope_type"));
      if (type.value_or("default") != "default") {
        return unimplemented(path + ": rope type '" + *type + "' on DeepSeek V4 sliding layers is not supported");
      }
    }
    compress = params->contains("compress") && (*params)["compress"].is_object() ? &(*params)["compress"] : params;
  }
  ConfigReader cr(*compress, path, "rope_parameters.compress.");
  // V4.1's flat rope_parameters carry the main rope_theta beside the compress rope's YaRN.
  if (compress != params || (!v41 && cr.has("rope_theta"))) {
    DI_ASSIGN_OR_RETURN(compress_theta, cr.positive_float_or("rope_theta", compress_theta));
  }
  md.set(p + "rope.freq_base", f32(theta));
  md.set(p + "compress_rope.freq_base", f32(compress_theta));
  DI_ASSIGN_OR_RETURN(std::optional<std::string> ctype, cr.opt_string("rope_type"));
  if (!ctype) {
    DI_ASSIGN_OR_RETURN(ctype, cr.opt_string("type"));
  }
  if (ctype && *ctype == "yarn") {
    DI_ASSIGN_OR_RETURN(double factor, cr.positive_float_or("factor", 16.0));
    DI_ASSIGN_OR_RETURN(int64_t original, cr.positive_int_or("original_max_position_embeddings", 65536));
    DI_ASSIGN_OR_RETURN(double beta_fast, cr.positive_float_or("beta_fast", 32.0));
    DI_ASSIGN_OR_RETURN(double beta_slow, cr.positive_float_or("beta_slow", 1.0));
    DI_ASSIGN_OR_RETURN(double attention_factor, cr.positive_float_or("attention_factor", 1.0));
    if (attention_factor != 1.0) {
      return unimplemented(path + ": DeepSeek V4 compress rope with attention_factor != 1 is not supported");
    }
    md.set(p + "compress_rope.scaling.type", MetaValue::of_string("yarn"));
    md.set(p + "compress_rope.scaling.factor", MetaValue::of_float(factor));
    md.set(p + "compress_rope.scaling.original_context_length", u32(original));
    md.set(p + "compress_rope.scaling.beta_fast", MetaValue::of_float(beta_fast));
    md.set(p + "compress_rope.scaling.beta_slow", MetaValue::of_float(beta_slow));
  } else if (ctype && *ctype != "default") {
    return unimplemented(path + ": rope type '" + *ctype + "' on DeepSeek V4 compressed layers is not supported");
  }
  DI_RETURN_IF_ERROR(read_special_tokens(cfg, &md));
  return md;
}

}  // namespace

bool hf_integer_tensor_allowed(std::string_view hf_name, std::string_view architecture) {
  return architecture == "deepseek_v4" && hf_name.ends_with(".gate.tid2eid");
}

Result<Metadata> parse_hf_config(std::string_view json_text, const std::string& path) {
  const json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return invalid_argument(path + ": config.json is not valid JSON");
  if (!root.is_object()) return invalid_argument(path + ": config.json must hold a JSON object");
  ConfigReader cfg(root, path);
  if (const DeepseekVersion v = deepseek_version(cfg); v != DeepseekVersion::kNone) {
    return parse_deepseek_v4(root, path, v);
  }

  DI_ASSIGN_OR_RETURN(const ArchInfo* arch, find_architecture(cfg, path));
  DI_RETURN_IF_ERROR(check_block_fp8(cfg, path));
  DI_ASSIGN_OR_RETURN(std::optional<std::string> act,
                      cfg.opt_string(arch->gguf_arch == "gemma3" ? "hidden_activation" : "hidden_act"));
  if (act && *act != arch->activation) {
    return unimplemented(path + ": hidden_act '" + *act + "' is not supported for " + std::string(arch->hf_name));
  }

  Metadata md;
  const std::string a(arch->gguf_arch);
  const std::string p = a + ".";
  md.set("general.architecture", MetaValue::of_string(a));
  std::string name = std::filesystem::path(path).parent_path().filename().string();
  md.set("general.name", MetaValue::of_string(name.empty() ? a : name));
  md.set("deepinfer.source_format", MetaValue::of_string("safetensors"));
  md.set("deepinfer.rope_style", MetaValue::of_string("half"));

  DI_ASSIGN_OR_RETURN(int64_t n_embd, cfg.positive_int("hidden_size"));
  DI_ASSIGN_OR_RETURN(int64_t n_layer, cfg.positive_int("num_hidden_layers"));
  DI_ASSIGN_OR_RETURN(int64_t n_ff, cfg.positive_int("intermediate_size"));
  DI_ASSIGN_OR_RETURN(int64_t n_head, cfg.positive_int("num_attention_heads"));
  DI_ASSIGN_OR_RETURN(int64_t n_vocab, cfg.positive_int("vocab_size"));
  DI_ASSIGN_OR_RETURN(int64_t n_head_kv, cfg.positive_int_or("num_key_value_heads", n_head));
  DI_ASSIGN_OR_RETURN(int64_t n_ctx, cfg.positive_int_or("max_position_embeddings", arch->default_context));
  int64_t head_dim = 0;
  if (cfg.has("head_dim")) {
    DI_ASSIGN_OR_RETURN(head_dim, cfg.positive_int("head_dim"));
  } else if (arch->default_head_dim > 0) {
    head_dim = arch->default_head_dim;
  } else {
    if (n_embd % n_head != 0) {
      return invalid_argument(path + ": hidden_size " + std::to_string(n_embd) +
                              " is not a multiple of num_attention_heads " + std::to_string(n_head) +
                              " and no head_dim is given");
    }
    head_dim = n_embd / n_head;
  }
  DI_ASSIGN_OR_RETURN(double eps, cfg.positive_float_or("rms_norm_eps", kDefaultRmsEps));

  md.set(p + "context_length", u32(n_ctx));
  md.set(p + "embedding_length", u32(n_embd));
  md.set(p + "block_count", u32(n_layer));
  md.set(p + "feed_forward_length", u32(n_ff));
  md.set(p + "attention.head_count", u32(n_head));
  md.set(p + "attention.head_count_kv", u32(n_head_kv));
  md.set(p + "attention.key_length", u32(head_dim));
  md.set(p + "attention.value_length", u32(head_dim));
  md.set(p + "attention.layer_norm_rms_epsilon", f32(eps));
  md.set(p + "vocab_size", u32(n_vocab));
  if (arch->gguf_arch == "gemma3") {
    DI_RETURN_IF_ERROR(read_gemma3(root, path, p, n_layer, head_dim, &md));
  } else {
    DI_RETURN_IF_ERROR(read_rope(root, path, p, head_dim, &md));
  }
  if (arch->gguf_arch == "qwen3moe") {
    DI_RETURN_IF_ERROR(read_qwen3_moe(cfg, path, p, &md));
  }

  DI_ASSIGN_OR_RETURN(std::optional<bool> tied, cfg.opt_bool("tie_word_embeddings"));
  md.set("deepinfer.tied_embeddings", MetaValue::of_bool(tied.value_or(arch->default_tied)));

  if (arch->has_sliding_window) {
    // Missing means the class default; an explicit null turns the window off.
    auto it = root.find("sliding_window");
    if (it == root.end()) {
      md.set(p + "attention.sliding_window", u32(kMistralDefaultWindow));
    } else if (!it->is_null()) {
      DI_ASSIGN_OR_RETURN(int64_t window, cfg.positive_int("sliding_window"));
      md.set(p + "attention.sliding_window", u32(window));
    }
  } else if (arch->gguf_arch == "qwen2" || arch->gguf_arch == "qwen3" || arch->gguf_arch == "qwen3moe") {
    // Qwen2's window applies only to layers from max_window_layers on; the forward pass has no
    // per-layer window, so refuse rather than compute something else.
    DI_ASSIGN_OR_RETURN(std::optional<bool> use_window, cfg.opt_bool("use_sliding_window"));
    if (use_window.value_or(false)) {
      return unimplemented(path + ": " + std::string(arch->hf_name) + " with use_sliding_window true is not supported");
    }
  }
  DI_RETURN_IF_ERROR(read_special_tokens(cfg, &md));
  return md;
}

Result<Metadata> read_hf_config(const std::string& path) {
  DI_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  const auto* text = reinterpret_cast<const char*>(file.data());
  return parse_hf_config(std::string_view(text ? text : "", file.size()), path);
}

std::optional<std::string> hf_to_gguf_tensor_name(std::string_view hf_name, std::string_view architecture) {
  // Rotary inv_freq buffers were saved by old transformers versions; the forward pass computes
  // the frequencies from the config instead.
  if (hf_name.ends_with("rotary_emb.inv_freq")) return std::nullopt;
  // DeepSeek V4 keeps its Hugging Face names: GGUF has no vocabulary for its tensors yet.
  if (architecture == "deepseek_v4" || architecture == "deepseek_v41") return std::string(hf_name);
  if (hf_name == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf_name == "model.norm.weight") return "output_norm.weight";
  if (hf_name == "lm_head.weight") return "output.weight";

  constexpr std::string_view kLayers = "model.layers.";
  if (!hf_name.starts_with(kLayers)) return std::string(hf_name);
  std::string_view rest = hf_name.substr(kLayers.size());
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos) return std::string(hf_name);
  const std::string_view layer = rest.substr(0, dot);
  for (char c : layer) {
    if (c < '0' || c > '9') return std::string(hf_name);
  }
  const std::string_view leaf = rest.substr(dot + 1);

  // Gemma's post_attention_layernorm normalises the attention output (a sandwich norm); its
  // pre_feedforward_layernorm plays the part Llama's post_attention_layernorm does.
  static constexpr std::string_view kGemmaExact[][2] = {
      {"post_attention_layernorm.weight", "post_attention_norm.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
  };
  static constexpr std::string_view kExact[][2] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},  // MoE router
  };
  // Projections keep their suffix (.weight or .bias).
  static constexpr std::string_view kPrefix[][2] = {
      {"self_attn.q_proj.", "attn_q."},   {"self_attn.k_proj.", "attn_k."},
      {"self_attn.v_proj.", "attn_v."},   {"self_attn.o_proj.", "attn_output."},
      {"mlp.gate_proj.", "ffn_gate."},    {"mlp.up_proj.", "ffn_up."},
      {"mlp.down_proj.", "ffn_down."},
  };
  const std::string blk = "blk." + std::string(layer) + ".";
  if (architecture == "gemma3") {
    for (const auto& m : kGemmaExact) {
      if (leaf == m[0]) return blk + std::string(m[1]);
    }
  }
  // MoE experts stay one matrix each: mlp.experts.E.gate_proj.weight -> ffn_gate_exps.E.weight.
  constexpr std::string_view kExperts = "mlp.experts.";
  if (leaf.starts_with(kExperts)) {
    const std::string_view expert_leaf = leaf.substr(kExperts.size());
    const size_t expert_dot = expert_leaf.find('.');
    static constexpr std::string_view kExpertProj[][2] = {
        {"gate_proj.weight", "ffn_gate_exps."}, {"up_proj.weight", "ffn_up_exps."}, {"down_proj.weight", "ffn_down_exps."}};
    if (expert_dot != std::string_view::npos && expert_dot > 0) {
      const std::string_view expert = expert_leaf.substr(0, expert_dot);
      const bool numeric = std::all_of(expert.begin(), expert.end(), [](char c) { return c >= '0' && c <= '9'; });
      for (const auto& m : kExpertProj) {
        if (numeric && expert_leaf.substr(expert_dot + 1) == m[0]) {
          return blk + std::string(m[1]) + std::string(expert) + ".weight";
        }
      }
    }
  }
  for (const auto& m : kExact) {
    if (leaf == m[0]) return blk + std::string(m[1]);
  }
  for (const auto& m : kPrefix) {
    if (leaf.starts_with(m[0])) {
      const std::string_view suffix = leaf.substr(m[0].size());
      if (suffix == "weight" || suffix == "bias") return blk + std::string(m[1]) + std::string(suffix);
    }
  }
  return std::string(hf_name);
}

}  // namespace deepinfer
