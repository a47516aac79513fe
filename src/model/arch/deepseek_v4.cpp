// DeepSeek V4 (Hugging Face DeepseekV4ForCausalLM, config model_type "deepseek_v4"), BF16/F32
// safetensors, on the backend seam. Exact to transformers' implementation (tests/golden/dsv4_*);
// the facts are in ../shared/reference/model-arch.md §1.
//
// Per token the residual is hc_mult streams of n_embd (mHC). Each layer has two sites
// (attention, then MoE), each: weights from the streams (hyper_pre: pre / post / Sinkhorn comb),
// the sublayer on the collapsed, RMS-normed input, and the streams mixed with its output
// (hyper_post). The end: the hyper head collapses the streams, RMSNorm, lm_head.
//
// Attention, every layer: q = Wqb·RMSNorm(Wqa·x) (per-head unweighted RMS rescale), one K=V
// head kv = RMSNorm(Wkv·x); rope on the trailing n_rot channels (interleaved pairs); the query
// sees its window of kv rows, and on CSA / HCA layers compressed rows, plus a learned sink per
// head; the output's rope channels are rotated back by -position, then the grouped low-rank
// output projection (o_groups blocks of Woa, then Wob). Sliding layers rope with rope_theta;
// CSA / HCA layers with compress_rope_theta and YaRN (no magnitude scaling).
//   HCA: a compressor pools each closed window of m tokens (per-channel softmax over the
//        window's gate + position bias, weighting its kv), RMSNorm, rope at the window's first
//        position; every closed window is visible.
//   CSA: the same at m = 4 with overlapping windows (each entry also pools the previous
//        window's first halves), and a lightning indexer (its own compressor at index_head_dim,
//        queries from the attention's q latent) that keeps the top index_topk entries.
// MoE, every layer: sqrt(softplus) scores, top-k of scores + correction bias (or tid2eid[token]
// on hash layers), weights normalised and scaled by routed_scaling_factor; SwiGLU experts whose
// gate is clamped above at swiglu_limit and up to ±swiglu_limit; one shared expert alike.
//
// KV (kv_groups()): a sliding ring of K=V rows over every layer; per CSA layer compressed rows
// (1 per m_csa tokens) and index keys; per HCA layer compressed rows (1 per m_hca tokens); and each
// compressor's frontier as per-token rows of (kv, gate) projections kept for the last 2m (CSA)
// or m (HCA) positions. Everything is a function of positions, so chunked prefill and decode
// compute the same rows. The compressed rows and index keys are prefix-cached in whole blocks;
// after a hit the engine replays the last window (the widest of the sliding ring and the
// compressor frontiers), rebuilding those, and the replay leaves the shared compressed rows as
// they are (compress_kv skips entries below first_write).
//
// FP8 / FP4 release weights arrive here as BF16: the safetensors loader multiplies them out
// (model/loader/block_scaled.h). GGUF files in antirez/ds4's layout arrive under the same names
// and keys (model/loader/ds4_gguf.h).
//
// MTP (num_nextn_predict_layers, the release's mtp.0.*): one more V4 block, sliding-window
// attention on a KV cache of its own (draft_kv_groups), run as a DraftHeadRunner. A row at
// position p takes the main model's streams at p (before the hyper head) and the token at p + 1:
// x = h_proj(hnorm(streams)) per stream + e_proj(enorm(embed(token))) (zero at p = 0), the block,
// its own hyper head and norm, the main lm_head; its output streams are the next chained row's
// input. As vLLM's DeepSeekV4MultiTokenPredictorLayer (tests/golden/dsv4_mtp). Only the first
// MTP layer is bound: V4 ships one.
//
// V4.1 (config model_type "deepseek_v41", NeMo Automodel's DeepseekV41ForCausalLM is the
// reference: tests/golden/dsv41_tiny), the same blocks with these differences:
//   - single-pass mHC: each site's weights come from its input streams, but its sublayer reads
//     the streams collapsed with the previous site's pre weights (the first site: stream 0), and
//     the end collapses with the last site's; no hyper head;
//   - no per-head rescale of q; the window rows go through FP8 (e4m3, blocks of 32);
//   - CSA2: only KV source layers own a compressor (ratio 2: softmax-gated pairs; ratio 1: a
//     projection; no position bias, no overlap); its entries' latents give the compressed rows
//     (rope at the entry's first position, NVFP4 blocks of 16) and the index keys (RMSNorm(Wk
//     latent), rope, MXFP4 blocks of 32), which the following layers of its ratio read. Index
//     source layers select their own top-k (MXFP4 queries); the others reuse the last selection.
//     The candidate source keeps the best blocks of entries for the index sources after it;
//   - Engram (engram_layer_ids), before the attention site: each token's n-grams (2..4) of
//     token classes (the tokenizer's, LoadOptions::token_classes), hashed per order and head
//     (multipliers from NumPy's default_rng, primes above the bucket count) into table rows,
//     projected to a key per stream and a value; each stream adds the value under a gate of its
//     agreement with its key. The n-grams reach back into earlier passes (BatchSequence::lookback);
//   - the KV: a window ring over every layer, and per ratio the sources' compressed rows, index
//     keys and (ratio > 1) pending tokens (kv_groups).
//   - DSpark (num_nextn_predict_layers, mtp.0..2; with LoadOptions::draft_layers): window-only
//     V4.1 blocks over a block of [anchor, noise...] whose attention also reads their own window of
//     the target's features (the streams entering dspark_target_layer_ids' attention, averaged,
//     through main_proj and main_norm), the last one's output through the lm_head plus a Markov
//     bias of the previous slot's token, and a confidence head (BlockDraftRunner, V4DsparkRunner;
//     as NeMo Automodel's DeepseekV41DSparkModel, tests/golden/dsv41_tiny).
// Not yet: V4's official QAT round trips (transformers omits them too).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>

#include "core/check.h"
#include "core/numpy_random.h"
#include "model/arch/registry.h"
#include "model/step_inputs.h"

namespace deepinfer {

namespace {

using backend::Matrix;
using backend::Tensor;

// kCsa2: a V4.1 compressed layer (its ratio, KV source and index role in Layer).
enum class LayerKind { kSliding = 0, kCsa = 1, kHca = 2, kCsa2 = 3 };

struct V4Params {
  int64_t q_lora = 0, o_groups = 0, o_lora = 0, window = 0;
  int64_t rate_csa = 4, rate_hca = 128;
  int64_t hc = 4, sinkhorn = 20;
  float hc_eps = 1e-6f;
  int64_t n_expert = 0, n_used = 0, n_ff = 0;
  float routed_scale = 1.5f, swiglu_limit = 10.0f;
  int64_t index_heads = 0, index_dim = 0, index_topk = 0;
  double compress_theta = 160000.0;
  bool yarn = false;
  double yarn_factor = 1, yarn_beta_fast = 32, yarn_beta_slow = 1;
  int64_t yarn_original = 65536;
  std::vector<LayerKind> kinds;
  std::vector<bool> hash;
  int64_t n_mtp = 0;  // num_nextn_predict_layers
  // V4.1 (single-pass mHC, no hyper head, CSA2 layers, the cache formats' round trips).
  bool v41 = false;
  std::vector<int64_t> ratio;                           // per layer; 0: window only
  std::vector<int64_t> kv_sources, index_sources;
  int64_t candidate_source = -1, candidate_block = 0, candidate_top_blocks = 0;
  // V4.1's Engram (layers listed in engram_layers): n-grams of up to engram_max_ngram token
  // classes hashed into engram_heads buckets per order.
  std::vector<int64_t> engram_layers, engram_table_rows;
  int64_t engram_max_ngram = 0, engram_buckets = 0, engram_heads = 0, engram_head_dim = 0, engram_classes = 0;
  int64_t engram_pad_token = 0;
  // V4.1's DSpark draft layers (mtp.0 .. mtp.{dspark_layers - 1}).
  int64_t dspark_layers = 0, dspark_block = 0, dspark_noise = 0, dspark_rank = 0;
  int64_t dspark_experts = 0, dspark_used = 0;
  std::vector<int64_t> dspark_targets;  // target layers whose streams (mean over them) feed it
};

// One Engram layer's hashing: per n-gram order n (2..max) and head h, the prime its hash is
// taken modulo and the table row where its buckets start; per shift, the multiplier.
struct EngramHash {
  std::vector<int64_t> primes, offsets;  // [(max_ngram - 1) * heads]
  std::vector<int64_t> multipliers;      // [max_ngram]
};

struct HyperWeights {
  Matrix fn;          // [(2 + hc) * hc, hc * n_embd] (head: [hc, hc * n_embd])
  Tensor base, scale;
};

struct Compressor {
  Matrix kv, gate;    // [width, n_embd]
  Tensor ape;         // [rate, width]
  Tensor norm;        // [head_dim]
};

struct Layer {
  LayerKind kind = LayerKind::kSliding;
  bool hash = false;
  int64_t n_expert = 0, n_used = 0;  // routed experts and how many a token uses
  HyperWeights attn_hc, ffn_hc;
  Tensor attn_norm, ffn_norm;
  Matrix q_a, q_b, kv, o_b;
  std::vector<Matrix> o_a;  // [o_groups] of [o_lora, n_head * head_dim / o_groups]
  Tensor q_a_norm, kv_norm, sinks;
  Compressor comp, index_comp;  // index_comp: CSA only
  Matrix index_q_b, index_w;    // CSA, and V4.1 index sources
  // V4.1: the compress ratio, the layer whose compressed rows and index keys this one reads
  // (itself when it owns the compressor), whether it selects its own entries, and its part in
  // the hierarchical candidates. Owners project index keys from the compressor's latent.
  int64_t ratio = 0;
  int32_t kv_owner = -1;
  bool index_source = false;
  backend::CandidateUse candidates = backend::CandidateUse::kNone;
  Matrix index_wk;              // [index_dim, head_dim]
  Tensor index_k_norm;          // [index_dim]
  // V4.1 Engram layers (engram >= 0: its index among them).
  int engram = -1;
  Matrix engram_table;          // [table rows, engram_head_dim]
  Matrix engram_wkv;            // [(hc + 1) * n_embd, hash heads * engram_head_dim]
  Tensor engram_weight;         // [1, hc * n_embd]: q_weight * k_weight
  Matrix router;
  Tensor router_bias;           // non-hash layers
  std::vector<int32_t> tid2eid; // hash layers: [n_vocab * n_used], host
  std::vector<Matrix> gate, up, down;
  Matrix shared_gate, shared_up, shared_down;
};

// The MTP layer: its block and what surrounds it.
struct Mtp {
  Layer block;
  Tensor enorm, hnorm, norm;
  Matrix e_proj, h_proj;
  HyperWeights head_hc;
};

// V4.1: the groups of one compress ratio's owner layers: compressed rows, index keys and (ratio
// > 1) the compressor's pending tokens.
struct Csa2Groups {
  int64_t ratio = 0;
  int kv = -1, index = -1, state = -1;
};

// V4.1's DSpark draft layers: stages on the target's features of the context (stage 0
// projects them: main_proj, main_norm) and a block of an anchor token and noise tokens; the
// last stage's norm, the target's lm_head plus a Markov bias of each slot's previous token,
// and a confidence head.
struct Dspark {
  std::vector<Layer> stages;
  Matrix main_proj;            // [n_embd, targets * n_embd]
  Tensor main_norm, norm;
  Matrix markov_embed, markov_head;  // [n_vocab, rank] each
  std::vector<float> confidence;     // [n_embd + rank], host
};

// KV group indices; -1 where the model has no layer of that kind.
struct Groups {
  int window = -1, csa_kv = -1, csa_index = -1, hca_kv = -1, csa_state = -1, csa_index_state = -1, hca_state = -1;
  std::vector<Csa2Groups> csa2;
  int count = 0;
  const Csa2Groups& of_ratio(int64_t ratio) const {
    const auto it = std::ranges::find(csa2, ratio, &Csa2Groups::ratio);
    DI_ICHECK(it != csa2.end());
    return *it;
  }
};

class V4Model;

class V4Runner final : public BatchRunner {
 public:
  explicit V4Runner(const V4Model& m);
  Status run(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences, backend::KvCache& kv) override;
  std::span<const float> logits(int64_t row) const override;
  int64_t n_logit_rows() const override { return n_logit_rows_; }

  // The MTP layer's pass (V4MtpRunner): hidden states from `source`'s last pass (this runner's
  // own for chained rows).
  Status run_mtp(std::span<const int32_t> tokens, std::span<const int32_t> hidden_rows, const V4Runner& source,
                 std::span<const BatchSequence> sequences, backend::KvCache& kv);

 private:
  Tensor f32(int slot, int64_t rows, int64_t cols) { return buffers_[slot].tensor(DType::kF32, rows, cols); }
  Tensor i32(int slot, int64_t rows, int64_t cols) { return buffers_[slot].tensor(DType::kI32, rows, cols); }
  Status ensure(int slot, int64_t elems);
  void hyper_site(const HyperWeights& w, int64_t n);
  void attention(const Layer& L, int32_t layer, int64_t n, backend::KvCache& kv);
  void attention_v41(const Layer& L, int32_t layer, int64_t n, backend::KvCache& kv);
  void csa2_owner_rows(const Layer& L, int32_t layer, int64_t n, backend::KvCache& kv);
  void project_q_kv(const Layer& L, int64_t n, const Tensor& freq);
  void single_pass_site(const HyperWeights& w, const Tensor& norm, int64_t n);
  void mix_back(int64_t n);
  Status engram_ids(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences);

 public:
  // DSpark (V4DsparkRunner): the draft layers' context rows from `source`'s last pass rows, and
  // one draft block per sequence.
  Status run_dspark_observe(std::span<const int32_t> rows, const V4Runner& source,
                            std::span<const BatchSequence> sequences, backend::KvCache& kv);
  Status run_dspark_block(std::span<const int32_t> anchors, std::span<const BatchSequence> sequences,
                          backend::KvCache& kv);
  std::span<const int32_t> dspark_drafts() const { return dspark_drafts_; }
  std::span<const float> dspark_confidence() const { return dspark_confidence_; }

