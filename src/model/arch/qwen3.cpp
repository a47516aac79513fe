// Qwen3 dense decoder (GGUF "qwen3"; Hugging Face Qwen3ForCausalLM): the Llama layer without
// biases, plus RMSNorm over each head of Q and K before rope (QK-norm).
#include "model/arch/decoder.h"
#include "model/arch/registry.h"

namespace deepinfer {

Result<std::unique_ptr<Model>> create_qwen3_model(std::unique_ptr<TensorSource> source, backend::Backend& backend) {
  ModelConfig c;
  DI_RETURN_IF_ERROR(read_decoder_config(*source, 1e-6, &c));
  DecoderSpec s;
  s.qk_norm = true;
  return create_decoder_model(std::move(source), std::move(c), std::move(s), backend);
}

}  // namespace deepinfer
