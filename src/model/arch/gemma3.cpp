// Gemma 3 text decoder (GGUF "gemma3"; Hugging Face Gemma3ForCausalLM).
//
// On top of the shared decoder: QK-norm, sandwich norms, every norm scaling by (1 + w), GeGLU
// with tanh GELU, embeddings times sqrt(n_embd), q·k scaled by query_pre_attn_scalar^-1/2,
// optional final logit soft-capping, and two kinds of layers: sliding (window, local rope base
// rope.freq_base_swa, no rope scaling) and global (full attention, rope.freq_base with any
// linear scaling). The layer kinds come from attention.sliding_window_pattern (one bool per
// layer, true = sliding) or, as llama.cpp assumes for Gemma 3 GGUF files that lack it, every
// sixth layer global.
#include <cmath>

#include "model/arch/decoder.h"
#include "model/arch/registry.h"

namespace deepinfer {

namespace {

constexpr int64_t kDefaultGlobalEvery = 6;
constexpr double kDefaultLocalRopeBase = 10000.0;
// Gemma 3 27B (62 layers) scales queries by hidden/heads rather than the head size; llama.cpp
// keys the choice on the layer count, as GGUF has no field for it.
constexpr int64_t k27bLayers = 62;

Result<std::vector<bool>> read_layer_kinds(const Metadata& md, const std::string& key, int64_t n_layer,
                                           const std::string& path) {
  std::vector<bool> sliding(static_cast<size_t>(n_layer));
  const MetaValue* v = md.find(key);
  if (v == nullptr) {
    for (int64_t l = 0; l < n_layer; ++l) sliding[static_cast<size_t>(l)] = (l + 1) % kDefaultGlobalEvery != 0;
    return sliding;
  }
  const auto* array = std::get_if<std::shared_ptr<MetaArray>>(&v->value);
  if (array == nullptr || static_cast<int64_t>((*array)->items.size()) != n_layer) {
    return invalid_argument(path + ": metadata key '" + key + "' must be an array of " + std::to_string(n_layer) +
                            " booleans (one per layer)");
  }
  for (int64_t l = 0; l < n_layer; ++l) {
    const auto* b = std::get_if<bool>(&(*array)->items[static_cast<size_t>(l)].value);
    if (b == nullptr) return invalid_argument(path + ": metadata key '" + key + "' must hold booleans");
    sliding[static_cast<size_t>(l)] = *b;
  }
  return sliding;
}

}  // namespace

Result<std::unique_ptr<Model>> create_gemma3_model(std::unique_ptr<TensorSource> source, backend::Backend& backend) {
  ModelConfig c;
  DI_RETURN_IF_ERROR(read_decoder_config(*source, 1e-6, &c));
  const Metadata& md = source->metadata();
  const std::string p = c.architecture + ".";
  DecoderSpec s;
  s.qk_norm = true;
  s.sandwich_norms = true;
  DI_ASSIGN_OR_RETURN(std::string format, md.get_string_or("deepinfer.source_format", "gguf"));
  s.norm_weight_offset = format == "safetensors" ? 1.0f : 0.0f;
  s.activation = FfnActivation::kGeluTanh;
  s.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.n_embd)));
  const double default_scalar =
      c.n_layer == k27bLayers ? static_cast<double>(c.n_embd / c.n_head) : static_cast<double>(c.head_dim);
  DI_ASSIGN_OR_RETURN(double scalar, md.get_float_or("deepinfer.query_pre_attn_scalar", default_scalar));
  if (!(scalar > 0)) return invalid_argument(source->path() + ": query_pre_attn_scalar must be positive");
  s.attention_scale = static_cast<float>(1.0 / std::sqrt(scalar));
  DI_ASSIGN_OR_RETURN(double final_cap, md.get_float_or(p + "final_logit_softcapping", 0.0));
  s.final_logit_softcap = static_cast<float>(final_cap);
  DI_ASSIGN_OR_RETURN(double attn_cap, md.get_float_or(p + "attn_logit_softcapping", 0.0));
  if (attn_cap > 0) return unimplemented(source->path() + ": attention logit soft-capping is not supported");

  DI_ASSIGN_OR_RETURN(uint64_t window, md.get_uint_or(p + "attention.sliding_window", 0));
  s.window = static_cast<int64_t>(window);
  if (s.window > 0) {
    DI_ASSIGN_OR_RETURN(s.layer_sliding,
                        read_layer_kinds(md, p + "attention.sliding_window_pattern", c.n_layer, source->path()));
  }
  DI_ASSIGN_OR_RETURN(s.rope_theta_sliding, md.get_float_or(p + "rope.freq_base_swa", kDefaultLocalRopeBase));
  // The window differs by layer; ModelConfig's single window would claim it for every layer.
  c.sliding_window = 0;
  return create_decoder_model(std::move(source), std::move(c), std::move(s), backend);
}

}  // namespace deepinfer