 private:
  void dspark_stage(const Layer& L, int32_t stage, int64_t n, std::span<const int32_t> tokens, backend::KvCache& kv);
  void record_tap(int32_t layer, int64_t n);
  void engram(const Layer& L, int64_t n);
  void output_projection(const Layer& L, int64_t n);
  void moe(const Layer& L, int32_t layer, int64_t n, std::span<const int32_t> tokens);
  Status prepare(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences, backend::KvCache& kv,
                 int n_groups);
  void block(const Layer& L, int32_t layer, int64_t n, std::span<const int32_t> tokens, backend::KvCache& kv);
  void block_single_pass(const Layer& L, int32_t layer, int64_t n, std::span<const int32_t> tokens,
                         backend::KvCache& kv);
  void head(const HyperWeights& hc, const Tensor& norm, int64_t n_rows);
  void head_single_pass(int64_t n_rows);
  Status finish();

  const V4Model& m_;
  std::unique_ptr<backend::Queue> q_;
  StepInputs inputs_;
  std::vector<backend::DeviceBuffer> buffers_;
  std::vector<int32_t> host_bcast_, host_go_;
  std::vector<std::vector<int32_t>> host_fixed_;  // per layer
  std::vector<float> host_ones_;
  std::vector<int32_t> host_rows_;
  std::vector<float> host_mask_;
  std::vector<float> host_pre0_;  // V4.1: the first site's input weights (stream 0)
  std::vector<std::vector<int32_t>> host_engram_;  // per Engram layer: [n, hash heads] table rows
  std::vector<float> host_mean_w_;                 // 1 / hc per stream: the DSpark features' mean
  std::vector<int32_t> host_tap_order_;            // the features' rows from layer-major to token-major
  int64_t n_taps_ = 0;                              // rows of kTapsCat the last pass left
  std::vector<int32_t> host_prev_;                  // DSpark: each block's previous tokens
  std::vector<float> dspark_hidden_;                // DSpark: the normed outputs [blocks * block, n_embd]
  std::vector<int32_t> dspark_drafts_;              // [blocks * block]
  std::vector<float> dspark_confidence_;            // [blocks * block]
  std::vector<float> host_markov_bias_, host_markov_e_;  // DSpark: a slot's Markov bias and embeddings
  std::vector<float> logits_;
  int64_t n_logit_rows_ = 0;
  int64_t n_streams_ = 0;  // rows of kX the last pass left (its tokens' output streams)
};

// Scratch slots.
enum Slot {
  kX, kX2, kFlat, kMixes, kPost, kComb, kCollapsed, kH, kOut, kQa, kQ, kKv, kAtt, kGrouped, kCkv, kCgate, kIkv,
  kIgate, kQi, kIw, kSel, kRouter, kIds, kW, kFixed, kOrder, kOffsets, kXs, kGate, kUp, kYs, kSGate, kSUp, kSOut,
  kGoOrder, kGoOffsets, kGoW, kGoXs, kGoYs, kHr, kLogits, kBcast, kMtpRows, kMtpMask,
  kPre, kPrePrev, kPreRows, kLatent, kIk, kCand, kEngIds, kEngEmb, kEngKv, kMeanW, kTaps, kTapOrder, kTapsCat,
  kPrevIds, kMarkovE, kMarkovBias, kNumSlots
};

class V4Model final : public Model {
 public:
  V4Model(std::unique_ptr<TensorSource> source, backend::Backend& backend)
      : source_(std::move(source)), backend_(backend), weights_(backend.new_weight_store()) {}

  const ModelConfig& config() const override { return c_; }
  const TensorSource& source() const override { return *source_; }
  backend::Backend& backend() const override { return backend_; }
  std::vector<KvGroupSpec> kv_groups() const override;
  std::unique_ptr<BatchRunner> new_batch_runner() const override { return std::make_unique<V4Runner>(*this); }
  std::vector<KvGroupSpec> draft_kv_groups() const override;
  std::unique_ptr<DraftHeadRunner> new_draft_head_runner(const BatchRunner& target) const override;

  Status read_config();
  Status bind();

  ModelConfig c_;
  V4Params p_;
  Groups g_;
  std::unique_ptr<TensorSource> source_;
  backend::Backend& backend_;
  std::unique_ptr<backend::WeightStore> weights_;
  Matrix embed, lm_head;
  Tensor final_norm;
  HyperWeights head_hc;
  std::vector<Layer> layers;
  std::optional<Mtp> mtp;
  std::optional<Dspark> dspark;
  Tensor inv_freq_main, inv_freq_compress;
  Tensor ones_streams, ones_head;  // unweighted RMSNorm over hc * n_embd and over head_dim
  std::vector<Tensor> zero_ape;    // V4.1: per ratio (no position bias), [ratio, head_dim]
  std::vector<EngramHash> engram_hash;   // per Engram layer
  TokenClasses token_classes;             // V4.1 with Engram: the tokenizer's classes
  int64_t lookback_tokens() const override { return p_.engram_layers.empty() ? 0 : p_.engram_max_ngram - 1; }

