// Private to src/model/arch: the decoder shared by Llama 2/3, SmolLM2, Mistral, Qwen2, Qwen3,
// Qwen3-MoE and Gemma 3. Their differences are fields of ModelConfig and DecoderSpec, read by
// each architecture's file; the one forward pass below enqueues backend ops (backend/backend.h).
//
// Per layer (n = RMSNorm with the layer's weight, [] = only where the spec asks for it):
//   q, k, v = Wq·n(x) [+ bq], Wk·n(x) [+ bk], Wv·n(x) [+ bv]
//   [q, k = n_head(q), n_head(k)]                        (QK-norm, per head)
//   x += [n_post](Wo · attn(rope(q), rope(k), v))        rope base, scaling and window by layer type
//   x += [n_post](ffn(n(x)))   ffn = Wd·(act(Wg·h) * Wu·h), or a top-k mixture of such experts
// Rope pairs interleaved channels (GGUF "llama" weights, whose Q/K rows are permuted for it) or
// halves (Hugging Face checkpoints, GGUF qwen2/qwen3/gemma3); the global layers' frequencies
// carry linear or llama3 scaling and a GGUF rope_freqs.weight divisor where the file has them.
// Attention windows: Mistral's window on every layer (ModelConfig::sliding_window, KV in the
// full group), or Gemma 3's interleaved local layers (DecoderSpec::layer_sliding, KV in a
// sliding-window group of their own).
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "deepinfer/status.h"
#include "model/loader/tensor_source.h"
#include "model/model.h"

namespace deepinfer {

enum class FfnActivation { kSilu, kGeluTanh };

struct DecoderSpec {
  bool qk_norm = false;         // blk.N.attn_q_norm / attn_k_norm: RMSNorm over each head, before rope
  bool sandwich_norms = false;  // blk.N.post_attention_norm / post_ffw_norm on each branch's output
  // Added to every norm weight at load. Gemma computes x̂·(1 + w); its GGUF files store 1 + w
  // (llama.cpp's converter adds the 1), Hugging Face files store w.
  float norm_weight_offset = 0.0f;
  FfnActivation activation = FfnActivation::kSilu;
  float embed_scale = 1.0f;          // Gemma: sqrt(n_embd), rounded to float32 as its activations are
  float attention_scale = 0.0f;      // multiplies q·k; 0 = 1/sqrt(head_dim)
  float final_logit_softcap = 0.0f;  // 0 = none; else logits = cap·tanh(logits / cap)
  // [n_layer] true where the layer attends only to the last `window` positions (its query
  // included), with rope base rope_theta_sliding and no rope scaling. Empty: every layer global.
  std::vector<bool> layer_sliding;
  int64_t window = 0;
  double rope_theta_sliding = 10000.0;
  // Mixture of experts on every layer when n_expert > 0 (blk.N.ffn_gate_inp router, experts
  // blk.N.ffn_{gate,up,down}_exps as one [n_expert, rows, cols] tensor each (GGUF) or one
  // matrix per expert blk.N.ffn_gate_exps.E.weight (Hugging Face)).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_expert = 0;
  bool expert_weights_norm = false;  // renormalise the top-k router probabilities to sum 1
};

// Reads what every decoder shares (<arch>.embedding_length, block_count, head counts, key
// length, rope base and its linear or llama3 scaling, eps (default_rms_eps when the file names
// none: llama.cpp's defaults differ by architecture), vocabulary from token_embd, tied head)
// into `config`, with half-rotation rope; architectures whose weights pair channels otherwise
// say so afterwards.
Status read_decoder_config(const TensorSource& source, double default_rms_eps, ModelConfig* config);

Result<std::unique_ptr<Model>> create_decoder_model(std::unique_ptr<TensorSource> source, ModelConfig config,
                                                    DecoderSpec spec, backend::Backend& backend);

}  // namespace deepinfer
