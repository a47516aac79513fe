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

#include "backend/cpu/attention.h"
#include "core/dtype.h"
#include "core/page_buffer.h"
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
  // Interleaved local layers (Gemma 3): [n_layer], true where a layer attends to the last
  // `layer_window` positions (its query included); empty when there are none. Their KV lives in
  // a separate, bounded cache group (PagedKvCache, src/kv). Mistral's all-layer window above
  // keeps the plain full-cache layout instead.
  std::vector<bool> layer_sliding;
  int64_t layer_window = 0;

  bool has_sliding_layers() const { return layer_window > 0 && !layer_sliding.empty(); }
};

class InferenceContext;
class BatchRunner;

class Model {
 public:
  virtual ~Model() = default;

  // Opens `path` (GGUF file or Hugging Face directory), reads the hyperparameters, checks every
  // tensor's presence, type and shape, and binds the weights in their stored format.
  static Result<std::unique_ptr<Model>> load(const std::string& path);

  virtual const ModelConfig& config() const = 0;
  virtual const TensorSource& source() const = 0;

  // Scratch and code for forward passes over flattened batches of many sequences. One per
  // thread that runs the model; the model itself stays shared and immutable.
  virtual std::unique_ptr<BatchRunner> new_batch_runner() const = 0;

  // A context for one sequence of at most n_ctx tokens (a batch of one over its own cache).
  // kv_dtype: f32 (exact; what the golden tests compare) or f16 (what the CLI and the engine use by
  // default).
  Result<std::unique_ptr<InferenceContext>> new_context(int64_t n_ctx, DType kv_dtype = DType::kF32) const;
};

enum class LogitsMode { kNone, kLast, kAll };

// Paged KV memory of a whole model, in float32 or float16 (dtype()), one pool per KV group:
// full-attention layers index the full pool (n_blocks), sliding-window layers
// (ModelConfig::layer_sliding) the sliding pool (n_sliding_blocks). For layer l, k_data(l) and
// v_data(l) are pools of n_blocks(l) blocks in cpu::KvLayout (layout()): per block and KV head, a
// K panel [head_dim][block_size] and a V panel [block_size][head_dim]. Position p of a sequence
// is slot table[p / block_size] * block_size + p % block_size, with the sequence's table for
// that layer's group. Which blocks belong to which sequence is the KV cache manager's business
// (src/kv), not this storage's. float16 halves the memory and the bytes a decode step reads
// (llama.cpp's default cache type); float32 keeps the model's activations exactly.
class PagedKvCache {
 public:
  // Both pools n_blocks: sliding layers may then share the full table (BatchSequence without a
  // sliding table), as a single sequence with an identity table does.
  PagedKvCache(const ModelConfig& config, int64_t n_blocks, int64_t block_size, DType dtype = DType::kF32)
      : PagedKvCache(config, n_blocks, n_blocks, block_size, dtype) {}
  PagedKvCache(const ModelConfig& config, int64_t n_blocks, int64_t n_sliding_blocks, int64_t block_size,
               DType dtype = DType::kF32);

  DType dtype() const { return dtype_; }
  size_t element_bytes() const { return dtype_ == DType::kF16 ? 2 : 4; }
  void* k_data(int64_t layer) { return k_.data() + offset(layer) * element_bytes(); }
  void* v_data(int64_t layer) { return v_.data() + offset(layer) * element_bytes(); }
  // Stores one position's K and V (kv_dim floats each, head after head) into slot `row` of
  // layer `layer`, converted to dtype().
  void store(int64_t layer, int64_t row, const float* k, const float* v);
  const cpu::KvLayout& layout() const { return layout_; }
  bool sliding(int64_t layer) const { return !layer_sliding_.empty() && layer_sliding_[static_cast<size_t>(layer)]; }
  int64_t n_blocks() const { return n_blocks_; }                  // full pool
  int64_t n_sliding_blocks() const { return n_sliding_blocks_; }  // sliding pool
  int64_t n_blocks(int64_t layer) const { return sliding(layer) ? n_sliding_blocks_ : n_blocks_; }
  int64_t block_size() const { return layout_.block_size; }
  int64_t kv_dim() const { return layout_.n_head_kv * layout_.head_dim; }
  size_t bytes() const { return k_.size() + v_.size(); }
  // Bytes a layer's K (or V) pool takes: the span k_data(layer) points to.
  size_t layer_bytes(int64_t layer) const {
    return static_cast<size_t>(n_blocks(layer) * layout_.block_elems()) * element_bytes();
  }

 private:
  int64_t offset(int64_t layer) const { return layer_offset_[static_cast<size_t>(layer)]; }

  int64_t n_blocks_, n_sliding_blocks_;
  cpu::KvLayout layout_;
  DType dtype_;
  std::vector<bool> layer_sliding_;
  std::vector<int64_t> layer_offset_;  // [n_layer] first element of the layer's K (and V)
  PageBuffer k_, v_;  // zero-filled (huge pages where the system has them)
};

// One sequence's part of a flattened batch: its next n_tokens tokens (consecutive in the
// batch's token list) at positions first_position.., with the block tables that cover them.
struct BatchSequence {
  int64_t n_tokens = 0;
  int64_t first_position = 0;  // == tokens of this sequence already in the cache
  std::span<const int32_t> block_table;  // full-attention group
  LogitsMode logits = LogitsMode::kLast;
  // Sliding-window group (models with ModelConfig::layer_sliding): entries below the window are
  // -1 and never read. Empty: sliding layers use block_table (a cache with equal pools).
  std::span<const int32_t> sliding_block_table;
  // SWA bounded replay: sliding layers see no KV below replay_start, and full-attention layers
  // do not write positions below n_shared (prefix-cached rows other sequences may share).
  int64_t replay_start = 0;
  int64_t n_shared = 0;
};

class BatchRunner {
 public:
  virtual ~BatchRunner() = default;

  // One forward pass over all sequences' tokens (mixed prefill chunks and decodes): writes
  // their K/V into `kv` and keeps logits rows as each sequence's mode asks, in sequence order.
  // A token's results do not depend on the rest of the batch. INVALID_ARGUMENT for token ids
  // outside the vocabulary, block tables too short or naming blocks past the cache, and token
  // counts that do not add up.
  virtual Status run(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences, PagedKvCache& kv,
                     ThreadPool& pool) = 0;

  virtual std::span<const float> logits(int64_t row) const = 0;  // [n_vocab]
  virtual int64_t n_logit_rows() const = 0;
};

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