 private:
  Status bad_shape(const TensorView& t, std::initializer_list<int64_t> want) const;
  Result<const TensorView*> get(const std::string& name, std::initializer_list<int64_t> shape) const;
  Result<Matrix> mat(const std::string& name, int64_t n_out, int64_t n_in);
  Result<Tensor> vec(const std::string& name, std::initializer_list<int64_t> shape);
  Status bind_hyper(const std::string& prefix, const std::string& fn, const std::string& base, const std::string& scale,
                    int64_t n_mix, int64_t n_scale, HyperWeights* w);
  Status bind_compressor(const std::string& prefix, int64_t width, int64_t rate, int64_t head_dim, Compressor* c);
  Status bind_layer(const std::string& b, LayerKind kind, bool hash, Layer* L);
  Status bind_csa2(const std::string& a, int32_t layer, Layer* L);
  Status bind_engram(const std::string& b, int engram, Layer* L);
  Status bind_dspark();
 public:
  std::unique_ptr<BlockDraftRunner> new_block_draft_runner(const BatchRunner& target) const override;
 private:
  Status prepare_engram_hashes();
  Status read_v41_config(const Metadata& md, const std::string& k);
  void assign_groups();
  Status bind_mtp();
  std::string top_name(const std::string& hf, const std::string& official) const;
};

std::string dims(std::initializer_list<int64_t> shape) {
  std::string s = "[";
  for (int64_t d : shape) {
    if (s.size() > 1) s += ", ";
    s += std::to_string(d);
  }
  return s + "]";
}

Status V4Model::bad_shape(const TensorView& t, std::initializer_list<int64_t> want) const {
  return invalid_argument(source_->path() + ": tensor '" + t.name + "' has shape " + t.shape_string() + ", but DeepSeek " +
                          (p_.v41 ? "V4.1" : "V4") + " with this config.json needs " + dims(want));
}

Result<const TensorView*> V4Model::get(const std::string& name, std::initializer_list<int64_t> shape) const {
  DI_ASSIGN_OR_RETURN(const TensorView* t, source_->get(name));
  if (!std::equal(t->shape.begin(), t->shape.end(), shape.begin(), shape.end())) return bad_shape(*t, shape);
  return t;
}

Result<Matrix> V4Model::mat(const std::string& name, int64_t n_out, int64_t n_in) {
  DI_ASSIGN_OR_RETURN(const TensorView* t, get(name, {n_out, n_in}));
  auto m = weights_->add_matrix(name, t->dtype, t->data, n_out, n_in);
  if (!m.ok()) return Status(m.status().code(), source_->path() + ": " + m.status().message());
  return m;
}

Result<Tensor> V4Model::vec(const std::string& name, std::initializer_list<int64_t> shape) {
  DI_ASSIGN_OR_RETURN(const TensorView* t, get(name, shape));
  std::vector<float> v(static_cast<size_t>(t->n_elements()));
  if (!widen_to_f32(t->dtype, t->data, v.data(), t->n_elements())) {
    return unimplemented(source_->path() + ": tensor '" + name + "' has type " + std::string(dtype_name(t->dtype)) +
                         "; it must be f32, f16 or bf16");
  }
  return weights_->add_vector(v);
}

Status V4Model::bind_hyper(const std::string& prefix, const std::string& fn, const std::string& base,
                           const std::string& scale, int64_t n_mix, int64_t n_scale, HyperWeights* w) {
  DI_ASSIGN_OR_RETURN(w->fn, mat(prefix + fn, n_mix, p_.hc * c_.n_embd));
  DI_ASSIGN_OR_RETURN(w->base, vec(prefix + base, {n_mix}));
  DI_ASSIGN_OR_RETURN(w->scale, vec(prefix + scale, {n_scale}));
  return {};
}

Status V4Model::bind_compressor(const std::string& prefix, int64_t width, int64_t rate, int64_t head_dim,
                                Compressor* c) {
  DI_ASSIGN_OR_RETURN(c->kv, mat(prefix + "wkv.weight", width, c_.n_embd));
  DI_ASSIGN_OR_RETURN(c->gate, mat(prefix + "wgate.weight", width, c_.n_embd));
  DI_ASSIGN_OR_RETURN(c->ape, vec(prefix + "ape", {rate, width}));
  c->ape = c->ape.reshaped(rate, width);
  DI_ASSIGN_OR_RETURN(c->norm, vec(prefix + "norm.weight", {head_dim}));
  return {};
}

// transformers' default rope (float32 powers) and its YaRN (frequency mixing only: V4 forces
// attention_factor 1).
std::vector<float> inv_freq(double theta, int64_t dim) {
  std::vector<float> f(static_cast<size_t>(dim / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    f[i] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  return f;
}

std::vector<float> yarn_inv_freq(double theta, int64_t dim, double factor, int64_t original, double beta_fast,
                                 double beta_slow) {
  const auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) * std::log(static_cast<double>(original) / (rotations * 2 * M_PI)) /
           (2 * std::log(theta));
  };
  double low = std::max(std::floor(correction_dim(beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(beta_slow)), static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  std::vector<float> f(static_cast<size_t>(dim / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float pos_freq = std::pow(static_cast<float>(theta), exponent);
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (static_cast<float>(factor) * pos_freq);
    const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low),
                                  0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    f[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return f;
}

Status V4Model::read_config() {
  const Metadata& md = source_->metadata();
  DI_ASSIGN_OR_RETURN(c_.architecture, md.get_string("general.architecture"));
  p_.v41 = c_.architecture == "deepseek_v41";
  const std::string k = c_.architecture + ".";
  const auto u = [&](const std::string& key) -> Result<int64_t> {
    DI_ASSIGN_OR_RETURN(uint64_t v, md.get_uint(k + key));
    return static_cast<int64_t>(v);
  };
  DI_ASSIGN_OR_RETURN(c_.name, md.get_string_or("general.name", c_.architecture));
  DI_ASSIGN_OR_RETURN(c_.n_embd, u("embedding_length"));
  DI_ASSIGN_OR_RETURN(c_.n_layer, u("block_count"));
  DI_ASSIGN_OR_RETURN(c_.n_head, u("attention.head_count"));
  DI_ASSIGN_OR_RETURN(c_.n_head_kv, u("attention.head_count_kv"));
  DI_ASSIGN_OR_RETURN(c_.head_dim, u("attention.key_length"));
  DI_ASSIGN_OR_RETURN(c_.n_vocab, u("vocab_size"));
  DI_ASSIGN_OR_RETURN(c_.n_ctx_train, u("context_length"));
  DI_ASSIGN_OR_RETURN(c_.n_rot, u("rope.dimension_count"));
  DI_ASSIGN_OR_RETURN(c_.rms_norm_eps, md.get_float(k + "attention.layer_norm_rms_epsilon"));
  DI_ASSIGN_OR_RETURN(c_.rope_theta, md.get_float(k + "rope.freq_base"));
  c_.rope_style = RopeStyle::kInterleaved;
  DI_ASSIGN_OR_RETURN(p_.q_lora, u("q_lora_rank"));
  DI_ASSIGN_OR_RETURN(p_.o_groups, u("o_groups"));
  DI_ASSIGN_OR_RETURN(p_.o_lora, u("o_lora_rank"));
  DI_ASSIGN_OR_RETURN(p_.window, u("attention.sliding_window"));
  if (!p_.v41) {
    DI_ASSIGN_OR_RETURN(p_.rate_csa, u("compress_rate_csa"));
    DI_ASSIGN_OR_RETURN(p_.rate_hca, u("compress_rate_hca"));
  }
  DI_ASSIGN_OR_RETURN(p_.hc, u("hc_mult"));
  DI_ASSIGN_OR_RETURN(p_.sinkhorn, u("hc_sinkhorn_iters"));
  DI_ASSIGN_OR_RETURN(double hc_eps, md.get_float(k + "hc_eps"));
  p_.hc_eps = static_cast<float>(hc_eps);
  DI_ASSIGN_OR_RETURN(p_.n_expert, u("expert_count"));
  DI_ASSIGN_OR_RETURN(p_.n_used, u("expert_used_count"));
  DI_ASSIGN_OR_RETURN(p_.n_ff, u("expert_feed_forward_length"));
  DI_ASSIGN_OR_RETURN(double scale, md.get_float(k + "expert_weights_scale"));
  p_.routed_scale = static_cast<float>(scale);
  DI_ASSIGN_OR_RETURN(double limit, md.get_float(k + "swiglu_limit"));
  p_.swiglu_limit = static_cast<float>(limit);
  DI_ASSIGN_OR_RETURN(p_.index_heads, u("index_n_heads"));
  DI_ASSIGN_OR_RETURN(p_.index_dim, u("index_head_dim"));
  DI_ASSIGN_OR_RETURN(p_.index_topk, u("index_topk"));
  DI_ASSIGN_OR_RETURN(p_.compress_theta, md.get_float(k + "compress_rope.freq_base"));
  DI_ASSIGN_OR_RETURN(std::string scaling, md.get_string_or(k + "compress_rope.scaling.type", "none"));
  p_.yarn = scaling == "yarn";
  if (p_.yarn) {
    DI_ASSIGN_OR_RETURN(p_.yarn_factor, md.get_float(k + "compress_rope.scaling.factor"));
    DI_ASSIGN_OR_RETURN(p_.yarn_original, u("compress_rope.scaling.original_context_length"));
    DI_ASSIGN_OR_RETURN(p_.yarn_beta_fast, md.get_float(k + "compress_rope.scaling.beta_fast"));
    DI_ASSIGN_OR_RETURN(p_.yarn_beta_slow, md.get_float(k + "compress_rope.scaling.beta_slow"));
  }
  DI_ASSIGN_OR_RETURN(uint64_t n_mtp, md.get_uint_or(k + "nextn_predict_layers", 0));
  p_.n_mtp = static_cast<int64_t>(n_mtp);
  DI_ASSIGN_OR_RETURN(std::vector<int64_t> kinds, md.get_int_array(k + "layer_types"));
  const MetaValue* hash = md.find(k + "mlp_hash");
  if (static_cast<int64_t>(kinds.size()) != c_.n_layer || hash == nullptr) {
    return invalid_argument(source_->path() + ": DeepSeek V4 needs one layer type and one MLP type per layer");
  }
  for (int64_t v : kinds) p_.kinds.push_back(static_cast<LayerKind>(v));
  for (const MetaValue& v : std::get<std::shared_ptr<MetaArray>>(hash->value)->items) {
    p_.hash.push_back(std::get<bool>(v.value));
  }
  const std::string& path = source_->path();
  if (c_.n_head_kv != 1) return unimplemented(path + ": DeepSeek V4 with more than one KV head is not supported");
  if (c_.n_rot <= 0 || c_.n_rot % 2 != 0 || c_.n_rot > c_.head_dim || c_.n_rot > p_.index_dim) {
    return invalid_argument(path + ": the rope dimension " + std::to_string(c_.n_rot) + " does not fit the heads");
  }
  if (c_.n_head % p_.o_groups != 0) {
    return invalid_argument(path + ": " + std::to_string(c_.n_head) + " heads do not split into " +
                            std::to_string(p_.o_groups) + " output groups");
  }
  if (p_.n_used > p_.n_expert || p_.hc > 16) return invalid_argument(path + ": invalid experts or hc_mult");
  DI_ASSIGN_OR_RETURN(uint64_t n_shared, md.get_uint(k + "expert_shared_count"));
  if (n_shared != 1) return unimplemented(path + ": DeepSeek V4 with n_shared_experts != 1 is not supported");
  if (p_.v41) return read_v41_config(md, k);
  return {};
}

// V4.1's CSA2 schedule (model/loader/hf_config.cpp wrote and checked it).
Status V4Model::read_v41_config(const Metadata& md, const std::string& k) {
  const std::string& path = source_->path();
  DI_ASSIGN_OR_RETURN(p_.ratio, md.get_int_array(k + "compress_ratios"));
  DI_ASSIGN_OR_RETURN(p_.kv_sources, md.get_int_array(k + "kv_source_layers"));
  DI_ASSIGN_OR_RETURN(p_.index_sources, md.get_int_array(k + "index_source_layers"));
  if (static_cast<int64_t>(p_.ratio.size()) != c_.n_layer) {
    return invalid_argument(path + ": DeepSeek V4.1 needs one compress ratio per layer");
  }
  if (md.find(k + "candidate_source_layer") != nullptr) {
    DI_ASSIGN_OR_RETURN(uint64_t cand, md.get_uint(k + "candidate_source_layer"));
    DI_ASSIGN_OR_RETURN(uint64_t block, md.get_uint(k + "candidate_block_size"));
    DI_ASSIGN_OR_RETURN(uint64_t top, md.get_uint(k + "candidate_top_blocks"));
    p_.candidate_source = static_cast<int64_t>(cand);
    p_.candidate_block = static_cast<int64_t>(block);
    p_.candidate_top_blocks = static_cast<int64_t>(top);
  }
  const auto get = [&](const char* key, int64_t* out) -> Status {
    DI_ASSIGN_OR_RETURN(uint64_t v, md.get_uint(k + key));
    *out = static_cast<int64_t>(v);
    return {};
  };
  if (md.find(k + "engram_layers") != nullptr) {
    DI_ASSIGN_OR_RETURN(p_.engram_layers, md.get_int_array(k + "engram_layers"));
    DI_ASSIGN_OR_RETURN(p_.engram_table_rows, md.get_int_array(k + "engram_table_rows"));
    DI_RETURN_IF_ERROR(get("engram_max_ngram", &p_.engram_max_ngram));
    DI_RETURN_IF_ERROR(get("engram_buckets", &p_.engram_buckets));
    DI_RETURN_IF_ERROR(get("engram_heads", &p_.engram_heads));
    DI_RETURN_IF_ERROR(get("engram_head_dim", &p_.engram_head_dim));
    DI_RETURN_IF_ERROR(get("engram_classes", &p_.engram_classes));
    DI_RETURN_IF_ERROR(get("engram_pad_token", &p_.engram_pad_token));
    if (p_.engram_pad_token >= c_.n_vocab) {
      return invalid_argument(path + ": engram_pad_token_id " + std::to_string(p_.engram_pad_token) +
                              " is outside the vocabulary");
    }
  }
  if (md.find(k + "dspark_layers") != nullptr) {
    DI_RETURN_IF_ERROR(get("dspark_layers", &p_.dspark_layers));
    DI_RETURN_IF_ERROR(get("dspark_block_size", &p_.dspark_block));
    DI_RETURN_IF_ERROR(get("dspark_noise_token", &p_.dspark_noise));
    DI_RETURN_IF_ERROR(get("dspark_markov_rank", &p_.dspark_rank));
    DI_RETURN_IF_ERROR(get("dspark_experts", &p_.dspark_experts));
    DI_RETURN_IF_ERROR(get("dspark_experts_used", &p_.dspark_used));
    DI_ASSIGN_OR_RETURN(p_.dspark_targets, md.get_int_array(k + "dspark_target_layers"));
    if (p_.dspark_noise >= c_.n_vocab || p_.dspark_used > p_.dspark_experts ||
        std::ranges::any_of(p_.dspark_targets, [&](int64_t l) { return l >= c_.n_layer; })) {
      return invalid_argument(path + ": DeepSeek V4.1's DSpark fields (noise token, experts, target layers) do not "
                              "fit the model");
    }
  }
  // The cache formats' blocks: FP8 window rows in 32s, NVFP4 compressed rows in 16s, MXFP4
  // index queries and keys in 32s, each block within one head.
  if (c_.head_dim % 32 != 0 || p_.index_dim % 32 != 0) {
    return unimplemented(path + ": DeepSeek V4.1 with head_dim " + std::to_string(c_.head_dim) + " or index_head_dim " +
                         std::to_string(p_.index_dim) + " not a multiple of 32 (its cache blocks) is not supported");
  }
  return {};
}

// Tensor names: the official release's (layers.N.attn.wq_a.weight, ffn.experts.E.w1.weight,
// hc_attn_fn, attn.kv_norm, ...), which transformers also writes back on save_pretrained, with its
// "model." prefix, embed_tokens / hc_head.hc_fn / norm under it and attn.norm for attn.kv_norm
// (both spellings are read).
std::string V4Model::top_name(const std::string& hf, const std::string& official) const {
  return source_->find(hf) != nullptr ? hf : official;
}

// One V4 block's tensors under prefix b ("layers.N.", "model.layers.N.", "mtp.0.").
Status V4Model::bind_layer(const std::string& b, LayerKind kind, bool hash, Layer* L) {
  const int64_t D = c_.n_embd, hd = c_.head_dim, H = c_.n_head;
  const int64_t n_mix = (2 + p_.hc) * p_.hc;
  const std::string a = b + "attn.";
  L->kind = kind;
  L->hash = hash;
  if (L->n_expert == 0) {
    L->n_expert = p_.n_expert;
    L->n_used = p_.n_used;
  }
  DI_RETURN_IF_ERROR(bind_hyper(b, "hc_attn_fn", "hc_attn_base", "hc_attn_scale", n_mix, 3, &L->attn_hc));
  DI_RETURN_IF_ERROR(bind_hyper(b, "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale", n_mix, 3, &L->ffn_hc));
  DI_ASSIGN_OR_RETURN(L->attn_norm, vec(b + "attn_norm.weight", {D}));
  DI_ASSIGN_OR_RETURN(L->ffn_norm, vec(b + "ffn_norm.weight", {D}));
  DI_ASSIGN_OR_RETURN(L->q_a, mat(a + "wq_a.weight", p_.q_lora, D));
  DI_ASSIGN_OR_RETURN(L->q_a_norm, vec(a + "q_norm.weight", {p_.q_lora}));
  DI_ASSIGN_OR_RETURN(L->q_b, mat(a + "wq_b.weight", H * hd, p_.q_lora));
  DI_ASSIGN_OR_RETURN(L->kv, mat(a + "wkv.weight", hd, D));
  // The release names the K=V norm attn.kv_norm; transformers (5.24) saves it as attn.norm.
  DI_ASSIGN_OR_RETURN(L->kv_norm, vec(top_name(a + "norm.weight", a + "kv_norm.weight"), {hd}));
  DI_ASSIGN_OR_RETURN(L->sinks, vec(a + "attn_sink", {H}));
  const int64_t group_in = H * hd / p_.o_groups;
  DI_ASSIGN_OR_RETURN(const TensorView* oa, get(a + "wo_a.weight", {p_.o_groups * p_.o_lora, group_in}));
  for (int64_t g = 0; g < p_.o_groups; ++g) {
    auto m = weights_->add_matrix(oa->name, oa->dtype, oa->data + static_cast<size_t>(g * p_.o_lora) * oa->row_bytes(),
                                  p_.o_lora, group_in);
    if (!m.ok()) return Status(m.status().code(), source_->path() + ": " + m.status().message());
    L->o_a.push_back(*m);
  }
  DI_ASSIGN_OR_RETURN(L->o_b, mat(a + "wo_b.weight", D, p_.o_groups * p_.o_lora));
  if (L->kind == LayerKind::kCsa) {
    DI_RETURN_IF_ERROR(bind_compressor(a + "compressor.", 2 * hd, p_.rate_csa, hd, &L->comp));
    DI_RETURN_IF_ERROR(
        bind_compressor(a + "indexer.compressor.", 2 * p_.index_dim, p_.rate_csa, p_.index_dim, &L->index_comp));
    DI_ASSIGN_OR_RETURN(L->index_q_b, mat(a + "indexer.wq_b.weight", p_.index_heads * p_.index_dim, p_.q_lora));
    DI_ASSIGN_OR_RETURN(L->index_w, mat(a + "indexer.weights_proj.weight", p_.index_heads, D));
  } else if (L->kind == LayerKind::kHca) {
    DI_RETURN_IF_ERROR(bind_compressor(a + "compressor.", hd, p_.rate_hca, hd, &L->comp));
  }
  const std::string f = b + "ffn.";
  DI_ASSIGN_OR_RETURN(L->router, mat(f + "gate.weight", L->n_expert, D));
  if (L->hash) {
    DI_ASSIGN_OR_RETURN(const TensorView* t, get(f + "gate.tid2eid", {c_.n_vocab, L->n_used}));
    if (t->dtype != DType::kI32 && t->dtype != DType::kI64) {
      return invalid_argument(source_->path() + ": tensor '" + t->name + "' must hold integers (I32 or I64)");
    }
    L->tid2eid.resize(static_cast<size_t>(t->n_elements()));
    for (size_t i = 0; i < L->tid2eid.size(); ++i) {
      int64_t v = 0;
      if (t->dtype == DType::kI64) {
        std::memcpy(&v, t->data + 8 * i, 8);
      } else {
        int32_t w = 0;
        std::memcpy(&w, t->data + 4 * i, 4);
        v = w;
      }
      if (v < 0 || v >= p_.n_expert) {
        return invalid_argument(source_->path() + ": tensor '" + t->name + "' names expert " + std::to_string(v) +
                                " of " + std::to_string(p_.n_expert));
      }
      L->tid2eid[i] = static_cast<int32_t>(v);
    }
  } else {
    DI_ASSIGN_OR_RETURN(L->router_bias, vec(f + "gate.bias", {L->n_expert}));
  }
  for (int64_t e = 0; e < L->n_expert; ++e) {
    const std::string x = f + "experts." + std::to_string(e) + ".";
    DI_ASSIGN_OR_RETURN(L->gate.emplace_back(), mat(x + "w1.weight", p_.n_ff, D));
    DI_ASSIGN_OR_RETURN(L->up.emplace_back(), mat(x + "w3.weight", p_.n_ff, D));
    DI_ASSIGN_OR_RETURN(L->down.emplace_back(), mat(x + "w2.weight", D, p_.n_ff));
  }
  DI_ASSIGN_OR_RETURN(L->shared_gate, mat(f + "shared_experts.w1.weight", p_.n_ff, D));
  DI_ASSIGN_OR_RETURN(L->shared_up, mat(f + "shared_experts.w3.weight", p_.n_ff, D));
  DI_ASSIGN_OR_RETURN(L->shared_down, mat(f + "shared_experts.w2.weight", D, p_.n_ff));
  return {};
}

// A V4.1 layer's CSA2 part under prefix a ("layers.N.attn."): its role from the schedule, the
// compressor (owners: wkv, wgate above ratio 1, norm; no position bias) with the index-key
// projection (indexer.wk, indexer.k_norm), and the indexer's queries (index sources).
Status V4Model::bind_csa2(const std::string& a, int32_t layer, Layer* L) {
  const auto l = static_cast<size_t>(layer);
  const auto in = [](const std::vector<int64_t>& v, int64_t x) { return std::ranges::find(v, x) != v.end(); };
  const int64_t D = c_.n_embd, hd = c_.head_dim;
  L->ratio = p_.ratio[l];
  if (L->ratio == 0) return {};
  for (int64_t src : p_.kv_sources) {
    if (src <= layer && p_.ratio[static_cast<size_t>(src)] == L->ratio) L->kv_owner = static_cast<int32_t>(src);
  }
  if (L->kv_owner < 0) {
    return invalid_argument(source_->path() + ": DeepSeek V4.1 layer " + std::to_string(layer) +
                            " has no KV source layer of its compress ratio before it");
  }
  L->index_source = in(p_.index_sources, layer);
  if (p_.candidate_source == layer) {
    L->candidates = backend::CandidateUse::kSelect;
  } else if (L->index_source && p_.candidate_source >= 0 && p_.candidate_source < layer) {
    if (p_.ratio[static_cast<size_t>(p_.candidate_source)] != L->ratio) {
      return invalid_argument(source_->path() + ": DeepSeek V4.1 layer " + std::to_string(layer) +
                              " restricts its entries to the candidates of layer " +
                              std::to_string(p_.candidate_source) + ", whose compress ratio differs");
    }
    L->candidates = backend::CandidateUse::kRestrict;
  }
  if (L->kv_owner == layer) {
    DI_ASSIGN_OR_RETURN(L->comp.kv, mat(a + "compressor.wkv.weight", hd, D));
    if (L->ratio > 1) {
      DI_ASSIGN_OR_RETURN(L->comp.gate, mat(a + "compressor.wgate.weight", hd, D));
    }
    DI_ASSIGN_OR_RETURN(L->comp.norm, vec(a + "compressor.norm.weight", {hd}));
    DI_ASSIGN_OR_RETURN(L->index_wk, mat(a + "indexer.wk.weight", p_.index_dim, hd));
    DI_ASSIGN_OR_RETURN(L->index_k_norm, vec(a + "indexer.k_norm.weight", {p_.index_dim}));
  }
  if (L->index_source) {
    DI_ASSIGN_OR_RETURN(L->index_q_b, mat(a + "indexer.wq_b.weight", p_.index_heads * p_.index_dim, p_.q_lora));
    DI_ASSIGN_OR_RETURN(L->index_w, mat(a + "indexer.weights_proj.weight", p_.index_heads, D));
  }
  return {};
}

// A V4.1 Engram layer's tensors under prefix b ("layers.N.engram."): the table, the key/value
// projection and the gate's two norm weights (their product is what the gate uses).
Status V4Model::bind_engram(const std::string& b, int engram, Layer* L) {
  const int64_t D = c_.n_embd, hc = p_.hc;
  const int64_t hash_heads = (p_.engram_max_ngram - 1) * p_.engram_heads;
  L->engram = engram;
  DI_ASSIGN_OR_RETURN(L->engram_table, mat(b + "embed.weight", p_.engram_table_rows[static_cast<size_t>(engram)],
                                           p_.engram_head_dim));
  DI_ASSIGN_OR_RETURN(L->engram_wkv, mat(b + "wkv.weight", (hc + 1) * D, hash_heads * p_.engram_head_dim));
  std::vector<float> q(static_cast<size_t>(hc * D)), k(q.size());
  for (const auto& [name, out] : {std::pair{"q_weight", &q}, std::pair{"k_weight", &k}}) {
    DI_ASSIGN_OR_RETURN(const TensorView* t, get(b + name, {hc, D}));
    if (!widen_to_f32(t->dtype, t->data, out->data(), t->n_elements())) {
      return unimplemented(source_->path() + ": tensor '" + t->name + "' must be f32, f16 or bf16");
    }
  }
  for (size_t i = 0; i < q.size(); ++i) q[i] *= k[i];
  DI_ASSIGN_OR_RETURN(L->engram_weight, weights_->add_vector(q));
  return {};
}

// The Engram layers' hashing: the tokenizer's classes (LoadOptions::token_classes), and per
// layer its primes (the smallest unused primes above the bucket count, in layer, order and head
// order), their table offsets and its multipliers (NumPy's default_rng(10007 * layer), odd, each
// below 2^63 / classes), as the release's inference/engram.py draws them.
Status V4Model::prepare_engram_hashes() {
  const std::string& path = source_->path();
  const auto& provide = source_->load_options().token_classes;
  if (!provide) {
    return failed_precondition(path + ": DeepSeek V4.1's Engram layers hash n-grams of the tokenizer's token classes; "
                               "load the model with its tokenizer (the engine does)");
  }
  DI_ASSIGN_OR_RETURN(token_classes, provide());
  if (token_classes.count != p_.engram_classes) {
    return invalid_argument(path + ": the tokenizer has " + std::to_string(token_classes.count) +
                            " Engram token classes, but config.json's engram_compressed_vocab_size says " +
                            std::to_string(p_.engram_classes) + " (the hash multipliers depend on it)");
  }
  if (static_cast<int64_t>(token_classes.of_token.size()) < c_.n_vocab) {
    return invalid_argument(path + ": the tokenizer's " + std::to_string(token_classes.of_token.size()) +
                            " tokens do not cover the model's vocabulary of " + std::to_string(c_.n_vocab));
  }
  const auto is_prime = [](int64_t v) {
    if (v < 2) return false;
    if (v % 2 == 0) return v == 2;
    for (int64_t d = 3; d * d <= v; d += 2) {
      if (v % d == 0) return false;
    }
    return true;
  };
  std::vector<int64_t> used;
  const int64_t bound = std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / token_classes.count) / 2);
  for (size_t e = 0; e < p_.engram_layers.size(); ++e) {
    EngramHash h;
    for (int64_t order = 2; order <= p_.engram_max_ngram; ++order) {
      int64_t current = p_.engram_buckets - 1;
      for (int64_t head = 0; head < p_.engram_heads; ++head) {
        do {
          ++current;
        } while (!is_prime(current) || std::ranges::find(used, current) != used.end());
        used.push_back(current);
        h.offsets.push_back(h.primes.empty() ? 0 : h.offsets.back() + h.primes.back());
        h.primes.push_back(current);
      }
    }
    if (h.offsets.back() + h.primes.back() > p_.engram_table_rows[e]) {
      return invalid_argument(path + ": Engram layer " + std::to_string(p_.engram_layers[e]) + " hashes into " +
                              std::to_string(h.offsets.back() + h.primes.back()) + " rows, but its table has " +
                              std::to_string(p_.engram_table_rows[e]));
    }
    NumpyPcg64 rng(static_cast<uint64_t>(10007 * p_.engram_layers[e]));
    for (int64_t i = 0; i < p_.engram_max_ngram; ++i) {
      DI_ASSIGN_OR_RETURN(int64_t m, rng.integer_below(bound));
      h.multipliers.push_back(m * 2 + 1);
    }
    engram_hash.push_back(std::move(h));
  }
  return {};
}

// V4.1's DSpark draft layers, when loaded with the draft layers (LoadOptions::draft_layers) and
// the checkpoint has them: mtp.S.* as a window-only V4.1 block each (with DSpark's expert
// counts), mtp.0.main_proj / main_norm, and on the last stage norm, markov_head.{embed, head}
// and confidence_head.proj.
Status V4Model::bind_dspark() {
  if (p_.dspark_layers < 1 || source_->find("mtp.0.main_proj.weight") == nullptr) return {};
  const int64_t D = c_.n_embd, R = p_.dspark_rank, last = p_.dspark_layers - 1;
  const auto n_targets = static_cast<int64_t>(p_.dspark_targets.size());
  Dspark d;
  d.stages.resize(static_cast<size_t>(p_.dspark_layers));
  for (int64_t s = 0; s < p_.dspark_layers; ++s) {
    Layer& L = d.stages[static_cast<size_t>(s)];
    L.n_expert = p_.dspark_experts;
    L.n_used = p_.dspark_used;
    DI_RETURN_IF_ERROR(bind_layer("mtp." + std::to_string(s) + ".", LayerKind::kSliding, false, &L));
  }
  const std::string l = "mtp." + std::to_string(last) + ".";
  DI_ASSIGN_OR_RETURN(d.main_proj, mat("mtp.0.main_proj.weight", D, n_targets * D));
  DI_ASSIGN_OR_RETURN(d.main_norm, vec("mtp.0.main_norm.weight", {D}));
  DI_ASSIGN_OR_RETURN(d.norm, vec(l + "norm.weight", {D}));
  DI_ASSIGN_OR_RETURN(d.markov_embed, mat(l + "markov_head.embed.weight", c_.n_vocab, R));
  DI_ASSIGN_OR_RETURN(d.markov_head, mat(l + "markov_head.head.weight", c_.n_vocab, R));
  DI_ASSIGN_OR_RETURN(const TensorView* conf, get(l + "confidence_head.proj.weight", {1, D + R}));
  d.confidence.resize(static_cast<size_t>(D + R));
  if (!widen_to_f32(conf->dtype, conf->data, d.confidence.data(), D + R)) {
    return unimplemented(source_->path() + ": tensor '" + conf->name + "' must be f32, f16 or bf16");
  }
  dspark = std::move(d);
  return {};
}

// The first MTP layer, when the checkpoint has one (a sliding-window block with a biased router).
Status V4Model::bind_mtp() {
  if (p_.n_mtp < 1 || source_->find("mtp.0.e_proj.weight") == nullptr) return {};
  const int64_t D = c_.n_embd;
  Mtp t;
  DI_RETURN_IF_ERROR(bind_layer("mtp.0.", LayerKind::kSliding, false, &t.block));
  DI_ASSIGN_OR_RETURN(t.enorm, vec("mtp.0.enorm.weight", {D}));
  DI_ASSIGN_OR_RETURN(t.hnorm, vec("mtp.0.hnorm.weight", {D}));
  DI_ASSIGN_OR_RETURN(t.norm, vec("mtp.0.norm.weight", {D}));
  DI_ASSIGN_OR_RETURN(t.e_proj, mat("mtp.0.e_proj.weight", D, D));
  DI_ASSIGN_OR_RETURN(t.h_proj, mat("mtp.0.h_proj.weight", D, D));
  DI_RETURN_IF_ERROR(bind_hyper("mtp.0.", "hc_head_fn", "hc_head_base", "hc_head_scale", p_.hc, 1, &t.head_hc));
  mtp = std::move(t);
  return {};
}

Status V4Model::bind() {
  const int64_t D = c_.n_embd, hd = c_.head_dim;
  DI_ASSIGN_OR_RETURN(embed, mat(top_name("model.embed_tokens.weight", "embed.weight"), c_.n_vocab, D));
  DI_RETURN_IF_ERROR(backend::require(backend_, std::array{backend::OpUse{backend::Op::kEmbed, embed.dtype}},
                                      source_->path()));
  DI_ASSIGN_OR_RETURN(lm_head, mat(top_name("lm_head.weight", "head.weight"), c_.n_vocab, D));
  DI_ASSIGN_OR_RETURN(final_norm, vec(top_name("model.norm.weight", "norm.weight"), {D}));
  const bool hf_head = source_->find("model.hc_head.hc_fn") != nullptr;
  if (!p_.v41) {  // V4.1 has no hyper head: the last site's pre weights collapse the streams
    DI_RETURN_IF_ERROR(bind_hyper(hf_head ? "model.hc_head." : "", hf_head ? "hc_fn" : "hc_head_fn",
                                  hf_head ? "hc_base" : "hc_head_base", hf_head ? "hc_scale" : "hc_head_scale", p_.hc, 1,
                                  &head_hc));
  }
  const std::string layers_prefix = source_->find("model.layers.0.attn_norm.weight") != nullptr ? "model.layers." : "layers.";
  layers.resize(static_cast<size_t>(c_.n_layer));
  for (int64_t l = 0; l < c_.n_layer; ++l) {
    const auto i = static_cast<size_t>(l);
    DI_RETURN_IF_ERROR(bind_layer(layers_prefix + std::to_string(l) + ".", p_.kinds[i], p_.hash[i], &layers[i]));
    if (p_.v41) {
      DI_RETURN_IF_ERROR(bind_csa2(layers_prefix + std::to_string(l) + ".attn.", static_cast<int32_t>(l), &layers[i]));
      const auto e = std::ranges::find(p_.engram_layers, l);
      if (e != p_.engram_layers.end()) {
        DI_RETURN_IF_ERROR(bind_engram(layers_prefix + std::to_string(l) + ".engram.",
                                       static_cast<int>(e - p_.engram_layers.begin()), &layers[i]));
      }
    }
  }
  if (!p_.engram_layers.empty()) DI_RETURN_IF_ERROR(prepare_engram_hashes());
  DI_RETURN_IF_ERROR(bind_mtp());
  DI_RETURN_IF_ERROR(bind_dspark());
  DI_ASSIGN_OR_RETURN(inv_freq_main, weights_->add_vector(inv_freq(c_.rope_theta, c_.n_rot)));
  DI_ASSIGN_OR_RETURN(inv_freq_compress,
                      weights_->add_vector(p_.yarn ? yarn_inv_freq(p_.compress_theta, c_.n_rot, p_.yarn_factor,
                                                                   p_.yarn_original, p_.yarn_beta_fast, p_.yarn_beta_slow)
                                                   : inv_freq(p_.compress_theta, c_.n_rot)));
  DI_ASSIGN_OR_RETURN(ones_streams, weights_->add_vector(std::vector<float>(static_cast<size_t>(p_.hc * D), 1.0f)));
  DI_ASSIGN_OR_RETURN(ones_head, weights_->add_vector(std::vector<float>(static_cast<size_t>(hd), 1.0f)));

  for (const Layer& L : layers) {
    if (L.kind == LayerKind::kCsa2 && L.kv_owner == &L - layers.data() && L.ratio > 1) {
      while (static_cast<int64_t>(zero_ape.size()) <= L.ratio) zero_ape.emplace_back();
      if (zero_ape[static_cast<size_t>(L.ratio)].empty()) {
        DI_ASSIGN_OR_RETURN(Tensor z, weights_->add_vector(std::vector<float>(static_cast<size_t>(L.ratio * hd), 0.0f)));
        zero_ape[static_cast<size_t>(L.ratio)] = z.reshaped(L.ratio, hd);
      }
    }
  }
  assign_groups();
  if (g_.count > backend::kMaxKvGroups) {
    return unimplemented(source_->path() + ": this DeepSeek V4.1 schedule needs " + std::to_string(g_.count) +
                         " KV groups; at most " + std::to_string(backend::kMaxKvGroups) + " are supported");
  }

  using backend::Op;
  const backend::OpUse uses[] = {{Op::kMatmul, embed.dtype}, {Op::kRmsNorm}, {Op::kRope, DType::kF32, 0},
                                 {Op::kGatedActivation}, {Op::kClamp}, {Op::kHyperPre}, {Op::kHyperPost},
                                 {Op::kRouteSqrtSoftplus}, {Op::kMoeDispatch}, {Op::kMoeGather},
                                 {Op::kGroupedMatmul, embed.dtype}, {Op::kMoeCombine}, {Op::kAdd}, {Op::kScale},
                                 {Op::kGatherOutputRows}};
  DI_RETURN_IF_ERROR(backend::require(backend_, uses, source_->path()));
  if (!p_.v41) return {};
  const backend::OpUse v41_uses[] = {{Op::kCompressRows}, {Op::kCacheRoundTrip}, {Op::kGatherRows}, {Op::kEngramMix},
                                     {Op::kBlockAttention}};
  return backend::require(backend_, v41_uses, source_->path());
}

// KV group indices of the layer kinds present.
void V4Model::assign_groups() {
  int next = 0;
  g_.window = next++;
  bool csa = false, hca = false;
  for (const Layer& L : layers) {
    csa |= L.kind == LayerKind::kCsa;
    hca |= L.kind == LayerKind::kHca;
    if (L.kind != LayerKind::kCsa2 || std::ranges::any_of(g_.csa2, [&](const Csa2Groups& c) { return c.ratio == L.ratio; })) {
      continue;
    }
    Csa2Groups c{L.ratio};
    c.kv = next++;
    c.index = next++;
    if (L.ratio > 1) c.state = next++;
    g_.csa2.push_back(c);
  }
  if (csa) {
    g_.csa_kv = next++;
    g_.csa_index = next++;
    g_.csa_state = next++;
    g_.csa_index_state = next++;
  }
  if (hca) {
    g_.hca_kv = next++;
    g_.hca_state = next++;
  }
  g_.count = next;
}

std::vector<KvGroupSpec> V4Model::kv_groups() const {
  std::vector<KvGroupSpec> out(static_cast<size_t>(g_.count));
  const auto make = [&](int index, const char* name, KvGroupKind kind, int64_t width, int64_t tokens_per_row,
                        int64_t window, bool k_only, LayerKind which, bool all) {
    if (index < 0) return;
    KvGroupSpec& g = out[static_cast<size_t>(index)];
    g.name = name;
    g.kind = kind;
    g.n_head_kv = 1;
    g.head_dim = width;
    g.tokens_per_row = tokens_per_row;
    g.window = window;
    g.k_only = k_only;
    for (size_t l = 0; l < layers.size(); ++l) {
      if (all || layers[l].kind == which) g.layers.push_back(static_cast<int32_t>(l));
    }
  };
  const int64_t hd = c_.head_dim, id = p_.index_dim;
  make(g_.window, "window", KvGroupKind::kSlidingWindow, hd, 1, p_.window, true, LayerKind::kSliding, true);
  make(g_.csa_kv, "csa_kv", KvGroupKind::kCompressed, hd, p_.rate_csa, 0, true, LayerKind::kCsa, false);
  make(g_.csa_index, "csa_index", KvGroupKind::kCompressed, id, p_.rate_csa, 0, true, LayerKind::kCsa, false);
  make(g_.csa_state, "csa_state", KvGroupKind::kCompressorState, 2 * hd, 1, 2 * p_.rate_csa, false, LayerKind::kCsa,
       false);
  make(g_.csa_index_state, "csa_index_state", KvGroupKind::kCompressorState, 2 * id, 1, 2 * p_.rate_csa, false,
       LayerKind::kCsa, false);
  make(g_.hca_kv, "hca_kv", KvGroupKind::kCompressed, hd, p_.rate_hca, 0, true, LayerKind::kHca, false);
  make(g_.hca_state, "hca_state", KvGroupKind::kCompressorState, hd, 1, p_.rate_hca, false, LayerKind::kHca, false);
  // V4.1: per ratio, the owners' compressed rows, index keys and (ratio > 1) pending tokens.
  for (const Csa2Groups& cg : g_.csa2) {
    const auto owners = [&](int index, std::string name, KvGroupKind kind, int64_t width, int64_t tokens_per_row,
                            int64_t window, bool k_only) {
      if (index < 0) return;
      make(index, "", kind, width, tokens_per_row, window, k_only, LayerKind::kCsa2, false);
      KvGroupSpec& g = out[static_cast<size_t>(index)];
      g.name = std::move(name);
      std::erase_if(g.layers, [&](int32_t l) {
        const Layer& L = layers[static_cast<size_t>(l)];
        return L.kv_owner != l || L.ratio != cg.ratio;
      });
    };
    const std::string r = std::to_string(cg.ratio);
    owners(cg.kv, "csa2_kv_r" + r, KvGroupKind::kCompressed, hd, cg.ratio, 0, true);
    owners(cg.index, "csa2_index_r" + r, KvGroupKind::kCompressed, id, cg.ratio, 0, true);
    owners(cg.state, "csa2_state_r" + r, KvGroupKind::kCompressorState, hd, 1, cg.ratio, false);
  }
  return out;
}

// The draft layers' KV: a sliding ring of K=V rows per layer (group 0, as the main model's window
// group is, so attention() addresses both alike): the MTP's one layer, or for DSpark each
// stage's rows of the target context.
std::vector<KvGroupSpec> V4Model::draft_kv_groups() const {
  if (!mtp && !dspark) return {};
  KvGroupSpec g;
  g.name = dspark ? "dspark_window" : "mtp_window";
  g.kind = KvGroupKind::kSlidingWindow;
  g.n_head_kv = 1;
  g.head_dim = c_.head_dim;
  g.tokens_per_row = 1;
  g.window = p_.window;
  g.k_only = true;
  const auto n_layers = dspark ? static_cast<int32_t>(dspark->stages.size()) : 1;
  for (int32_t l = 0; l < n_layers; ++l) g.layers.push_back(l);
  return {g};
}

class V4MtpRunner final : public DraftHeadRunner {
 public:
  V4MtpRunner(const V4Model& m, const V4Runner& target) : target_(target), own_(m) {}
  Status run(std::span<const int32_t> tokens, std::span<const int32_t> hidden_rows, HiddenFrom from,
             std::span<const BatchSequence> sequences, backend::KvCache& kv) override {
    return own_.run_mtp(tokens, hidden_rows, from == HiddenFrom::kTarget ? target_ : own_, sequences, kv);
  }
  std::span<const float> logits(int64_t row) const override { return own_.logits(row); }
  int64_t n_logit_rows() const override { return own_.n_logit_rows(); }

 private:
  const V4Runner& target_;
  V4Runner own_;
};

std::unique_ptr<DraftHeadRunner> V4Model::new_draft_head_runner(const BatchRunner& target) const {
  const auto* t = dynamic_cast<const V4Runner*>(&target);
  if (!mtp || t == nullptr) return nullptr;
  return std::make_unique<V4MtpRunner>(*this, *t);
}

class V4DsparkRunner final : public BlockDraftRunner {
 public:
  V4DsparkRunner(const V4Model& m, const V4Runner& target) : m_(m), target_(target), own_(m) {}
  int64_t block_size() const override { return m_.p_.dspark_block; }
  Status observe(std::span<const int32_t> rows, std::span<const BatchSequence> sequences,
                 backend::KvCache& kv) override {
    return own_.run_dspark_observe(rows, target_, sequences, kv);
  }
  Status draft(std::span<const int32_t> anchors, std::span<const BatchSequence> sequences,
               backend::KvCache& kv) override {
    return own_.run_dspark_block(anchors, sequences, kv);
  }
  std::span<const int32_t> drafts(int64_t i) const override {
    return own_.dspark_drafts().subspan(slot0(i), block_size());
  }
  std::span<const float> confidence(int64_t i) const override {
    return own_.dspark_confidence().subspan(slot0(i), block_size());
  }
  std::span<const float> logits(int64_t i, int64_t slot) const override {
    return own_.logits(static_cast<int64_t>(slot0(i)) + slot);
  }

 private:
  size_t slot0(int64_t i) const { return static_cast<size_t>(i * block_size()); }
  const V4Model& m_;
  const V4Runner& target_;
  V4Runner own_;
};

std::unique_ptr<BlockDraftRunner> V4Model::new_block_draft_runner(const BatchRunner& target) const {
  const auto* t = dynamic_cast<const V4Runner*>(&target);
  if (!dspark || t == nullptr) return nullptr;
  return std::make_unique<V4DsparkRunner>(*this, *t);
}

V4Runner::V4Runner(const V4Model& m) : m_(m), q_(m.backend().new_queue()), buffers_(kNumSlots) {}

Status V4Runner::ensure(int slot, int64_t elems) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(elems, 1)) * 4;
  backend::DeviceBuffer& b = buffers_[static_cast<size_t>(slot)];
  if (b.bytes() >= bytes) return {};
  b = backend::DeviceBuffer();
  DI_ASSIGN_OR_RETURN(b, m_.backend().allocate(bytes));
  return {};
}

// Streams kX -> kPost, kComb, kCollapsed.
void V4Runner::hyper_site(const HyperWeights& w, int64_t n) {
  const int64_t D = m_.c_.n_embd, hc = m_.p_.hc;
  const float eps = static_cast<float>(m_.c_.rms_norm_eps);
  q_->rms_norm(f32(kX, n, hc * D), m_.ones_streams, eps, f32(kFlat, n, hc * D));
  q_->matmul(w.fn, f32(kFlat, n, hc * D), f32(kMixes, n, w.fn.n_out), Tensor{});
  q_->hyper_pre({hc, m_.p_.sinkhorn, m_.p_.hc_eps}, f32(kX, n, hc * D), f32(kMixes, n, w.fn.n_out), w.base, w.scale,
                f32(kCollapsed, n, D), f32(kPost, n, hc), f32(kComb, n, hc * hc), Tensor{});
}

// kH (normed input) -> kOut.
void V4Runner::attention(const Layer& L, int32_t layer, int64_t n, backend::KvCache& kv) {
  const ModelConfig& c = m_.c_;
  const V4Params& p = m_.p_;
  const Groups& g = m_.g_;
  backend::Queue& q = *q_;
  const int64_t D = c.n_embd, H = c.n_head, hd = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const Tensor h = f32(kH, n, D), qa = f32(kQa, n, p.q_lora), qt = f32(kQ, n, H * hd), kvt = f32(kKv, n, hd),
               att = f32(kAtt, n, H * hd);
  q.matmul(L.q_a, h, qa, Tensor{});
  q.rms_norm(qa, L.q_a_norm, eps, qa);
  q.matmul(L.q_b, qa, qt, Tensor{});
  q.rms_norm(qt.reshaped(n * H, hd), m_.ones_head, eps, qt.reshaped(n * H, hd));
  const bool compressed = L.kind != LayerKind::kSliding;
  const Tensor& freq = compressed ? m_.inv_freq_compress : m_.inv_freq_main;
  const backend::RopeParams rope_q{H, hd, c.n_rot, backend::RopePairing::kInterleaved, true, false};
  q.rope(qt, rope_q, freq);
  q.matmul(L.kv, h, kvt, Tensor{});
  q.rms_norm(kvt, L.kv_norm, eps, kvt);
  q.rope(kvt, {1, hd, c.n_rot, backend::RopePairing::kInterleaved, true, false}, freq);
  q.store_kv(kv, g.window, layer, kvt, kvt);

  int comp_group = -1;
  int64_t rate = 0;
  Tensor selected;
  if (compressed) {
    const bool csa = L.kind == LayerKind::kCsa;
    rate = csa ? p.rate_csa : p.rate_hca;
    comp_group = csa ? g.csa_kv : g.hca_kv;
    const int64_t width = csa ? 2 * hd : hd;
    const Tensor ckv = f32(kCkv, n, width), cg = f32(kCgate, n, width);
    const backend::MatmulTarget proj[] = {{&L.comp.kv, ckv, {}}, {&L.comp.gate, cg, {}}};
    q.matmul_group(proj, h);
    q.store_kv(kv, csa ? g.csa_state : g.hca_state, layer, ckv, cg);
    q.compress_kv({rate, hd, csa, eps, c.n_rot}, kv, csa ? g.csa_state : g.hca_state, comp_group, layer, L.comp.ape,
                  L.comp.norm, m_.inv_freq_compress);
    if (csa) {
      const int64_t id = p.index_dim, ih = p.index_heads;
      const Tensor ikv = f32(kIkv, n, 2 * id), ig = f32(kIgate, n, 2 * id), qi = f32(kQi, n, ih * id),
                   iw = f32(kIw, n, ih);
      const backend::MatmulTarget iproj[] = {{&L.index_comp.kv, ikv, {}}, {&L.index_comp.gate, ig, {}}};
      q.matmul_group(iproj, h);
      q.store_kv(kv, g.csa_index_state, layer, ikv, ig);
      q.compress_kv({rate, id, true, eps, c.n_rot}, kv, g.csa_index_state, g.csa_index, layer, L.index_comp.ape,
                    L.index_comp.norm, m_.inv_freq_compress);
      q.matmul(L.index_q_b, qa, qi, Tensor{});
      q.rope(qi, {ih, id, c.n_rot, backend::RopePairing::kInterleaved, true, false}, m_.inv_freq_compress);
      q.matmul(L.index_w, h, iw, Tensor{});
      q.scale(iw, 1.0f / std::sqrt(static_cast<float>(ih)));
      selected = i32(kSel, n, p.index_topk);
      q.index_top_k({ih, id, rate, p.index_topk, 1.0f / std::sqrt(static_cast<float>(id))}, qi, iw, kv, g.csa_index,
                    layer, selected, Tensor{});
    }
  }
  q.sparse_attention({H, hd, 1.0f / std::sqrt(static_cast<float>(hd)), p.window, rate}, qt, kv, g.window, comp_group,
                     layer, L.sinks, selected, att);
  q.rope(att, {H, hd, c.n_rot, backend::RopePairing::kInterleaved, true, true}, freq);
  output_projection(L, n);
}

// kAtt (the heads' outputs, rope undone) -> kOut. Grouped: rows (t, g) of att viewed as
// [n * G, H * hd / G], sorted by group (prepare() uploaded the order), each group through its
// block of Woa, then back in (t, g) order: [n, G * o_lora], then Wob.
void V4Runner::output_projection(const Layer& L, int64_t n) {
  const V4Params& p = m_.p_;
  backend::Queue& q = *q_;
  const int64_t D = m_.c_.n_embd, H = m_.c_.n_head, hd = m_.c_.head_dim;
  const Tensor att = f32(kAtt, n, H * hd);
  const int64_t G = p.o_groups, gin = H * hd / G;
  const Tensor xs = f32(kGoXs, n * G, gin), ys = f32(kGoYs, n * G, p.o_lora);
  const Tensor order = i32(kGoOrder, 1, n * G), offsets = i32(kGoOffsets, 1, G + 1), ones = f32(kGoW, n * G, 1);
  q.moe_gather(att.reshaped(n * G, gin), order, 1, xs);
  const backend::GroupedTarget oa[] = {{L.o_a, ys}};
  q.grouped_matmul(oa, offsets, xs);
  q.moe_combine(ys, order, ones, f32(kGrouped, n * G, p.o_lora));
  q.matmul(L.o_b, f32(kGrouped, n, G * p.o_lora), f32(kOut, n, D), Tensor{});
}

// V4.1 attention, kH -> kOut: as V4's but with no per-head rescale of q, the window rows through
// FP8, and on CSA2 layers the shared compressed rows of the layer's KV source (csa2_owner_rows
// writes them on the source), its selection of them (index sources; the others reuse the last
// one in kSel) and the hierarchical candidates (kCand).
void V4Runner::attention_v41(const Layer& L, int32_t layer, int64_t n, backend::KvCache& kv) {
  const ModelConfig& c = m_.c_;
  const V4Params& p = m_.p_;
  const Groups& g = m_.g_;
  backend::Queue& q = *q_;
  const int64_t D = c.n_embd, H = c.n_head, hd = c.head_dim;
  const Tensor h = f32(kH, n, D), qa = f32(kQa, n, p.q_lora), qt = f32(kQ, n, H * hd), kvt = f32(kKv, n, hd),
               att = f32(kAtt, n, H * hd);
  const Tensor& freq = L.ratio > 0 ? m_.inv_freq_compress : m_.inv_freq_main;
  project_q_kv(L, n, freq);
  q.store_kv(kv, g.window, layer, kvt, kvt);
  if (L.ratio == 0) {
    q.sparse_attention({H, hd, 1.0f / std::sqrt(static_cast<float>(hd)), p.window, 0}, qt, kv, g.window, -1, layer,
                       L.sinks, Tensor{}, att);
  } else {
    const Csa2Groups& cg = g.of_ratio(L.ratio);
    if (L.kv_owner == layer) csa2_owner_rows(L, layer, n, kv);
    const Tensor selected = i32(kSel, n, p.index_topk);
    if (L.index_source) {
      const int64_t id = p.index_dim, ih = p.index_heads;
      const Tensor qi = f32(kQi, n, ih * id), iw = f32(kIw, n, ih);
      q.matmul(L.index_q_b, qa, qi, Tensor{});
      q.rope(qi, {ih, id, c.n_rot, backend::RopePairing::kInterleaved, true, false}, m_.inv_freq_compress);
      q.cache_round_trip(qi, backend::CacheFormat::kMxfp4, 32);
      q.matmul(L.index_w, h, iw, Tensor{});
      q.scale(iw, 1.0f / std::sqrt(static_cast<float>(id * ih)));
      const Tensor cand = L.candidates == backend::CandidateUse::kNone
                              ? Tensor{}
                              : i32(kCand, n, p.candidate_top_blocks);
      q.index_top_k({ih, id, L.ratio, p.index_topk, 1.0f, L.candidates, p.candidate_block, p.candidate_top_blocks}, qi,
                    iw, kv, cg.index, L.kv_owner, selected, cand);
    }
    q.sparse_attention({H, hd, 1.0f / std::sqrt(static_cast<float>(hd)), p.window, L.ratio, L.kv_owner}, qt, kv,
                       g.window, cg.kv, layer, L.sinks, selected, att);
  }
  q.rope(att, {H, hd, c.n_rot, backend::RopePairing::kInterleaved, true, true}, freq);
  output_projection(L, n);
}

// V4.1's queries kQ (q_a, its norm, q_b; no per-head rescale; rope) from kH via the latent kQa,
// and the layer's own K = V rows kKv (kv_norm(Wkv x), rope, FP8), at the batch's positions.
void V4Runner::project_q_kv(const Layer& L, int64_t n, const Tensor& freq) {
  const ModelConfig& c = m_.c_;
  const int64_t D = c.n_embd, H = c.n_head, hd = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  backend::Queue& q = *q_;
  const Tensor h = f32(kH, n, D), qa = f32(kQa, n, m_.p_.q_lora), qt = f32(kQ, n, H * hd), kvt = f32(kKv, n, hd);
  q.matmul(L.q_a, h, qa, Tensor{});
  q.rms_norm(qa, L.q_a_norm, eps, qa);
  q.matmul(L.q_b, qa, qt, Tensor{});
  q.rope(qt, {H, hd, c.n_rot, backend::RopePairing::kInterleaved, true, false}, freq);
  q.matmul(L.kv, h, kvt, Tensor{});
  q.rms_norm(kvt, L.kv_norm, eps, kvt);
  q.rope(kvt, {1, hd, c.n_rot, backend::RopePairing::kInterleaved, true, false}, freq);
  q.cache_round_trip(kvt, backend::CacheFormat::kFp8E4M3, 32);
}

// A CSA2 source's rows for the entries the batch closes: the latent (ratio 1: RMSNorm(Wkv x) of
// each token; above: the softmax-gated pool of its ratio tokens, through the pending-token
// state), whence the compressed row (rope at the entry's first position, NVFP4) and the index
// key (RMSNorm(Wk latent), rope, MXFP4).
void V4Runner::csa2_owner_rows(const Layer& L, int32_t layer, int64_t n, backend::KvCache& kv) {
  const ModelConfig& c = m_.c_;
  const V4Params& p = m_.p_;
  const Csa2Groups& cg = m_.g_.of_ratio(L.ratio);
  backend::Queue& q = *q_;
  const int64_t D = c.n_embd, hd = c.head_dim, id = p.index_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const Tensor h = f32(kH, n, D), latent = f32(kLatent, n, hd), ik = f32(kIk, n, id);
  if (L.ratio == 1) {
    q.matmul(L.comp.kv, h, latent, Tensor{});
    q.rms_norm(latent, L.comp.norm, eps, latent);
  } else {
    const Tensor ckv = f32(kCkv, n, hd), cgate = f32(kCgate, n, hd);
    const backend::MatmulTarget proj[] = {{&L.comp.kv, ckv, {}}, {&L.comp.gate, cgate, {}}};
    q.matmul_group(proj, h);
    q.store_kv(kv, cg.state, layer, ckv, cgate);
    q.compress_rows({L.ratio, hd, false, eps, c.n_rot}, kv, cg.state, cg.kv, layer,
                    m_.zero_ape[static_cast<size_t>(L.ratio)], L.comp.norm, latent);
  }
  // The closing token is the entry's last: its first position is ratio - 1 before.
  const int64_t back = -(L.ratio - 1);
  q.matmul(L.index_wk, latent, ik, Tensor{});
  q.rms_norm(ik, L.index_k_norm, eps, ik);
  q.rope(ik, {1, id, c.n_rot, backend::RopePairing::kInterleaved, true, false, back}, m_.inv_freq_compress);
  q.cache_round_trip(ik, backend::CacheFormat::kMxfp4, 32);
  q.store_kv(kv, cg.index, layer, ik, ik);
  q.rope(latent, {1, hd, c.n_rot, backend::RopePairing::kInterleaved, true, false, back}, m_.inv_freq_compress);
  q.cache_round_trip(latent, backend::CacheFormat::kNvfp4, 16);
  q.store_kv(kv, cg.kv, layer, latent, latent);
}

// kH -> kOut.
void V4Runner::moe(const Layer& L, int32_t layer, int64_t n, std::span<const int32_t> tokens) {
  const V4Params& p = m_.p_;
  const int64_t D = m_.c_.n_embd, k = L.n_used, rows = n * k, F = p.n_ff;
  backend::Queue& q = *q_;
  const Tensor h = f32(kH, n, D), router = f32(kRouter, n, L.n_expert), ids = i32(kIds, n, k), w = f32(kW, n, k);
  q.matmul(L.router, h, router, Tensor{});
  Tensor fixed;
  if (L.hash) {
    // Host ids per layer: an upload's source stays untouched until the step's sync.
    std::vector<int32_t>& host = host_fixed_[static_cast<size_t>(layer)];
    host.resize(static_cast<size_t>(rows));
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(L.tid2eid.begin() + static_cast<int64_t>(tokens[static_cast<size_t>(t)]) * k, k, host.begin() + t * k);
    }
    fixed = i32(kFixed, n, k);
    q.upload(host.data(), fixed);
  }
  q.route_sqrt_softplus(router, L.router_bias, fixed, k, p.routed_scale, ids, w);
  const Tensor order = i32(kOrder, 1, rows), offsets = i32(kOffsets, 1, L.n_expert + 1);
  const Tensor xs = f32(kXs, rows, D), ys = f32(kYs, rows, D), gate = f32(kGate, rows, F), up = f32(kUp, rows, F);
  q.moe_dispatch(ids, L.n_expert, order, offsets);
  q.moe_gather(h, order, k, xs);
  const backend::GroupedTarget gate_up[] = {{L.gate, gate}, {L.up, up}};
  q.grouped_matmul(gate_up, offsets, xs);
  q.clamp(gate, -INFINITY, p.swiglu_limit);
  q.clamp(up, -p.swiglu_limit, p.swiglu_limit);
  q.gated_activation(backend::Activation::kSilu, gate, up);
  const backend::GroupedTarget down[] = {{L.down, ys}};
  q.grouped_matmul(down, offsets, gate);
  const Tensor out = f32(kOut, n, D);
  q.moe_combine(ys, order, w, out);
  // Shared expert.
  const Tensor sg = f32(kSGate, n, F), su = f32(kSUp, n, F), so = f32(kSOut, n, D);
  const backend::MatmulTarget sgu[] = {{&L.shared_gate, sg, {}}, {&L.shared_up, su, {}}};
  q.matmul_group(sgu, h);
  q.clamp(sg, -INFINITY, p.swiglu_limit);
  q.clamp(su, -p.swiglu_limit, p.swiglu_limit);
  q.gated_activation(backend::Activation::kSilu, sg, su);
  q.matmul(L.shared_down, sg, so, Tensor{});
  q.add(out, so);
}

// Inputs and scratch of a pass; the per-step uploads every block reads.
Status V4Runner::prepare(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences,
                         backend::KvCache& kv, int n_groups) {
  const ModelConfig& c = m_.c_;
  const V4Params& p = m_.p_;
  n_logit_rows_ = 0;
  n_streams_ = 0;
  DI_RETURN_IF_ERROR(inputs_.build(tokens, sequences, kv, n_groups, c.n_vocab));
  const int64_t n = inputs_.n_tokens(), n_rows = inputs_.n_output_rows();
  const int64_t D = c.n_embd, hc = p.hc, H = c.n_head, hd = c.head_dim, k = std::max(p.n_used, p.dspark_used);
  const int64_t n_experts = std::max(p.n_expert, p.dspark_experts);
  const int64_t taps = m_.dspark ? n * static_cast<int64_t>(p.dspark_targets.size()) * D : 0;
  const int64_t sizes[kNumSlots] = {
      n * hc * D, n * hc * D, n * hc * D, n * (2 + hc) * hc, n * hc, n * hc * hc, n * D, n * D, n * D, n * p.q_lora,
      n * H * hd, n * hd, n * H * hd, n * p.o_groups * p.o_lora, n * 2 * hd, n * 2 * hd, n * 2 * p.index_dim,
      n * 2 * p.index_dim, n * p.index_heads * p.index_dim, n * p.index_heads, n * p.index_topk, n * n_experts, n * k,
      n * k, n * k, n * k, n_experts + 1, n * k * D, n * k * p.n_ff, n * k * p.n_ff, n * k * D, n * p.n_ff,
      n * p.n_ff, n * D, n * p.o_groups, p.o_groups + 1, n * p.o_groups, n * H * hd, n * p.o_groups * p.o_lora,
      n_rows * D, n_rows * c.n_vocab, n * hc, n, n,
      n * hc, n * hc, n_rows * hc, n * hd, n * p.index_dim, n * p.candidate_top_blocks,
      n * (p.engram_max_ngram - 1) * p.engram_heads, n * (p.engram_max_ngram - 1) * p.engram_heads * p.engram_head_dim,
      p.engram_layers.empty() ? 0 : n * (hc + 1) * D, n * hc, taps, taps / std::max<int64_t>(D, 1), taps,
      n, n * p.dspark_rank, n * c.n_vocab};
  for (int s = 0; s < kNumSlots; ++s) DI_RETURN_IF_ERROR(ensure(s, sizes[s]));
  backend::Queue& q = *q_;
  DI_RETURN_IF_ERROR(q.set_batch(inputs_.batch()));
  // The identity order over n * hc rows: moe_gather with k = hc repeats each of n rows hc times.
  host_bcast_.resize(static_cast<size_t>(n * hc));
  std::iota(host_bcast_.begin(), host_bcast_.end(), 0);
  q.upload(host_bcast_.data(), i32(kBcast, 1, n * hc));
  // The grouped output projection's order (rows (t, g) sorted by group), offsets and unit
  // weights, the same for every layer.
  const int64_t G = p.o_groups;
  host_go_.resize(static_cast<size_t>(n * G + G + 1));
  for (int64_t gi = 0; gi < G; ++gi) {
    for (int64_t t = 0; t < n; ++t) host_go_[static_cast<size_t>(gi * n + t)] = static_cast<int32_t>(t * G + gi);
  }
  for (int64_t gi = 0; gi <= G; ++gi) host_go_[static_cast<size_t>(n * G + gi)] = static_cast<int32_t>(gi * n);
  q.upload(host_go_.data(), i32(kGoOrder, 1, n * G));
  q.upload(host_go_.data() + n * G, i32(kGoOffsets, 1, G + 1));
  host_ones_.assign(static_cast<size_t>(n * G), 1.0f);
  q.upload(host_ones_.data(), f32(kGoW, n * G, 1));
  host_fixed_.resize(m_.layers.size());
  return {};
}

// One block over the streams kX (attention site, then MoE site).
void V4Runner::block(const Layer& L, int32_t layer, int64_t n, std::span<const int32_t> tokens, backend::KvCache& kv) {
  const int64_t D = m_.c_.n_embd, hc = m_.p_.hc;
  const float eps = static_cast<float>(m_.c_.rms_norm_eps);
  const backend::HyperParams hp{hc, m_.p_.sinkhorn, m_.p_.hc_eps};
  backend::Queue& q = *q_;
  // The sublayer's output kOut mixed into the streams: kX <- hyper_post(kX, kOut).
  const auto mix_back = [&] {
    q.hyper_post(hp, f32(kX, n, hc * D), f32(kOut, n, D), f32(kPost, n, hc), f32(kComb, n, hc * hc),
                 f32(kX2, n, hc * D));
    std::swap(buffers_[kX], buffers_[kX2]);
  };
  hyper_site(L.attn_hc, n);
  q.rms_norm(f32(kCollapsed, n, D), L.attn_norm, eps, f32(kH, n, D));
  attention(L, layer, n, kv);
  mix_back();
  hyper_site(L.ffn_hc, n);
  q.rms_norm(f32(kCollapsed, n, D), L.ffn_norm, eps, f32(kH, n, D));
  moe(L, layer, n, tokens);
  mix_back();
}

// V4.1's block: each site's weights come from its own input streams, but its sublayer reads the
// streams collapsed with the previous site's pre weights (kPrePrev; the first site's: stream 0);
// the output mixes back with the site's own post and comb.
void V4Runner::block_single_pass(const Layer& L, int32_t layer, int64_t n, std::span<const int32_t> tokens,
                                 backend::KvCache& kv) {
  if (L.engram >= 0) engram(L, n);
  if (m_.dspark) record_tap(layer, n);
  single_pass_site(L.attn_hc, L.attn_norm, n);
  attention_v41(L, layer, n, kv);
  mix_back(n);
  single_pass_site(L.ffn_hc, L.ffn_norm, n);
  moe(L, layer, n, tokens);
  mix_back(n);
}

// A V4.1 site over the streams kX: its own weights (pre into kPre, post, comb), and kH the
// streams collapsed with the previous site's pre (kPrePrev, which then becomes this site's),
// RMS-normed with `norm`.
void V4Runner::single_pass_site(const HyperWeights& w, const Tensor& norm, int64_t n) {
  const int64_t D = m_.c_.n_embd, hc = m_.p_.hc;
  const float eps = static_cast<float>(m_.c_.rms_norm_eps);
  backend::Queue& q = *q_;
  q.rms_norm(f32(kX, n, hc * D), m_.ones_streams, eps, f32(kFlat, n, hc * D));
  q.matmul(w.fn, f32(kFlat, n, hc * D), f32(kMixes, n, w.fn.n_out), Tensor{});
  q.hyper_pre({hc, m_.p_.sinkhorn, m_.p_.hc_eps}, f32(kX, n, hc * D), f32(kMixes, n, w.fn.n_out), w.base, w.scale,
              f32(kCollapsed, n, D), f32(kPost, n, hc), f32(kComb, n, hc * hc), f32(kPre, n, hc));
  // Row t * hc + s of the streams is stream s of token t: a weighted sum per token.
  q.moe_combine(f32(kX, n * hc, D), i32(kBcast, 1, n * hc), f32(kPrePrev, n, hc), f32(kCollapsed, n, D));
  std::swap(buffers_[kPre], buffers_[kPrePrev]);
  q.rms_norm(f32(kCollapsed, n, D), norm, eps, f32(kH, n, D));
}

// The sublayer's output kOut mixed into the streams with the site's post and comb:
// kX <- hyper_post(kX, kOut).
void V4Runner::mix_back(int64_t n) {
  const int64_t D = m_.c_.n_embd, hc = m_.p_.hc;
  q_->hyper_post({hc, m_.p_.sinkhorn, m_.p_.hc_eps}, f32(kX, n, hc * D), f32(kOut, n, D), f32(kPost, n, hc),
                 f32(kComb, n, hc * hc), f32(kX2, n, hc * D));
  std::swap(buffers_[kX], buffers_[kX2]);
}

// Every Engram layer's table rows for the batch's tokens, on the host: per token, the classes of
// it and the tokens before it (from the pass or the sequence's lookback; the pad token's class
// before the sequence's start), each n-gram's products with the layer's multipliers folded by
// xor, taken modulo each head's prime, plus the head's offset.
Status V4Runner::engram_ids(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences) {
  const V4Params& p = m_.p_;
  const auto& classes = m_.token_classes.of_token;
  const int64_t max_n = p.engram_max_ngram, heads = p.engram_heads, hash_heads = (max_n - 1) * heads;
  DI_ICHECK(max_n <= 16);
  const int64_t pad = classes[static_cast<size_t>(p.engram_pad_token)];
  host_engram_.resize(m_.engram_hash.size());
  for (auto& h : host_engram_) h.resize(tokens.size() * static_cast<size_t>(hash_heads));
  std::array<int64_t, 16> gram{};  // hf_config bounds the order at 16
  int64_t row = 0;
  for (const BatchSequence& b : sequences) {
    const int64_t need = std::min(max_n - 1, b.first_position);
    if (static_cast<int64_t>(b.lookback.size()) < need) {
      return invalid_argument("DeepSeek V4.1's Engram needs the " + std::to_string(need) + " tokens before position " +
                              std::to_string(b.first_position) + "; the pass has " + std::to_string(b.lookback.size()));
    }
    for (int64_t i = 0; i < b.n_tokens; ++i, ++row) {
      for (int64_t shift = 0; shift < max_n; ++shift) {
        const int64_t at = i - shift;  // within the pass when >= 0
        int32_t token = -1;
        if (at >= 0) {
          token = tokens[static_cast<size_t>(row - shift)];
        } else if (b.first_position + at >= 0) {
          token = b.lookback[b.lookback.size() - static_cast<size_t>(-at)];
        }
        gram[static_cast<size_t>(shift)] = token < 0 ? pad : classes[static_cast<size_t>(token)];
      }
      for (size_t e = 0; e < m_.engram_hash.size(); ++e) {
        const EngramHash& h = m_.engram_hash[e];
        int32_t* out = host_engram_[e].data() + row * hash_heads;
        int64_t rolling = gram[0] * h.multipliers[0];
        for (int64_t shift = 1; shift < max_n; ++shift) {
          rolling ^= gram[static_cast<size_t>(shift)] * h.multipliers[static_cast<size_t>(shift)];
          for (int64_t head = 0; head < heads; ++head) {
            const auto j = static_cast<size_t>((shift - 1) * heads + head);
            out[j] = static_cast<int32_t>(rolling % h.primes[j] + h.offsets[j]);
          }
        }
      }
    }
  }
  return {};
}

// V4.1's Engram before the attention site: the layer's table rows (engram_ids), projected to a
// key per stream and one value, gate each stream's update (Queue::engram_mix).
void V4Runner::engram(const Layer& L, int64_t n) {
  const V4Params& p = m_.p_;
  const int64_t D = m_.c_.n_embd, hc = p.hc, hash_heads = (p.engram_max_ngram - 1) * p.engram_heads;
  backend::Queue& q = *q_;
  const Tensor ids = i32(kEngIds, n, hash_heads), emb = f32(kEngEmb, n, hash_heads * p.engram_head_dim),
               kvx = f32(kEngKv, n, (hc + 1) * D);
  q.upload(host_engram_[static_cast<size_t>(L.engram)].data(), ids);
  q.gather_rows(L.engram_table, ids, emb);
  q.matmul(L.engram_wkv, emb, kvx, Tensor{});
  q.engram_mix(f32(kX, n, hc * D), kvx, L.engram_weight, static_cast<float>(m_.c_.rms_norm_eps));
}

// V4.1's end: the kept rows' streams collapsed with the last site's pre weights, a norm and the
// lm_head, downloaded.
void V4Runner::head_single_pass(int64_t n_rows) {
  const ModelConfig& c = m_.c_;
  const int64_t D = c.n_embd, hc = m_.p_.hc, n = inputs_.n_tokens();
  const float eps = static_cast<float>(c.rms_norm_eps);
  backend::Queue& q = *q_;
  const Tensor xr = f32(kFlat, n_rows, hc * D), pre = f32(kPreRows, n_rows, hc), hr = f32(kHr, n_rows, D),
               logits = f32(kLogits, n_rows, c.n_vocab);
  q.gather_output_rows(f32(kX, n, hc * D), xr);
  q.gather_output_rows(f32(kPrePrev, n, hc), pre);
  q.moe_combine(f32(kFlat, n_rows * hc, D), i32(kBcast, 1, n_rows * hc), pre, hr);
  q.rms_norm(hr, m_.final_norm, eps, hr);
  q.matmul(m_.lm_head, hr, logits, Tensor{});
  if (logits_.size() < static_cast<size_t>(n_rows * c.n_vocab)) logits_.resize(static_cast<size_t>(n_rows * c.n_vocab));
  q.download(logits, logits_.data());
}

// The kept rows of the streams kX through a hyper head, a norm and the lm_head, downloaded.
void V4Runner::head(const HyperWeights& hc_w, const Tensor& norm, int64_t n_rows) {
  const ModelConfig& c = m_.c_;
  const int64_t D = c.n_embd, hc = m_.p_.hc, n = inputs_.n_tokens();
  const float eps = static_cast<float>(c.rms_norm_eps);
  const backend::HyperParams hp{hc, m_.p_.sinkhorn, m_.p_.hc_eps};
  backend::Queue& q = *q_;
  const Tensor xr = f32(kFlat, n_rows, hc * D), hr = f32(kHr, n_rows, D), logits = f32(kLogits, n_rows, c.n_vocab);
  q.gather_output_rows(f32(kX, n, hc * D), xr);
  q.rms_norm(xr, m_.ones_streams, eps, f32(kX2, n_rows, hc * D));
  q.matmul(hc_w.fn, f32(kX2, n_rows, hc * D), f32(kMixes, n_rows, hc), Tensor{});
  q.hyper_pre(hp, xr, f32(kMixes, n_rows, hc), hc_w.base, hc_w.scale, hr, Tensor{}, Tensor{}, Tensor{});
  q.rms_norm(hr, norm, eps, hr);
  q.matmul(m_.lm_head, hr, logits, Tensor{});
  if (logits_.size() < static_cast<size_t>(n_rows * c.n_vocab)) logits_.resize(static_cast<size_t>(n_rows * c.n_vocab));
  q.download(logits, logits_.data());
}

Status V4Runner::finish() {
  DI_RETURN_IF_ERROR(q_->sync());
  n_logit_rows_ = inputs_.n_output_rows();
  n_streams_ = inputs_.n_tokens();
  return {};
}

Status V4Runner::run(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences, backend::KvCache& kv) {
  DI_RETURN_IF_ERROR(prepare(tokens, sequences, kv, m_.g_.count));
  const int64_t n = inputs_.n_tokens(), n_rows = inputs_.n_output_rows();
  const int64_t D = m_.c_.n_embd, hc = m_.p_.hc;
  backend::Queue& q = *q_;
  // Every stream starts as the token's embedding: row t * hc + s of the streams viewed as
  // [n * hc, D] is row t of the embeddings.
  q.embed(m_.embed, f32(kCollapsed, n, D));
  q.moe_gather(f32(kCollapsed, n, D), i32(kBcast, 1, n * hc), hc, f32(kX, n * hc, D));
  if (!m_.p_.engram_layers.empty()) DI_RETURN_IF_ERROR(engram_ids(tokens, sequences));
  const auto n_targets = static_cast<int64_t>(m_.p_.dspark_targets.size());
  if (m_.dspark) {
    // The DSpark features: per target layer the mean of its streams, then token-major.
    host_mean_w_.assign(static_cast<size_t>(n * hc), 1.0f / static_cast<float>(hc));
    q.upload(host_mean_w_.data(), f32(kMeanW, n, hc));
    host_tap_order_.resize(static_cast<size_t>(n * n_targets));
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < n_targets; ++j) host_tap_order_[static_cast<size_t>(t * n_targets + j)] = static_cast<int32_t>(j * n + t);
    }
    q.upload(host_tap_order_.data(), i32(kTapOrder, 1, n * n_targets));
  }
  if (m_.p_.v41) {
    // The first site's input is stream 0.
    host_pre0_.assign(static_cast<size_t>(n * hc), 0.0f);
    for (int64_t t = 0; t < n; ++t) host_pre0_[static_cast<size_t>(t * hc)] = 1.0f;
    q.upload(host_pre0_.data(), f32(kPrePrev, n, hc));
  }
  for (int32_t l = 0; l < static_cast<int32_t>(m_.c_.n_layer); ++l) {
    const Layer& L = m_.layers[static_cast<size_t>(l)];
    if (m_.p_.v41) {
      block_single_pass(L, l, n, tokens, kv);
    } else {
      block(L, l, n, tokens, kv);
    }
  }
  if (m_.dspark) {
    q.moe_gather(f32(kTaps, n * n_targets, D), i32(kTapOrder, 1, n * n_targets), 1, f32(kTapsCat, n * n_targets, D));
  }
  if (n_rows > 0) {
    if (m_.p_.v41) {
      head_single_pass(n_rows);
    } else {
      head(m_.head_hc, m_.final_norm, n_rows);
    }
  }
  DI_RETURN_IF_ERROR(finish());
  n_taps_ = m_.dspark ? n : 0;
  return {};
}

