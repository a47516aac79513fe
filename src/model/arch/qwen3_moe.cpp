// Qwen3-MoE decoder (GGUF "qwen3moe"; Hugging Face Qwen3MoeForCausalLM): Qwen3 attention with
// QK-norm, and on every layer a mixture of SwiGLU experts instead of the dense MLP: a router
// (softmax over all experts), the top expert_used_count experts per token, their outputs
// weighted by the router probabilities, renormalised to sum 1 when expert_weights_norm is set
// (Hugging Face norm_topk_prob). llama.cpp always renormalises for qwen3moe, so GGUF files
// without the key do too.
#include "model/arch/decoder.h"
#include "model/arch/registry.h"

namespace deepinfer {

Result<std::unique_ptr<Model>> create_qwen3_moe_model(std::unique_ptr<TensorSource> source, backend::Backend& backend) {
  ModelConfig c;
  DI_RETURN_IF_ERROR(read_decoder_config(*source, 1e-6, &c));
  const Metadata& md = source->metadata();
  const std::string p = c.architecture + ".";
  DecoderSpec s;
  s.qk_norm = true;
  DI_ASSIGN_OR_RETURN(uint64_t n_expert, md.get_uint(p + "expert_count"));
  DI_ASSIGN_OR_RETURN(uint64_t n_used, md.get_uint(p + "expert_used_count"));
  DI_ASSIGN_OR_RETURN(uint64_t n_ff, md.get_uint(p + "expert_feed_forward_length"));
  DI_ASSIGN_OR_RETURN(s.expert_weights_norm, md.get_bool_or(p + "expert_weights_norm", true));
  s.n_expert = static_cast<int64_t>(n_expert);
  s.n_expert_used = static_cast<int64_t>(n_used);
  s.n_ff_expert = static_cast<int64_t>(n_ff);
  return create_decoder_model(std::move(source), std::move(c), std::move(s), backend);
}

}  // namespace deepinfer
