#include "model/arch/decoder.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/packed.h"
#include "backend/cpu/quant.h"
#include "core/check.h"
#include "model/arch/hparams.h"

namespace deepinfer {

namespace {

using cpu::WeightMatrix;

struct Ffn {
  WeightMatrix gate, up, down;  // [n_ff, n_embd] x2, [n_embd, n_ff]
};

struct LayerWeights {
  std::vector<float> attn_norm;                     // [n_embd]
  WeightMatrix wq, wk, wv, wo;                      // [q_dim, n_embd], [kv_dim, n_embd] x2, [n_embd, q_dim]
  std::vector<float> q_norm, k_norm;                // [head_dim], with qk_norm
  std::vector<float> post_attn_norm;                // [n_embd], with sandwich norms
  std::vector<float> ffn_norm;                      // [n_embd]
  std::vector<float> post_ffn_norm;                 // [n_embd], with sandwich norms
  Ffn ffn;                                          // dense layers
  WeightMatrix router;                              // [n_expert, n_embd], MoE layers
  std::vector<Ffn> experts;                         // [n_expert] of [n_ff_expert, n_embd]...
  bool sliding = false;
};

class DecoderModel;

class DecoderRunner final : public BatchRunner {
 public:
  explicit DecoderRunner(const DecoderModel& model) : model_(model) {}

  Status run(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences, PagedKvCache& kv,
             ThreadPool& pool) override;
  std::span<const float> logits(int64_t row) const override;
  int64_t n_logit_rows() const override { return n_logit_rows_; }

 private:
  Status validate(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences,
                  const PagedKvCache& kv) const;
  void ensure_capacity(int64_t n);
  void attention_block(const LayerWeights& L, int64_t layer, int64_t n, std::span<const BatchSequence> sequences,
                       PagedKvCache& kv, ThreadPool& pool);
  void dense_ffn(const Ffn& f, int64_t n, int64_t n_ff, const float* in, float* out, ThreadPool& pool);
  void moe_ffn(const LayerWeights& L, int64_t n, ThreadPool& pool);

  const DecoderModel& model_;
  int64_t capacity_ = 0;
  // Per token: [n, n_embd] x3, [n, q_dim], [n, kv_dim] x2, [n, q_dim], [n, n_ff] x2.
  std::vector<float> x_, h_, out_, q_, k_, v_, att_, gate_, up_;
  // MoE: router outputs [n, n_expert], choices [n, k] (ids and weights), the tokens of one
  // expert gathered [n, n_embd] and its output [n, n_embd].
  std::vector<float> router_, route_w_, xe_, ye_;
  std::vector<int32_t> route_ids_, expert_tokens_;
  std::vector<float> expert_token_w_;
  std::vector<int32_t> positions_, token_seq_, logit_tokens_;
  std::vector<cpu::SequenceKv> seq_kv_;
  cpu::QuantScratch quant_scratch_;
  std::vector<float> logits_;  // [n_logit_rows_, n_vocab]
  int64_t n_logit_rows_ = 0;
};

class DecoderModel final : public Model {
 public:
  DecoderModel(std::unique_ptr<TensorSource> source, ModelConfig config, DecoderSpec spec)
      : config_(std::move(config)), spec_(std::move(spec)), source_(std::move(source)) {}

  const ModelConfig& config() const override { return config_; }
  const TensorSource& source() const override { return *source_; }
  std::unique_ptr<BatchRunner> new_batch_runner() const override { return std::make_unique<DecoderRunner>(*this); }

  Status bind_weights();
  void compute_rope_frequencies();

  ModelConfig config_;
  DecoderSpec spec_;
  std::unique_ptr<TensorSource> source_;
  WeightMatrix token_embd;  // [n_vocab, n_embd]
  WeightMatrix output;      // [n_vocab, n_embd], token_embd when tied
  std::vector<float> output_norm;
  std::vector<LayerWeights> layers;
  cpu::PackedWeights packs_;  // owns the packed copies the matrices above point into
  std::vector<float> inv_freq_global, inv_freq_sliding;  // [n_rot / 2]