// A DSpark target layer's feature (the streams entering its attention site, averaged) into its
// rows of kTaps (layer-major: [targets * n, n_embd]).
void V4Runner::record_tap(int32_t layer, int64_t n) {
  const auto& targets = m_.p_.dspark_targets;
  const auto it = std::ranges::find(targets, layer);
  if (it == targets.end()) return;
  const int64_t D = m_.c_.n_embd, hc = m_.p_.hc, j = it - targets.begin();
  const Tensor taps = f32(kTaps, n * static_cast<int64_t>(targets.size()), D);
  q_->moe_combine(f32(kX, n * hc, D), i32(kBcast, 1, n * hc), f32(kMeanW, n, hc), taps.view_rows(j * n, n));
}

// DSpark's context rows: the source pass's features at `rows` through main_proj and main_norm,
// then per stage its K=V row (kv_norm(Wkv x), rope, FP8) at the row's position.
Status V4Runner::run_dspark_observe(std::span<const int32_t> rows, const V4Runner& source,
                                    std::span<const BatchSequence> sequences, backend::KvCache& kv) {
  const Dspark& d = *m_.dspark;
  const ModelConfig& c = m_.c_;
  const int64_t D = c.n_embd, hd = c.head_dim, width = static_cast<int64_t>(m_.p_.dspark_targets.size()) * D;
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (int32_t r : rows) {
    if (r < 0 || r >= source.n_taps_) {
      return invalid_argument("DSpark context row " + std::to_string(r) + " of a pass that left " +
                              std::to_string(source.n_taps_));
    }
  }
  const int64_t n_src = source.n_taps_;
  const Tensor src = source.buffers_[kTapsCat].tensor(DType::kF32, n_src, width);
  host_rows_.assign(rows.begin(), rows.end());
  host_prev_.assign(rows.size(), 0);  // tokens: unused by these ops, but a pass needs ids
  DI_RETURN_IF_ERROR(prepare(host_prev_, sequences, kv, 1));
  const int64_t n = inputs_.n_tokens();
  DI_RETURN_IF_ERROR(ensure(kFlat, n * width));
  backend::Queue& q = *q_;
  q.upload(host_rows_.data(), i32(kMtpRows, 1, n));
  q.moe_gather(src, i32(kMtpRows, 1, n), 1, f32(kFlat, n, width));
  q.matmul(d.main_proj, f32(kFlat, n, width), f32(kH, n, D), Tensor{});
  q.rms_norm(f32(kH, n, D), d.main_norm, eps, f32(kH, n, D));
  for (int32_t s = 0; s < static_cast<int32_t>(d.stages.size()); ++s) {
    const Layer& L = d.stages[static_cast<size_t>(s)];
    const Tensor kvt = f32(kKv, n, hd);
    q.matmul(L.kv, f32(kH, n, D), kvt, Tensor{});
    q.rms_norm(kvt, L.kv_norm, eps, kvt);
    q.rope(kvt, {1, hd, c.n_rot, backend::RopePairing::kInterleaved, true, false}, m_.inv_freq_main);
    q.cache_round_trip(kvt, backend::CacheFormat::kFp8E4M3, 32);
    q.store_kv(kv, 0, s, kvt, kvt);
  }
  return finish();
}

