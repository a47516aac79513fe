// DeepSeek V4 GGUF files in antirez/ds4's layout (general.architecture "deepseek4"), read into the
// metadata keys and tensor names the safetensors path gives (deepseek_v4.*, the release's tensor
// names: layers.N.attn.wq_a.weight, ...), so that model/arch/deepseek_v4.cpp reads both.
//
// No document specifies the layout: it is what ds4's loader checks (ds4.c config_validate_model,
// weights_validate_layout) and its quantizer writes (gguf-tools/deepseek4-quantize.c):
//   keys     deepseek4.* (llama.cpp-style: block_count, attention.q_lora_rank, ...,
//            attention.compress_ratios [n_layer] with 0 / CSA / HCA rates, hash_layer_count,
//            swiglu_clamp_exp [n_layer], hyper_connection.{count, sinkhorn_iterations, epsilon},
//            rope.scaling.* for the compressed layers' YaRN);
//   tensors  llama.cpp-style names (blk.N.attn_q_a.weight, blk.N.hc_attn_fn.weight, ...), shapes
//            the Hugging Face ones reversed as GGUF writes them (no transposes, no permutations);
//            routed experts stacked as one [n_expert, rows, cols] tensor per projection;
//            tid2eid as I32 [n_vocab, n_used].
// A CSA layer is a compressed layer with an indexer (its ratio is the CSA rate); the other
// compressed layers are HCA. The MTP tensors (mtp.*) are not read.
#pragma once

#include <string>

#include "deepinfer/status.h"
#include "model/loader/gguf_parse.h"

namespace deepinfer {

inline constexpr const char* kDs4Architecture = "deepseek4";

// Rewrites `contents` in place (keys added, tensors renamed and experts split into per-expert
// views of the same bytes). Errors name `path` and the key or tensor.
Status adapt_ds4_gguf(GgufContents& contents, const std::string& path);

}  // namespace deepinfer
