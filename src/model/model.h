// A loaded model: hyperparameters, weights bound on a backend, its KV groups and the forward
// pass of its architecture.
//
// Model is immutable after load and may be shared by several BatchRunners (one per thread that
// runs passes) and InferenceContexts. It reaches its device only through backend/backend.h: the
// backend it was loaded on holds its weights and its KV memory, and every op of its forward pass
// is enqueued on a backend queue. The backend must outlive the model.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/kv_group_spec.h"
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
  // Mistral: every layer attends to the last `sliding_window` positions, its KV in the full group
  // (interleaved local layers such as Gemma 3's have a group of their own: Model::kv_groups).
  int64_t sliding_window = 0;
};

class InferenceContext;
class BatchRunner;
class DraftHeadRunner;
class BlockDraftRunner;

class Model {
 public:
  virtual ~Model() = default;

  // Opens `path` (GGUF file or Hugging Face directory), reads the hyperparameters, checks every
  // tensor's presence, type and shape, checks that `backend` has every op the forward pass
  // enqueues, and binds the weights on it in their stored format. `backend` must outlive the
  // model.
  static Result<std::unique_ptr<Model>> load(const std::string& path, backend::Backend& backend,
                                             const LoadOptions& options = {});

  virtual const ModelConfig& config() const = 0;
  virtual const TensorSource& source() const = 0;
  virtual backend::Backend& backend() const = 0;

  // The KV groups the forward pass reads and writes, in the order BatchSequence::block_tables
  // follows: name, kind, layers, row shape and window. Element type, block size and pool sizes
  // are left for whoever sizes the cache (new_kv_cache).
  virtual std::vector<KvGroupSpec> kv_groups() const = 0;

  // How many tokens before a pass's first position each sequence must pass along
  // (BatchSequence::lookback): DeepSeek V4.1's Engram hashes n-grams ending at each position.
  virtual int64_t lookback_tokens() const { return 0; }

  // Scratch and code for forward passes over flattened batches of many sequences. One per
  // thread that runs the model; the model itself stays shared and immutable.
  virtual std::unique_ptr<BatchRunner> new_batch_runner() const = 0;

  // KV memory for this model's groups on its backend, every group with `block_size` tokens per
  // block in `dtype` (f32 or f16), n_blocks[g] blocks in group g (one value: every group).
  Result<std::unique_ptr<backend::KvCache>> new_kv_cache(int64_t block_size, DType dtype,
                                                          std::span<const int64_t> n_blocks) const;
  Result<std::unique_ptr<backend::KvCache>> new_kv_cache(int64_t block_size, DType dtype, int64_t n_blocks) const {
    return new_kv_cache(block_size, dtype, std::span<const int64_t>(&n_blocks, 1));
  }

  // Draft layers the checkpoint carries for speculative decoding (DeepSeek V4's MTP layer), their
  // KV groups in DraftHeadRunner's order; empty: the model has none (or none loaded).
  virtual std::vector<KvGroupSpec> draft_kv_groups() const { return {}; }
  // A runner of the draft layers that reads the hidden states of `target`'s passes; `target`
  // must be a runner of this model and outlive it. Null when draft_kv_groups() is empty.
  virtual std::unique_ptr<DraftHeadRunner> new_draft_head_runner(const BatchRunner& target) const {
    (void)target;
    return nullptr;
  }
  // DeepSeek V4.1's DSpark: a runner of the draft layers that drafts a block of tokens per pass
  // from the features of `target`'s passes (same contract on `target`). Null without them.
  virtual std::unique_ptr<BlockDraftRunner> new_block_draft_runner(const BatchRunner& target) const {
    (void)target;
    return nullptr;
  }
  // KV memory for the draft layers' groups, as new_kv_cache sizes the model's own.
  Result<std::unique_ptr<backend::KvCache>> new_draft_kv_cache(int64_t block_size, DType dtype,
                                                                std::span<const int64_t> n_blocks) const;

  // A context for one sequence of at most n_ctx tokens (a batch of one over its own cache).
  // kv_dtype: f32 (exact; what the golden tests compare) or f16 (what the CLI and the engine use by
  // default).
  Result<std::unique_ptr<InferenceContext>> new_context(int64_t n_ctx, DType kv_dtype = DType::kF32) const;
};

// The model's identity for KV that outlives a process: SHA-256 (hex) over the metadata that
// shapes the computation (every key but tokenizer.* and the general.* descriptions) and every
// tensor's name, type, shape and data bytes. Equal fingerprints mean equal weights wherever the
// file lives; the path plays no part. Reads every tensor once (hashed in parallel on `pool`).
std::string model_fingerprint(const TensorSource& source, ThreadPool& pool);

// Which of a sequence's rows a pass keeps: none, the last token's logits, every token's, or the
// last token's greedy choice alone (kLastArgmax: its row counts as kLast's, and a runner may keep
// only BatchRunner::greedy_token for it where every row of the pass asks the same).
enum class LogitsMode { kNone, kLast, kAll, kLastArgmax };

