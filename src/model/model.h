// A loaded model: hyperparameters, bound weights and the forward pass of its architecture.
//
// Model is immutable after load and may be shared by several InferenceContexts. An
// InferenceContext holds one sequence's KV cache and scratch buffers; it is used by one thread
// at a time (its forward pass fans out over the ThreadPool it is given).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "deepinfer/status.h"
#include "model/loader/tensor_source.h"

namespace deepinfer {

enum class RopeStyle {
  kInterleaved,  // rotate pairs (x[2i], x[2i+1]): GGUF "llama" weights (Q/K rows permuted)
  kHalf,         // rotate (x[i], x[i + d/2]): Hugging Face checkpoints, GGUF qwen2/gemma
};

struct RopeScaling {
  enum class Kind { kNone, kLlama3, kLinear } kind = Kind::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_context = 8192;
};

struct ModelConfig {
  std::string architecture;  // "llama", "qwen2"
  std::string name;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;        // hidden size
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;      // per-head size of Q and K (and V)
  int64_t n_ff = 0;          // MLP intermediate size
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  int64_t n_rot = 0;         // rotated channels per head (head_dim unless partial)
  RopeStyle rope_style = RopeStyle::kHalf;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;
  bool attn_bias = false;    // Q/K/V projections carry a bias (Qwen2)
  int64_t sliding_window = 0;  // Mistral: every layer attends to the last `sliding_window` positions
};

class InferenceContext;

class Model {
 public:
  virtual ~Model() = default;

  // Opens `path` (GGUF file or Hugging Face directory), reads the hyperparameters, checks every
  // tensor's presence, type and shape, and binds the weights in their stored format.
  static Result<std::unique_ptr<Model>> load(const std::string& path);

  virtual const ModelConfig& config() const = 0;
  virtual const TensorSource& source() const = 0;

  // A context for one sequence of at most n_ctx tokens.
  virtual Result<std::unique_ptr<InferenceContext>> new_context(int64_t n_ctx) const = 0;
};

enum class LogitsMode { kLast, kAll };

class InferenceContext {
 public:
  virtual ~InferenceContext() = default;

  // Appends `tokens` at position n_past() and runs the forward pass. kLast keeps the logits of
  // the last token only, kAll of every token of this call. OUT_OF_RANGE past the context,
  // INVALID_ARGUMENT for a token id outside the vocabulary.
  virtual Status eval(std::span<const int32_t> tokens, LogitsMode mode, ThreadPool& pool) = 0;

  // Logits of row i of the last eval ([n_vocab]); i indexes that call's kept rows.
  virtual std::span<const float> logits(int64_t i) const = 0;
  virtual int64_t n_logit_rows() const = 0;

  virtual int64_t n_past() const = 0;
  virtual int64_t n_ctx() const = 0;
  // Forgets the sequence (the KV cache is reused from position 0).
  virtual void reset() = 0;
};

}  // namespace deepinfer