// One DSpark stage over the blocks' streams: V4.1's single-pass block, its attention over the
// stage's context rows and the block's own rows (Queue::block_attention).
void V4Runner::dspark_stage(const Layer& L, int32_t stage, int64_t n, std::span<const int32_t> tokens,
                            backend::KvCache& kv) {
  const ModelConfig& c = m_.c_;
  const V4Params& p = m_.p_;
  const int64_t H = c.n_head, hd = c.head_dim;
  backend::Queue& q = *q_;
  single_pass_site(L.attn_hc, L.attn_norm, n);
  project_q_kv(L, n, m_.inv_freq_main);
  const Tensor qt = f32(kQ, n, H * hd), kvt = f32(kKv, n, hd), att = f32(kAtt, n, H * hd);
  q.block_attention({H, hd, 1.0f / std::sqrt(static_cast<float>(hd)), p.window, p.dspark_block}, qt, kv, 0, stage, kvt,
                    L.sinks, att);
  q.rope(att, {H, hd, c.n_rot, backend::RopePairing::kInterleaved, true, true}, m_.inv_freq_main);
  output_projection(L, n);
  mix_back(n);
  single_pass_site(L.ffn_hc, L.ffn_norm, n);
  moe(L, stage, n, tokens);
  mix_back(n);
}

