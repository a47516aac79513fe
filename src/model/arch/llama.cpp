// Llama-family decoder: Llama 2/3, SmolLM2, Mistral (GGUF and Hugging Face both say "llama"
// after loading) and Qwen2. The shared decoder (decoder.h) with Llama's hyperparameters: rope
// pairs interleaved channels in GGUF "llama" weights (their Q/K rows are permuted for it) and
// halves in Hugging Face checkpoints and GGUF qwen2; Q/K/V biases where the file has them
// (Qwen2); llama3 or linear rope scaling; Mistral's window on every layer.
#include "model/arch/decoder.h"
#include "model/arch/registry.h"

namespace deepinfer {

Result<std::unique_ptr<Model>> create_llama_model(std::unique_ptr<TensorSource> source, backend::Backend& backend) {
  ModelConfig c;
  DI_RETURN_IF_ERROR(read_decoder_config(*source, 1e-5, &c));
  const Metadata& md = source->metadata();
  const std::string p = c.architecture + ".";
  // The safetensors loader marks the sources whose weights rotate halves.
  DI_ASSIGN_OR_RETURN(std::string style, md.get_string_or("deepinfer.rope_style", ""));
  c.rope_style = style == "half" || c.architecture == "qwen2" ? RopeStyle::kHalf : RopeStyle::kInterleaved;
  DI_ASSIGN_OR_RETURN(uint64_t window, md.get_uint_or(p + "attention.sliding_window", 0));
  c.sliding_window = static_cast<int64_t>(window);
  c.attn_bias = source->find("blk.0.attn_q.bias") != nullptr;
  return create_decoder_model(std::move(source), std::move(c), DecoderSpec{}, backend);
}

}  // namespace deepinfer
