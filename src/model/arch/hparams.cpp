#include "model/arch/hparams.h"

#include <string>

namespace deepinfer {

Status read_common_hparams(const TensorSource& source, double default_rms_eps, ModelConfig* config) {
  const Metadata& md = source.metadata();
  ModelConfig& c = *config;
  DI_ASSIGN_OR_RETURN(c.architecture, md.get_string("general.architecture"));
  DI_ASSIGN_OR_RETURN(c.name, md.get_string_or("general.name", c.architecture));
  const std::string p = c.architecture + ".";
  auto get_int = [&](const std::string& key) -> Result<int64_t> {
    auto r = md.get_int(key);
    if (!r.ok()) return Status(r.status().code(), source.path() + ": " + r.status().message());
    if (*r <= 0) return invalid_argument(source.path() + ": metadata key '" + key + "' must be positive");
    return *r;
  };
  DI_ASSIGN_OR_RETURN(c.n_embd, get_int(p + "embedding_length"));
  DI_ASSIGN_OR_RETURN(c.n_layer, get_int(p + "block_count"));
  DI_ASSIGN_OR_RETURN(c.n_head, get_int(p + "attention.head_count"));
  DI_ASSIGN_OR_RETURN(c.n_ctx_train, get_int(p + "context_length"));
  c.n_ff = 0;  // MoE models may have no dense FFN width
  if (md.has(p + "feed_forward_length")) {
    DI_ASSIGN_OR_RETURN(c.n_ff, get_int(p + "feed_forward_length"));
  }
  c.n_head_kv = c.n_head;
  if (md.has(p + "attention.head_count_kv")) {
    DI_ASSIGN_OR_RETURN(c.n_head_kv, get_int(p + "attention.head_count_kv"));
  }
  c.head_dim = c.n_embd / c.n_head;
  if (md.has(p + "attention.key_length")) {
    DI_ASSIGN_OR_RETURN(c.head_dim, get_int(p + "attention.key_length"));
  }
  c.n_rot = c.head_dim;
  if (md.has(p + "rope.dimension_count")) {
    DI_ASSIGN_OR_RETURN(c.n_rot, get_int(p + "rope.dimension_count"));
  }
  DI_ASSIGN_OR_RETURN(c.rms_norm_eps, md.get_float_or(p + "attention.layer_norm_rms_epsilon", default_rms_eps));
  DI_ASSIGN_OR_RETURN(c.rope_theta, md.get_float_or(p + "rope.freq_base", 10000.0));
  if (c.n_head % c.n_head_kv != 0) {
    return invalid_argument(source.path() + ": head_count " + std::to_string(c.n_head) +
                            " is not a multiple of head_count_kv " + std::to_string(c.n_head_kv));
  }
  if (c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    return invalid_argument(source.path() + ": rope dimension " + std::to_string(c.n_rot) +
                            " must be even and at most the head size " + std::to_string(c.head_dim));
  }
  if (c.head_dim > 1024) return unimplemented(source.path() + ": head size above 1024 is not supported");
  c.tied_embeddings = source.find("output.weight") == nullptr;
  DI_ASSIGN_OR_RETURN(const TensorView* embd, source.get("token_embd.weight"));
  if (embd->shape.size() != 2) {
    return invalid_argument(source.path() + ": tensor 'token_embd.weight' has shape " + embd->shape_string() +
                            ", expected [n_vocab, " + std::to_string(c.n_embd) + "]");
  }
  c.n_vocab = embd->shape[0];
  return {};
}

}  // namespace deepinfer