// DSpark's blocks: [anchor, noise...] per sequence through the stages; the last stage's output
// collapsed, normed and through the target's lm_head; then slot by slot the Markov bias of the
// slot before's token (the anchor first) is added and the best token taken, which the next
// slot's bias reads; each slot's confidence from its normed output and that token's Markov
// embedding.
Status V4Runner::run_dspark_block(std::span<const int32_t> anchors, std::span<const BatchSequence> sequences,
                                  backend::KvCache& kv) {
  const Dspark& d = *m_.dspark;
  const ModelConfig& c = m_.c_;
  const V4Params& p = m_.p_;
  const int64_t B = p.dspark_block, n_seq = static_cast<int64_t>(sequences.size());
  if (static_cast<int64_t>(anchors.size()) != n_seq) return invalid_argument("one DSpark anchor per sequence");
  for (const BatchSequence& b : sequences) {
    if (b.n_tokens != B) {
      return invalid_argument("a DSpark block has " + std::to_string(B) + " rows, not " + std::to_string(b.n_tokens));
    }
  }
  std::vector<int32_t>& tokens = host_rows_;
  tokens.assign(static_cast<size_t>(n_seq * B), static_cast<int32_t>(p.dspark_noise));
  for (int64_t i = 0; i < n_seq; ++i) tokens[static_cast<size_t>(i * B)] = anchors[static_cast<size_t>(i)];
  DI_RETURN_IF_ERROR(prepare(tokens, sequences, kv, 1));
  const int64_t n = inputs_.n_tokens(), D = c.n_embd, hc = p.hc, R = p.dspark_rank, V = c.n_vocab;
  // Every row is an output, whatever the sequences' logits modes.
  DI_RETURN_IF_ERROR(ensure(kHr, n * D));
  DI_RETURN_IF_ERROR(ensure(kLogits, n * V));
  const float eps = static_cast<float>(c.rms_norm_eps);
  backend::Queue& q = *q_;
  q.embed(m_.embed, f32(kCollapsed, n, D));
  q.moe_gather(f32(kCollapsed, n, D), i32(kBcast, 1, n * hc), hc, f32(kX, n * hc, D));
  host_pre0_.assign(static_cast<size_t>(n * hc), 0.0f);
  for (int64_t t = 0; t < n; ++t) host_pre0_[static_cast<size_t>(t * hc)] = 1.0f;
  q.upload(host_pre0_.data(), f32(kPrePrev, n, hc));
  for (int32_t s = 0; s < static_cast<int32_t>(d.stages.size()); ++s) {
    dspark_stage(d.stages[static_cast<size_t>(s)], s, n, tokens, kv);
  }
  // Every row is an output: normed [n, D] and base logits [n, V].
  const Tensor hr = f32(kHr, n, D), logits = f32(kLogits, n, V);
  q.moe_combine(f32(kX, n * hc, D), i32(kBcast, 1, n * hc), f32(kPrePrev, n, hc), hr);
  q.rms_norm(hr, d.norm, eps, hr);
  q.matmul(m_.lm_head, hr, logits, Tensor{});
  logits_.resize(static_cast<size_t>(n * V));
  dspark_hidden_.resize(static_cast<size_t>(n * D));
  q.download(logits, logits_.data());
  q.download(hr, dspark_hidden_.data());
  DI_RETURN_IF_ERROR(q.sync());
  // Slot by slot: the Markov bias of each block's previous token.
  dspark_drafts_.assign(static_cast<size_t>(n), 0);
  dspark_confidence_.assign(static_cast<size_t>(n), 0.0f);
  host_prev_.assign(anchors.begin(), anchors.end());
  std::vector<float>& bias = host_markov_bias_;
  std::vector<float>& embedding = host_markov_e_;
  bias.resize(static_cast<size_t>(n_seq * V));
  embedding.resize(static_cast<size_t>(n_seq * R));
  const Tensor prev = i32(kPrevIds, n_seq, 1), e = f32(kMarkovE, n_seq, R), bias_t = f32(kMarkovBias, n_seq, V);
  for (int64_t k = 0; k < B; ++k) {
    q.upload(host_prev_.data(), prev);
    q.gather_rows(d.markov_embed, prev, e);
    q.matmul(d.markov_head, e, bias_t, Tensor{});
    q.download(bias_t, bias.data());
    q.download(e, embedding.data());
    DI_RETURN_IF_ERROR(q.sync());
    for (int64_t i = 0; i < n_seq; ++i) {
      const int64_t row = i * B + k;
      float* l = logits_.data() + row * V;
      const float* b = bias.data() + i * V;
      int32_t best = 0;
      for (int64_t v = 0; v < V; ++v) {
        l[v] += b[v];
        if (l[v] > l[best]) best = static_cast<int32_t>(v);
      }
      // Confidence: proj . [normed output ; Markov embedding of the previous token].
      double acc = 0;
      for (int64_t j = 0; j < D; ++j) acc += static_cast<double>(d.confidence[static_cast<size_t>(j)]) * dspark_hidden_[static_cast<size_t>(row * D + j)];
      for (int64_t j = 0; j < R; ++j) acc += static_cast<double>(d.confidence[static_cast<size_t>(D + j)]) * embedding[static_cast<size_t>(i * R + j)];
      dspark_confidence_[static_cast<size_t>(row)] = static_cast<float>(acc);
      dspark_drafts_[static_cast<size_t>(row)] = best;
      host_prev_[static_cast<size_t>(i)] = best;
    }
  }
  n_logit_rows_ = n;
  n_streams_ = 0;
  return {};
}