// One sequence's part of a flattened batch: its next n_tokens tokens (consecutive in the
// batch's token list) at positions first_position.., with the block tables that cover them.
struct BatchSequence {
  int64_t n_tokens = 0;
  int64_t first_position = 0;  // == tokens of this sequence already in the cache
  LogitsMode logits = LogitsMode::kLast;
  // Per KV group (Model::kv_groups() order): logical block (position / block size) -> pool
  // block. Sliding-window groups' entries below the window are -1 and never read.
  std::array<std::span<const int32_t>, backend::kMaxKvGroups> block_tables{};
  // SWA bounded replay: sliding-window groups see no KV below replay_start, and prefix-cached
  // groups do not write positions below n_shared (rows other sequences may share).
  int64_t replay_start = 0;
  int64_t n_shared = 0;
  // The sequence's tokens just before first_position: min(Model::lookback_tokens(),
  // first_position) of them (models that hash n-grams of token ids read them).
  std::span<const int32_t> lookback;
};

class BatchRunner {
 public:
  virtual ~BatchRunner() = default;

  // One forward pass over all sequences' tokens (mixed prefill chunks and decodes), enqueued on
  // the runner's backend queue and waited for: writes their K/V into `kv` and keeps logits rows
  // as each sequence's mode asks, in sequence order. A token's results do not depend on the
  // rest of the batch. INVALID_ARGUMENT for token ids outside the vocabulary, block tables too
  // short or naming blocks past the cache, and token counts that do not add up; a backend
  // failure (out of memory, a failed kernel) comes back as its Status, and the step's KV and
  // logits are then unspecified.
  virtual Status run(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences,
                     backend::KvCache& kv) = 0;

  virtual std::span<const float> logits(int64_t row) const = 0;  // [n_vocab], host memory
  virtual int64_t n_logit_rows() const = 0;
  // The row's greedy choice (the first id of its largest logit, as Sampler::argmax) where the
  // pass kept only that: every output row asked kLastArgmax and the runner can choose without
  // the logits. -1 otherwise, and then logits(row) holds the row.
  virtual int32_t greedy_token(int64_t /*row*/) const { return -1; }
};

// The draft layers' forward pass (Model::new_draft_head_runner). A row at position p reads the
// token after p and a hidden state at p, and predicts the token after that one: the hidden
// state is the target model's at p (a row of the target runner's last pass) or, to chain
// drafts, this runner's own output at p - 1 (a row of its last pass). A sequence's rows are
// consecutive positions from first_position, as in BatchRunner::run; its KV is the draft
// layers' own (Model::new_draft_kv_cache).
class DraftHeadRunner {
 public:
  enum class HiddenFrom { kTarget, kSelf };

  virtual ~DraftHeadRunner() = default;

  // tokens[i] and hidden_rows[i] are row i's token and the row of `from`'s last pass whose
  // hidden state it reads. INVALID_ARGUMENT for rows past that pass, and as BatchRunner::run.
  virtual Status run(std::span<const int32_t> tokens, std::span<const int32_t> hidden_rows, HiddenFrom from,
                     std::span<const BatchSequence> sequences, backend::KvCache& kv) = 0;

  virtual std::span<const float> logits(int64_t row) const = 0;  // [n_vocab], host memory
  virtual int64_t n_logit_rows() const = 0;
};

// Draft layers that draft a whole block of tokens in one pass (DeepSeek V4.1's DSpark): from the
// target's features of the context they observed and the block's anchor token (the last token
// the target produced, not yet in its cache), block_size() tokens for the positions after it,
// with a confidence logit each (an uncalibrated estimate that the target accepts the token).
// Their KV is the draft layers' own (Model::new_draft_kv_cache).
class BlockDraftRunner {
 public:
  virtual ~BlockDraftRunner() = default;

  virtual int64_t block_size() const = 0;

  // The context rows of the target's last pass: rows[i] is the pass row whose features go to
  // the draft layers' KV at its position (sequences: their n_tokens consecutive positions from
  // first_position over rows, with the draft cache's block tables). Run after every target
  // pass, for the rows it keeps (every prompt and verified token).
  virtual Status observe(std::span<const int32_t> rows, std::span<const BatchSequence> sequences,
                         backend::KvCache& kv) = 0;

  // One block per sequence: anchors[i] at sequences[i].first_position (n_tokens ==
  // block_size()), every position below it observed. Greedy: each slot's token is the best
  // of its logits plus the Markov bias of the slot before's token (the anchor for slot 0).
  virtual Status draft(std::span<const int32_t> anchors, std::span<const BatchSequence> sequences,
                       backend::KvCache& kv) = 0;

  // Of the last draft(), sequence i: its tokens, their confidence logits ([block_size()] each),
  // and slot j's logits (bias included; [n_vocab], host memory).
  virtual std::span<const int32_t> drafts(int64_t i) const = 0;
  virtual std::span<const float> confidence(int64_t i) const = 0;
  virtual std::span<const float> logits(int64_t i, int64_t slot) const = 0;
};

class InferenceContext {
 public:
  virtual ~InferenceContext() = default;

  // Appends `tokens` at position n_past() and runs the forward pass. kLast keeps the logits of
  // the last token only, kAll of every token of this call. OUT_OF_RANGE past the context,
  // INVALID_ARGUMENT for a token id outside the vocabulary.
  virtual Status eval(std::span<const int32_t> tokens, LogitsMode mode) = 0;

  // Logits of row i of the last eval ([n_vocab]); i indexes that call's kept rows.
  virtual std::span<const float> logits(int64_t i) const = 0;
  virtual int64_t n_logit_rows() const = 0;

  virtual int64_t n_past() const = 0;
  virtual int64_t n_ctx() const = 0;
  // Forgets the sequence (the KV cache is reused from position 0).
  virtual void reset() = 0;
};

}  // namespace deepinfer