 private:
  // Binds a matrix and gives it its packed copy (packed.h) where the kernels have one.
  Result<WeightMatrix> bind_matrix(const std::string& name, int64_t n_out, int64_t n_in);
  Result<std::vector<WeightMatrix>> bind_stacked(const std::string& name, int64_t n, int64_t n_out, int64_t n_in);
  Result<std::vector<float>> read_norm(const std::string& name, int64_t n) const;
  Status bind_experts(const std::string& blk, LayerWeights& L);
  bool has_tensor(const std::string& name) const { return source_->find(name) != nullptr; }
};

Status check_matrix_type(const TensorSource& source, const TensorView& t) {
  if (!cpu::quant_supported(t.dtype)) {
    return unimplemented(source.path() + ": tensor '" + t.name + "' has type " + std::string(dtype_name(t.dtype)) +
                         ", which the CPU backend does not support");
  }
  return {};
}

Result<WeightMatrix> DecoderModel::bind_matrix(const std::string& name, int64_t n_out, int64_t n_in) {
  DI_ASSIGN_OR_RETURN(const TensorView* t, source_->get(name));
  if (t->shape.size() != 2 || t->shape[0] != n_out || t->shape[1] != n_in) {
    return invalid_argument(source_->path() + ": tensor '" + name + "' has shape " + t->shape_string() +
                            ", but the architecture needs [" + std::to_string(n_out) + ", " +
                            std::to_string(n_in) + "]");
  }
  DI_RETURN_IF_ERROR(check_matrix_type(*source_, *t));
  WeightMatrix m{t->dtype, t->data, n_out, n_in};
  packs_.pack(m);
  return m;
}

// A [n, n_out, n_in] tensor as n matrices (GGUF stores all experts of a layer in one tensor).
Result<std::vector<WeightMatrix>> DecoderModel::bind_stacked(const std::string& name, int64_t n, int64_t n_out,
                                                             int64_t n_in) {
  DI_ASSIGN_OR_RETURN(const TensorView* t, source_->get(name));
  if (t->shape.size() != 3 || t->shape[0] != n || t->shape[1] != n_out || t->shape[2] != n_in) {
    return invalid_argument(source_->path() + ": tensor '" + name + "' has shape " + t->shape_string() +
                            ", but the architecture needs [" + std::to_string(n) + ", " + std::to_string(n_out) +
                            ", " + std::to_string(n_in) + "]");
  }
  DI_RETURN_IF_ERROR(check_matrix_type(*source_, *t));
  std::vector<WeightMatrix> out;
  const size_t matrix_bytes = static_cast<size_t>(n_out) * t->row_bytes();
  for (int64_t e = 0; e < n; ++e) {
    out.push_back({t->dtype, t->data + e * matrix_bytes, n_out, n_in});
    packs_.pack(out.back());
  }
  return out;
}

Result<std::vector<float>> DecoderModel::read_norm(const std::string& name, int64_t n) const {
  DI_ASSIGN_OR_RETURN(const TensorView* t, source_->get(name));
  if (t->n_elements() != n || t->shape.size() != 1) {
    return invalid_argument(source_->path() + ": tensor '" + name + "' has shape " + t->shape_string() +
                            ", but the architecture needs [" + std::to_string(n) + "]");
  }
  if (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16) {
    return unimplemented(source_->path() + ": tensor '" + name + "' has type " + std::string(dtype_name(t->dtype)) +
                         "; a norm must be f32, f16 or bf16");
  }
  std::vector<float> out(static_cast<size_t>(n));
  cpu::dequantize_row(t->dtype, t->data, out.data(), n);
  // In float32 as the reference does: (1 + w) is formed from the widened weight.
  for (float& w : out) w += spec_.norm_weight_offset;
  return out;
}

Status DecoderModel::bind_experts(const std::string& blk, LayerWeights& L) {
  const ModelConfig& c = config_;
  const int64_t n_exp = spec_.n_expert, n_ff = spec_.n_ff_expert;
  DI_ASSIGN_OR_RETURN(L.router, bind_matrix(blk + "ffn_gate_inp.weight", n_exp, c.n_embd));
  L.experts.resize(static_cast<size_t>(n_exp));
  if (has_tensor(blk + "ffn_gate_exps.weight")) {
    DI_ASSIGN_OR_RETURN(auto gate, bind_stacked(blk + "ffn_gate_exps.weight", n_exp, n_ff, c.n_embd));
    DI_ASSIGN_OR_RETURN(auto up, bind_stacked(blk + "ffn_up_exps.weight", n_exp, n_ff, c.n_embd));
    DI_ASSIGN_OR_RETURN(auto down, bind_stacked(blk + "ffn_down_exps.weight", n_exp, c.n_embd, n_ff));
    for (size_t e = 0; e < L.experts.size(); ++e) L.experts[e] = {gate[e], up[e], down[e]};
    return {};
  }
  for (int64_t e = 0; e < n_exp; ++e) {
    std::string id = ".";  // appended, not "." + to_string(e): GCC 12 warns falsely on that (-Wrestrict)
    id += std::to_string(e);
    id += ".weight";
    Ffn& f = L.experts[static_cast<size_t>(e)];
    DI_ASSIGN_OR_RETURN(f.gate, bind_matrix(blk + "ffn_gate_exps" + id, n_ff, c.n_embd));
    DI_ASSIGN_OR_RETURN(f.up, bind_matrix(blk + "ffn_up_exps" + id, n_ff, c.n_embd));
    DI_ASSIGN_OR_RETURN(f.down, bind_matrix(blk + "ffn_down_exps" + id, c.n_embd, n_ff));
  }
  return {};
}

Status DecoderModel::bind_weights() {
  const ModelConfig& c = config_;
  const int64_t q_dim = c.n_head * c.head_dim;
  const int64_t kv_dim = c.n_head_kv * c.head_dim;
  DI_ASSIGN_OR_RETURN(token_embd, bind_matrix("token_embd.weight", c.n_vocab, c.n_embd));
  DI_ASSIGN_OR_RETURN(output_norm, read_norm("output_norm.weight", c.n_embd));
  if (c.tied_embeddings) {
    output = token_embd;
  } else {
    DI_ASSIGN_OR_RETURN(output, bind_matrix("output.weight", c.n_vocab, c.n_embd));
  }
  layers.resize(static_cast<size_t>(c.n_layer));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    LayerWeights& L = layers[static_cast<size_t>(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    L.sliding = !spec_.layer_sliding.empty() && spec_.layer_sliding[static_cast<size_t>(l)];
    DI_ASSIGN_OR_RETURN(L.attn_norm, read_norm(b + "attn_norm.weight", c.n_embd));
    DI_ASSIGN_OR_RETURN(L.wq, bind_matrix(b + "attn_q.weight", q_dim, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.wk, bind_matrix(b + "attn_k.weight", kv_dim, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.wv, bind_matrix(b + "attn_v.weight", kv_dim, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.wo, bind_matrix(b + "attn_output.weight", c.n_embd, q_dim));
    if (spec_.qk_norm) {
      DI_ASSIGN_OR_RETURN(L.q_norm, read_norm(b + "attn_q_norm.weight", c.head_dim));
      DI_ASSIGN_OR_RETURN(L.k_norm, read_norm(b + "attn_k_norm.weight", c.head_dim));
    }
    DI_ASSIGN_OR_RETURN(L.ffn_norm, read_norm(b + "ffn_norm.weight", c.n_embd));
    if (spec_.sandwich_norms) {
      DI_ASSIGN_OR_RETURN(L.post_attn_norm, read_norm(b + "post_attention_norm.weight", c.n_embd));
      DI_ASSIGN_OR_RETURN(L.post_ffn_norm, read_norm(b + "post_ffw_norm.weight", c.n_embd));
    }
    if (spec_.n_expert > 0) {
      DI_RETURN_IF_ERROR(bind_experts(b, L));
    } else {
      DI_ASSIGN_OR_RETURN(L.ffn.gate, bind_matrix(b + "ffn_gate.weight", c.n_ff, c.n_embd));
      DI_ASSIGN_OR_RETURN(L.ffn.up, bind_matrix(b + "ffn_up.weight", c.n_ff, c.n_embd));
      DI_ASSIGN_OR_RETURN(L.ffn.down, bind_matrix(b + "ffn_down.weight", c.n_embd, c.n_ff));
    }
  }
  return {};
}

std::vector<float> rope_inv_freq(double theta, int64_t n_rot, double linear_factor) {
  std::vector<float> f(static_cast<size_t>(n_rot / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    const double exponent = -2.0 * static_cast<double>(i) / static_cast<double>(n_rot);
    f[i] = static_cast<float>(std::pow(theta, exponent) / linear_factor);
  }
  return f;
}

void DecoderModel::compute_rope_frequencies() {
  const ModelConfig& c = config_;
  const double factor = c.rope_scaling.kind == RopeScaling::Kind::kLinear ? c.rope_scaling.factor : 1.0;
  inv_freq_global = rope_inv_freq(c.rope_theta, c.n_rot, factor);
  inv_freq_sliding = rope_inv_freq(spec_.rope_theta_sliding, c.n_rot, 1.0);
}

void DecoderRunner::ensure_capacity(int64_t n) {
  if (n <= capacity_) return;
  const ModelConfig& c = model_.config();
  const DecoderSpec& s = model_.spec_;
  const auto sz = [n](int64_t per_token) { return static_cast<size_t>(n * per_token); };
  const int64_t n_ff = std::max(c.n_ff, s.n_ff_expert);
  x_.resize(sz(c.n_embd));
  h_.resize(sz(c.n_embd));
  out_.resize(sz(c.n_embd));
  q_.resize(sz(c.n_head * c.head_dim));
  k_.resize(sz(c.n_head_kv * c.head_dim));
  v_.resize(sz(c.n_head_kv * c.head_dim));
  att_.resize(sz(c.n_head * c.head_dim));
  gate_.resize(sz(n_ff));
  up_.resize(sz(n_ff));
  if (s.n_expert > 0) {
    router_.resize(sz(s.n_expert));
    route_w_.resize(sz(s.n_expert_used));
    route_ids_.resize(sz(s.n_expert_used));
    xe_.resize(sz(c.n_embd));
    ye_.resize(sz(c.n_embd));
    expert_tokens_.reserve(sz(1));
    expert_token_w_.reserve(sz(1));
  }
  positions_.resize(sz(1));
  token_seq_.resize(sz(1));
  logit_tokens_.reserve(sz(1));
  capacity_ = n;
}

// Blocks [first, end) of one table must name blocks of a pool of n_pool blocks.
Status check_table(size_t s, std::span<const int32_t> table, int64_t first, int64_t end, int64_t n_pool,
                   int64_t block_size) {
  if (static_cast<int64_t>(table.size()) < end) {
    return invalid_argument("batch sequence " + std::to_string(s) + " needs " + std::to_string(end) +
                            " blocks but its block table has " + std::to_string(table.size()));
  }
  for (int64_t b = first; b < end; ++b) {
    const int32_t block = table[static_cast<size_t>(b)];
    if (block < 0 || block >= n_pool) {
      return invalid_argument("batch sequence " + std::to_string(s) + " names block " + std::to_string(block) +
                              " outside the cache (positions " + std::to_string(b * block_size) + "..)");
    }
  }
  return {};
}

Status DecoderRunner::validate(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences,
                               const PagedKvCache& kv) const {
  const ModelConfig& c = model_.config();
  if (kv.kv_dim() != c.n_head_kv * c.head_dim) return invalid_argument("the KV cache was made for another model");
  int64_t total = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const BatchSequence& seq = sequences[s];
    if (seq.n_tokens <= 0 || seq.first_position < 0) {
      return invalid_argument("batch sequence " + std::to_string(s) + " has no tokens or a negative position");
    }
    if (seq.replay_start < 0 || seq.replay_start > seq.first_position || seq.n_shared < 0) {
      return invalid_argument("batch sequence " + std::to_string(s) + " replays from " +
                              std::to_string(seq.replay_start) + ", past its first position " +
                              std::to_string(seq.first_position));
    }
    const int64_t n_blocks = (seq.first_position + seq.n_tokens + kv.block_size() - 1) / kv.block_size();
    DI_RETURN_IF_ERROR(check_table(s, seq.block_table, 0, n_blocks, kv.n_blocks(), kv.block_size()));
    if (c.has_sliding_layers()) {
      // Sliding layers read from the oldest position the chunk's first query can see.
      const int64_t first_read = std::max(seq.first_position - c.layer_window + 1, seq.replay_start);
      const auto table = seq.sliding_block_table.empty() ? seq.block_table : seq.sliding_block_table;
      DI_RETURN_IF_ERROR(check_table(s, table, std::max<int64_t>(0, first_read) / kv.block_size(), n_blocks,
                                     kv.n_sliding_blocks(), kv.block_size()));
    }
    total += seq.n_tokens;
  }
  if (total != static_cast<int64_t>(tokens.size())) {
    return invalid_argument("the batch's sequences hold " + std::to_string(total) + " tokens but " +
                            std::to_string(tokens.size()) + " were given");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.n_vocab) {
      return invalid_argument("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(c.n_vocab) + ")");
    }
  }
  return {};
}

// h_ (normed input) -> out_ (attention branch output, before any post-norm).
void DecoderRunner::attention_block(const LayerWeights& L, int64_t layer, int64_t n,
                                    std::span<const BatchSequence> sequences, PagedKvCache& kv, ThreadPool& pool) {
  const DecoderModel& m = model_;
  const ModelConfig& c = m.config();
  const DecoderSpec& s = m.spec_;
  const int64_t kv_dim = c.n_head_kv * c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const cpu::MatmulOutput qkv[] = {{&L.wq, q_.data(), nullptr}, {&L.wk, k_.data(), nullptr}, {&L.wv, v_.data(), nullptr}};
  cpu::matmul_group(qkv, h_.data(), n, quant_scratch_, pool);
  if (s.qk_norm) {
    cpu::rms_norm(q_.data(), L.q_norm.data(), eps, n * c.n_head, c.head_dim, q_.data());
    cpu::rms_norm(k_.data(), L.k_norm.data(), eps, n * c.n_head_kv, c.head_dim, k_.data());
  }
  const std::span<const int32_t> positions(positions_.data(), static_cast<size_t>(n));
  const std::vector<float>& inv_freq = L.sliding ? m.inv_freq_sliding : m.inv_freq_global;
  cpu::rope(q_.data(), n, c.n_head, c.head_dim, c.n_rot, positions, inv_freq, cpu::RotaryPairing::kHalf);
  cpu::rope(k_.data(), n, c.n_head_kv, c.head_dim, c.n_rot, positions, inv_freq, cpu::RotaryPairing::kHalf);
  const void* k_layer = kv.k_data(layer);
  const void* v_layer = kv.v_data(layer);
  for (size_t q = 0; q < sequences.size(); ++q) {
    const BatchSequence& seq = sequences[q];
    if (L.sliding) {
      const auto table = seq.sliding_block_table.empty() ? seq.block_table : seq.sliding_block_table;
      seq_kv_[q] = {k_layer, v_layer, table.data(), kv.block_size(), seq.replay_start, kv.dtype()};
    } else {
      seq_kv_[q] = {k_layer, v_layer, seq.block_table.data(), kv.block_size(), 0, kv.dtype()};
    }
  }
  // K and V rows go to their sequences' cache rows before attention reads them. A replayed
  // position's full-attention rows are already cached, possibly shared: they stay as they are
  // (the replay's recomputed rows may differ from them in the last bits, or more).
  for (int64_t t = 0; t < n; ++t) {
    const size_t q = static_cast<size_t>(token_seq_[t]);
    if (!L.sliding && positions_[t] < sequences[q].n_shared) continue;
    const int64_t row = seq_kv_[q].row(positions_[t]);
    kv.store(layer, row, k_.data() + t * kv_dim, v_.data() + t * kv_dim);
  }
  const float scale = s.attention_scale > 0 ? s.attention_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const cpu::AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, scale, L.sliding ? s.window : 0};
  cpu::attention(shape, q_.data(), n, positions, seq_kv_,
                 std::span<const int32_t>(token_seq_.data(), static_cast<size_t>(n)), att_.data(), pool);
  cpu::matmul(L.wo, att_.data(), n, out_.data(), nullptr, quant_scratch_, pool);
}

void DecoderRunner::dense_ffn(const Ffn& f, int64_t n, int64_t n_ff, const float* in, float* out,
                              ThreadPool& pool) {
  const cpu::MatmulOutput gate_up[] = {{&f.gate, gate_.data(), nullptr}, {&f.up, up_.data(), nullptr}};
  cpu::matmul_group(gate_up, in, n, quant_scratch_, pool);
  if (model_.spec_.activation == FfnActivation::kGeluTanh) {
    cpu::gelu_tanh_mul(gate_.data(), up_.data(), n * n_ff);
  } else {
    cpu::silu_mul(gate_.data(), up_.data(), n * n_ff);
  }
  cpu::matmul(f.down, gate_.data(), n, out, nullptr, quant_scratch_, pool);
}

// h_ -> out_: each token's k chosen experts, weighted by their router probabilities. Tokens are
// grouped by expert so each expert's matrices stream once per batch.
void DecoderRunner::moe_ffn(const LayerWeights& L, int64_t n, ThreadPool& pool) {
  const ModelConfig& c = model_.config();
  const DecoderSpec& s = model_.spec_;
  const int64_t k = s.n_expert_used;
  cpu::matmul(L.router, h_.data(), n, router_.data(), nullptr, quant_scratch_, pool);
  for (int64_t t = 0; t < n; ++t) {
    cpu::route_top_k(router_.data() + t * s.n_expert, s.n_expert, k, s.expert_weights_norm,
                     route_ids_.data() + t * k, route_w_.data() + t * k);
  }
  std::fill_n(out_.data(), n * c.n_embd, 0.0f);
  for (int64_t e = 0; e < s.n_expert; ++e) {
    expert_tokens_.clear();
    expert_token_w_.clear();
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        if (route_ids_[t * k + j] != e) continue;
        expert_tokens_.push_back(static_cast<int32_t>(t));
        expert_token_w_.push_back(route_w_[t * k + j]);
      }
    }
    const int64_t m = static_cast<int64_t>(expert_tokens_.size());
    if (m == 0) continue;
    for (int64_t i = 0; i < m; ++i) {
      std::copy_n(h_.data() + expert_tokens_[i] * c.n_embd, c.n_embd, xe_.data() + i * c.n_embd);
    }
    dense_ffn(L.experts[static_cast<size_t>(e)], m, s.n_ff_expert, xe_.data(), ye_.data(), pool);
    for (int64_t i = 0; i < m; ++i) {
      float* o = out_.data() + expert_tokens_[i] * c.n_embd;
      const float* y = ye_.data() + i * c.n_embd;
      const float w = expert_token_w_[i];
      for (int64_t d = 0; d < c.n_embd; ++d) o[d] += w * y[d];
    }
  }
}

Status DecoderRunner::run(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences,
                          PagedKvCache& kv, ThreadPool& pool) {
  DI_RETURN_IF_ERROR(validate(tokens, sequences, kv));
  const DecoderModel& m = model_;
  const ModelConfig& c = m.config();
  const DecoderSpec& s = m.spec_;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const float eps = static_cast<float>(c.rms_norm_eps);
  ensure_capacity(n);
  logit_tokens_.clear();
  {
    int64_t t = 0;
    for (size_t q = 0; q < sequences.size(); ++q) {
      const BatchSequence& seq = sequences[q];
      for (int64_t i = 0; i < seq.n_tokens; ++i, ++t) {
        positions_[t] = static_cast<int32_t>(seq.first_position + i);
        token_seq_[t] = static_cast<int32_t>(q);
        if (seq.logits == LogitsMode::kAll || (seq.logits == LogitsMode::kLast && i + 1 == seq.n_tokens)) {
          logit_tokens_.push_back(static_cast<int32_t>(t));
        }
      }
    }
  }
  seq_kv_.resize(sequences.size());

  cpu::gather_rows(m.token_embd, tokens, x_.data());
  if (s.embed_scale != 1.0f) {
    for (int64_t i = 0; i < n * c.n_embd; ++i) x_[i] *= s.embed_scale;
  }
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = m.layers[static_cast<size_t>(l)];
    cpu::rms_norm(x_.data(), L.attn_norm.data(), eps, n, c.n_embd, h_.data());
    attention_block(L, l, n, sequences, kv, pool);
    if (s.sandwich_norms) cpu::rms_norm(out_.data(), L.post_attn_norm.data(), eps, n, c.n_embd, out_.data());
    for (int64_t i = 0; i < n * c.n_embd; ++i) x_[i] += out_[i];

    cpu::rms_norm(x_.data(), L.ffn_norm.data(), eps, n, c.n_embd, h_.data());
    if (s.n_expert > 0) {
      moe_ffn(L, n, pool);
    } else {
      dense_ffn(L.ffn, n, c.n_ff, h_.data(), out_.data(), pool);
    }
    if (s.sandwich_norms) cpu::rms_norm(out_.data(), L.post_ffn_norm.data(), eps, n, c.n_embd, out_.data());
    for (int64_t i = 0; i < n * c.n_embd; ++i) x_[i] += out_[i];
  }