Status V4Runner::run_mtp(std::span<const int32_t> tokens, std::span<const int32_t> hidden_rows, const V4Runner& source,
                         std::span<const BatchSequence> sequences, backend::KvCache& kv) {
  DI_ICHECK(m_.mtp.has_value());
  const Mtp& t = *m_.mtp;
  if (hidden_rows.size() != tokens.size()) {
    return invalid_argument(std::to_string(tokens.size()) + " MTP rows with " + std::to_string(hidden_rows.size()) +
                            " hidden-state rows");
  }
  for (int32_t r : hidden_rows) {
    if (r < 0 || r >= source.n_streams_) {
      return invalid_argument("MTP row reads hidden state " + std::to_string(r) + " of a pass that left " +
                              std::to_string(source.n_streams_));
    }
  }
  const int64_t D = m_.c_.n_embd, hc = m_.p_.hc;
  const float eps = static_cast<float>(m_.c_.rms_norm_eps);
  // The source's streams, read before prepare() may grow this runner's slots (when the source
  // is this runner, its kX keeps at least the rows the last pass left, which are all it reads).
  const int64_t n_src = source.n_streams_;
  const backend::DeviceBuffer& src_buffer = source.buffers_[kX];
  const Tensor src = src_buffer.tensor(DType::kF32, n_src, hc * D);
  const int64_t n_in = static_cast<int64_t>(tokens.size());
  if (&source == this && n_in > n_src) {
    return invalid_argument("chained MTP rows outnumber the rows of the pass they chain on");
  }
  host_rows_.assign(hidden_rows.begin(), hidden_rows.end());
  DI_RETURN_IF_ERROR(prepare(tokens, sequences, kv, 1));
  const int64_t n = inputs_.n_tokens(), n_rows = inputs_.n_output_rows();
  backend::Queue& q = *q_;
  // h = h_proj(hnorm(H)) per stream, H the source's rows.
  q.upload(host_rows_.data(), i32(kMtpRows, 1, n));
  q.moe_gather(src, i32(kMtpRows, 1, n), 1, f32(kFlat, n, hc * D));
  q.rms_norm(f32(kFlat, n * hc, D), t.hnorm, eps, f32(kFlat, n * hc, D));
  q.matmul(t.h_proj, f32(kFlat, n * hc, D), f32(kX, n * hc, D), Tensor{});
  // + e_proj(enorm(embed(token))) on every stream, zero for rows at position 0.
  host_mask_.resize(static_cast<size_t>(n));
  int64_t row = 0;
  for (const BatchSequence& b : sequences) {
    for (int64_t i = 0; i < b.n_tokens; ++i) host_mask_[static_cast<size_t>(row++)] = b.first_position + i == 0 ? 0.0f : 1.0f;
  }
  q.upload(host_mask_.data(), f32(kMtpMask, n, 1));
  q.embed(m_.embed, f32(kCollapsed, n, D));
  q.rms_norm(f32(kCollapsed, n, D), t.enorm, eps, f32(kCollapsed, n, D));
  q.matmul(t.e_proj, f32(kCollapsed, n, D), f32(kH, n, D), Tensor{});
  q.moe_combine(f32(kH, n, D), i32(kBcast, 1, n), f32(kMtpMask, n, 1), f32(kOut, n, D));
  q.moe_gather(f32(kOut, n, D), i32(kBcast, 1, n * hc), hc, f32(kX2, n * hc, D));
  q.add(f32(kX, n * hc, D), f32(kX2, n * hc, D));
  block(t.block, 0, n, tokens, kv);
  if (n_rows > 0) head(t.head_hc, t.norm, n_rows);
  return finish();
}

std::span<const float> V4Runner::logits(int64_t i) const {
  const int64_t n_vocab = m_.c_.n_vocab;
  DI_ICHECK(i >= 0 && i < n_logit_rows_);
  return {logits_.data() + i * n_vocab, static_cast<size_t>(n_vocab)};
}

}  // namespace

Result<std::unique_ptr<Model>> create_deepseek_v4_model(std::unique_ptr<TensorSource> source,
                                                        backend::Backend& backend) {
  auto model = std::make_unique<V4Model>(std::move(source), backend);
  DI_RETURN_IF_ERROR(model->read_config());
  DI_RETURN_IF_ERROR(model->bind());
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace deepinfer
