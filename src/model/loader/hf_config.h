// Hugging Face config.json and tensor names, translated into deepinfer's GGUF vocabulary.
//
// A model directory's config.json becomes Metadata with the keys a GGUF converted from the same
// checkpoint would carry ("llama.embedding_length", "general.architecture", ...), plus a few
// "deepinfer." keys that GGUF has no word for. Architecture code then reads one vocabulary
// whatever the file format. Pure functions; no state.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "deepinfer/status.h"
#include "model/loader/metadata.h"

namespace deepinfer {

// Supported "architectures": LlamaForCausalLM and MistralForCausalLM (both become "llama"),
// Qwen2ForCausalLM ("qwen2"), Gemma3ForCausalLM ("gemma3"), Qwen3ForCausalLM ("qwen3"),
// Qwen3MoeForCausalLM ("qwen3moe"), DeepseekV4ForCausalLM ("deepseek_v4": its own keys,
// deepseek_v4.*, and its tensors keep their Hugging Face names). Keys written besides the <arch>.* hyperparameters (with
// llama.cpp's names where it has one: gemma3.rope.freq_base_swa,
// gemma3.attention.sliding_window_pattern (bool per layer, true = sliding),
// gemma3.final_logit_softcapping, qwen3moe.expert_count / expert_used_count /
// expert_feed_forward_length / expert_weights_norm):
//   deepinfer.query_pre_attn_scalar (f32)  Gemma 3: q·k is scaled by its inverse square root.
//   deepinfer.rope_style = "half"          Hugging Face rotates halves of each head; GGUF llama
//                                           files (no such key) pair neighbours instead.
//   deepinfer.tied_embeddings (bool)        tie_word_embeddings with the class's default.
//   deepinfer.source_format = "safetensors"
//   deepinfer.eos_token_ids (uint32 array)  when eos_token_id is a list (the first one is also
//                                           tokenizer.ggml.eos_token_id).
// Errors name `path`: INVALID_ARGUMENT for text that is not a JSON object or a field of the
// wrong type or value, NOT_FOUND for a missing required field, UNIMPLEMENTED for an
// architecture or rope scaling type deepinfer does not run.
Result<Metadata> parse_hf_config(std::string_view json_text, const std::string& path);

// Reads and parses the file at `path` (NOT_FOUND when it does not exist).
Result<Metadata> read_hf_config(const std::string& path);

// "model.layers.3.self_attn.q_proj.weight" -> "blk.3.attn_q.weight". Names outside the known
// vocabulary are returned unchanged; nullopt for buffers that are not weights (rotary
// inv_freq), which the loader drops. `architecture` (general.architecture) selects the few
// names whose meaning differs by model: Gemma 3's post_attention_layernorm is a sandwich norm
// (post_attention_norm), not the FFN's input norm. MoE experts become
// blk.N.ffn_{gate,up,down}_exps.E.weight, one matrix per expert as stored.
// Integer tensors a model reads as data, not weights (DeepSeek V4's hash-routing table
// layers.N.ffn.gate.tid2eid, I32 or I64); every other integer tensor is refused.
bool hf_integer_tensor_allowed(std::string_view hf_name, std::string_view architecture);

std::optional<std::string> hf_to_gguf_tensor_name(std::string_view hf_name, std::string_view architecture = {});

}  // namespace deepinfer