  // Only the rows whose logits are wanted go through the final norm and the output head.
  n_logit_rows_ = static_cast<int64_t>(logit_tokens_.size());
  if (n_logit_rows_ == 0) return {};
  for (int64_t r = 0; r < n_logit_rows_; ++r) {
    cpu::rms_norm(x_.data() + logit_tokens_[r] * c.n_embd, m.output_norm.data(), eps, 1, c.n_embd,
                  h_.data() + r * c.n_embd);
  }
  logits_.resize(static_cast<size_t>(n_logit_rows_ * c.n_vocab));
  cpu::matmul(m.output, h_.data(), n_logit_rows_, logits_.data(), nullptr, quant_scratch_, pool);
  if (s.final_logit_softcap > 0) cpu::soft_cap(logits_.data(), n_logit_rows_ * c.n_vocab, s.final_logit_softcap);
  return {};
}

std::span<const float> DecoderRunner::logits(int64_t i) const {
  const int64_t n_vocab = model_.config().n_vocab;
  DI_ICHECK(i >= 0 && i < n_logit_rows_);
  return {logits_.data() + i * n_vocab, static_cast<size_t>(n_vocab)};
}

}  // namespace

Status read_decoder_config(const TensorSource& source, ModelConfig* config) {
  DI_RETURN_IF_ERROR(read_common_hparams(source, 1e-6, config));
  const Metadata& md = source.metadata();
  ModelConfig& c = *config;
  const std::string p = c.architecture + ".";
  c.rope_style = RopeStyle::kHalf;
  DI_ASSIGN_OR_RETURN(std::string scaling, md.get_string_or(p + "rope.scaling.type", "none"));
  if (scaling == "linear") {
    c.rope_scaling.kind = RopeScaling::Kind::kLinear;
    DI_ASSIGN_OR_RETURN(c.rope_scaling.factor, md.get_float(p + "rope.scaling.factor"));
  } else if (scaling != "none") {
    return unimplemented(source.path() + ": rope scaling '" + scaling + "' is not supported for " + c.architecture);
  }
  return {};
}

Result<std::unique_ptr<Model>> create_decoder_model(std::unique_ptr<TensorSource> source, ModelConfig config,
                                                    DecoderSpec spec) {
  if (!spec.layer_sliding.empty() && static_cast<int64_t>(spec.layer_sliding.size()) != config.n_layer) {
    return invalid_argument(source->path() + ": " + std::to_string(spec.layer_sliding.size()) +
                            " layer types given for " + std::to_string(config.n_layer) + " layers");
  }
  if (spec.n_expert > 0 && (spec.n_expert_used <= 0 || spec.n_expert_used > spec.n_expert || spec.n_ff_expert <= 0)) {
    return invalid_argument(source->path() + ": " + std::to_string(spec.n_expert_used) + " experts used of " +
                            std::to_string(spec.n_expert) + " with width " + std::to_string(spec.n_ff_expert) +
                            " is not a valid mixture of experts");
  }
  if (spec.n_expert == 0 && config.n_ff <= 0) {
    return invalid_argument(source->path() + ": " + config.architecture + ".feed_forward_length is missing");
  }
  if (spec.window > 0 && std::find(spec.layer_sliding.begin(), spec.layer_sliding.end(), true) != spec.layer_sliding.end()) {
    // The sliding layers' KV goes to its own bounded cache group (PagedKvCache, src/kv).
    config.layer_sliding = spec.layer_sliding;
    config.layer_window = spec.window;
  }
  auto model = std::make_unique<DecoderModel>(std::move(source), std::move(config), std::move(spec));
  DI_RETURN_IF_ERROR(model->bind_weights());
  model->compute_rope_frequencies();
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace deepinfer
