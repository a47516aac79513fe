// Llama-family decoder: Llama 2/3, SmolLM2, Mistral (full attention), Qwen2.
//
// Per layer: x += Wo · attn(rope(Wq·n(x)), rope(Wk·n(x)), Wv·n(x));  x += Wd · (silu(Wg·n(x)) * Wu·n(x))
// with n = RMSNorm. Weights stay in their stored format; activations are float32.
#include <cmath>
#include <numbers>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/packed.h"
#include "backend/cpu/quant.h"
#include "core/check.h"
#include "model/arch/hparams.h"
#include "model/arch/registry.h"

namespace deepinfer {

namespace {

using cpu::WeightMatrix;

struct LayerWeights {
  std::vector<float> attn_norm;        // [n_embd]
  WeightMatrix wq, wk, wv, wo;         // [n_head*hd, n_embd], [n_head_kv*hd, n_embd] x2, [n_embd, n_head*hd]
  std::vector<float> bq, bk, bv;       // empty unless the architecture has attention biases
  std::vector<float> ffn_norm;         // [n_embd]
  WeightMatrix w_gate, w_up, w_down;   // [n_ff, n_embd] x2, [n_embd, n_ff]
};

class LlamaFamilyModel;

// Forward passes over flattened batches; holds the scratch of the largest batch seen.
class LlamaBatchRunner final : public BatchRunner {
 public:
  explicit LlamaBatchRunner(const LlamaFamilyModel& model) : model_(model) {}

  Status run(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences, PagedKvCache& kv,
             ThreadPool& pool) override;
  std::span<const float> logits(int64_t row) const override;
  int64_t n_logit_rows() const override { return n_logit_rows_; }

 private:
  Status validate(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences,
                  const PagedKvCache& kv) const;
  void ensure_capacity(int64_t n_tokens);

  const LlamaFamilyModel& model_;
  int64_t capacity_ = 0;
  // Per token of the batch: [n, n_embd], [n, n_embd], [n, q_dim], [n, kv_dim] x2, [n, q_dim],
  // [n, n_ff] x2; positions and sequence index of each token.
  std::vector<float> x_, h_, q_, k_, v_, att_, gate_, up_;
  std::vector<int32_t> positions_, token_seq_, logit_tokens_;
  std::vector<cpu::SequenceKv> seq_kv_;
  cpu::QuantScratch quant_scratch_;
  std::vector<float> logits_;  // [n_logit_rows_, n_vocab]
  int64_t n_logit_rows_ = 0;
};

class LlamaFamilyModel final : public Model {
 public:
  static Result<std::unique_ptr<Model>> create(std::unique_ptr<TensorSource> source);

  const ModelConfig& config() const override { return config_; }
  const TensorSource& source() const override { return *source_; }
  std::unique_ptr<BatchRunner> new_batch_runner() const override {
    return std::make_unique<LlamaBatchRunner>(*this);
  }

  ModelConfig config_;
  std::unique_ptr<TensorSource> source_;
  WeightMatrix token_embd;  // [n_vocab, n_embd]
  WeightMatrix output;      // [n_vocab, n_embd], token_embd when tied
  std::vector<float> output_norm;
  std::vector<LayerWeights> layers;
  cpu::PackedWeights packs_;  // owns the packed copies the matrices above point into
  std::vector<float> inv_freq;  // [n_rot / 2]

 private:
  Status read_config();
  Status bind_weights();
  Status compute_rope_frequencies();
  // Binds a matrix and gives it its packed copy (packed.h) where the kernels have one.
  Result<WeightMatrix> bind_matrix(const std::string& name, int64_t n_out, int64_t n_in);
  Result<std::vector<float>> read_vector(const std::string& name, int64_t n) const;
  bool has_tensor(const std::string& name) const { return source_->find(name) != nullptr; }
};

Status LlamaFamilyModel::read_config() {
  DI_RETURN_IF_ERROR(read_common_hparams(*source_, 1e-5, &config_));
  const Metadata& md = source_->metadata();
  ModelConfig& c = config_;
  const std::string p = c.architecture + ".";
  if (c.n_ff <= 0) return invalid_argument(source_->path() + ": metadata key '" + p + "feed_forward_length' is missing");

  // GGUF "llama" weights have Q/K rows permuted for interleaved pairs; Hugging Face checkpoints
  // (and GGUF qwen2) rotate halves. The safetensors loader marks its sources.
  DI_ASSIGN_OR_RETURN(std::string style, md.get_string_or("deepinfer.rope_style", ""));
  if (style == "half" || c.architecture == "qwen2") {
    c.rope_style = RopeStyle::kHalf;
  } else {
    c.rope_style = RopeStyle::kInterleaved;
  }
  DI_ASSIGN_OR_RETURN(std::string scaling, md.get_string_or(p + "rope.scaling.type", "none"));
  if (scaling == "llama3") {
    c.rope_scaling.kind = RopeScaling::Kind::kLlama3;
    DI_ASSIGN_OR_RETURN(c.rope_scaling.factor, md.get_float(p + "rope.scaling.factor"));
    DI_ASSIGN_OR_RETURN(c.rope_scaling.low_freq_factor, md.get_float_or(p + "rope.scaling.low_freq_factor", 1.0));
    DI_ASSIGN_OR_RETURN(c.rope_scaling.high_freq_factor, md.get_float_or(p + "rope.scaling.high_freq_factor", 4.0));
    DI_ASSIGN_OR_RETURN(uint64_t orig, md.get_uint(p + "rope.scaling.original_context_length"));
    c.rope_scaling.original_context = static_cast<int64_t>(orig);
  } else if (scaling == "linear") {
    c.rope_scaling.kind = RopeScaling::Kind::kLinear;
    DI_ASSIGN_OR_RETURN(c.rope_scaling.factor, md.get_float(p + "rope.scaling.factor"));
  } else if (scaling != "none") {
    return unimplemented(source_->path() + ": rope scaling '" + scaling + "' is not supported");
  }
  DI_ASSIGN_OR_RETURN(uint64_t window, md.get_uint_or(p + "attention.sliding_window", 0));
  c.sliding_window = static_cast<int64_t>(window);
  c.attn_bias = has_tensor("blk.0.attn_q.bias");
  return {};
}

Result<WeightMatrix> LlamaFamilyModel::bind_matrix(const std::string& name, int64_t n_out, int64_t n_in) {
  DI_ASSIGN_OR_RETURN(const TensorView* t, source_->get(name));
  if (t->shape.size() != 2 || t->shape[0] != n_out || t->shape[1] != n_in) {
    return invalid_argument(source_->path() + ": tensor '" + name + "' has shape " + t->shape_string() +
                            ", but the architecture needs [" + std::to_string(n_out) + ", " +
                            std::to_string(n_in) + "]");
  }
  if (!cpu::quant_supported(t->dtype)) {
    return unimplemented(source_->path() + ": tensor '" + name + "' has type " +
                         std::string(dtype_name(t->dtype)) + ", which the CPU backend does not support");
  }
  WeightMatrix m{t->dtype, t->data, n_out, n_in};
  packs_.pack(m);
  return m;
}

Result<std::vector<float>> LlamaFamilyModel::read_vector(const std::string& name, int64_t n) const {
  DI_ASSIGN_OR_RETURN(const TensorView* t, source_->get(name));
  if (t->n_elements() != n || t->shape.size() != 1) {
    return invalid_argument(source_->path() + ": tensor '" + name + "' has shape " + t->shape_string() +
                            ", but the architecture needs [" + std::to_string(n) + "]");
  }
  if (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16) {
    return unimplemented(source_->path() + ": tensor '" + name + "' has type " +
                         std::string(dtype_name(t->dtype)) + "; a norm or bias must be f32, f16 or bf16");
  }
  std::vector<float> out(static_cast<size_t>(n));
  cpu::dequantize_row(t->dtype, t->data, out.data(), n);
  return out;
}

Status LlamaFamilyModel::bind_weights() {
  const ModelConfig& c = config_;
  const int64_t q_dim = c.n_head * c.head_dim;
  const int64_t kv_dim = c.n_head_kv * c.head_dim;
  DI_ASSIGN_OR_RETURN(token_embd, bind_matrix("token_embd.weight", c.n_vocab, c.n_embd));
  DI_ASSIGN_OR_RETURN(output_norm, read_vector("output_norm.weight", c.n_embd));
  if (c.tied_embeddings) {
    output = token_embd;
  } else {
    DI_ASSIGN_OR_RETURN(output, bind_matrix("output.weight", c.n_vocab, c.n_embd));
  }
  layers.resize(static_cast<size_t>(c.n_layer));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    LayerWeights& L = layers[static_cast<size_t>(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    DI_ASSIGN_OR_RETURN(L.attn_norm, read_vector(b + "attn_norm.weight", c.n_embd));
    DI_ASSIGN_OR_RETURN(L.wq, bind_matrix(b + "attn_q.weight", q_dim, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.wk, bind_matrix(b + "attn_k.weight", kv_dim, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.wv, bind_matrix(b + "attn_v.weight", kv_dim, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.wo, bind_matrix(b + "attn_output.weight", c.n_embd, q_dim));
    if (c.attn_bias) {
      DI_ASSIGN_OR_RETURN(L.bq, read_vector(b + "attn_q.bias", q_dim));
      DI_ASSIGN_OR_RETURN(L.bk, read_vector(b + "attn_k.bias", kv_dim));
      DI_ASSIGN_OR_RETURN(L.bv, read_vector(b + "attn_v.bias", kv_dim));
    }
    DI_ASSIGN_OR_RETURN(L.ffn_norm, read_vector(b + "ffn_norm.weight", c.n_embd));
    DI_ASSIGN_OR_RETURN(L.w_gate, bind_matrix(b + "ffn_gate.weight", c.n_ff, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.w_up, bind_matrix(b + "ffn_up.weight", c.n_ff, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.w_down, bind_matrix(b + "ffn_down.weight", c.n_embd, c.n_ff));
  }
  return {};
}

Status LlamaFamilyModel::compute_rope_frequencies() {
  const ModelConfig& c = config_;
  const int64_t half = c.n_rot / 2;
  inv_freq.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = static_cast<float>(std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(c.n_rot)));
  }
  const RopeScaling& s = c.rope_scaling;
  if (s.kind == RopeScaling::Kind::kLinear) {
    for (float& f : inv_freq) f = static_cast<float>(f / s.factor);
  } else if (s.kind == RopeScaling::Kind::kLlama3) {
    // Long wavelengths are slowed by `factor`, short ones kept, the band between blended.
    const double low_wavelen = static_cast<double>(s.original_context) / s.low_freq_factor;
    const double high_wavelen = static_cast<double>(s.original_context) / s.high_freq_factor;
    for (float& f : inv_freq) {
      const double freq = f;
      const double wavelen = 2.0 * std::numbers::pi / freq;
      double out = freq;
      if (wavelen > low_wavelen) {
        out = freq / s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (static_cast<double>(s.original_context) / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        out = (1.0 - smooth) * freq / s.factor + smooth * freq;
      }
      f = static_cast<float>(out);
    }
  }
  // GGUF Llama 3 files carry the same adjustment precomputed as divisors.
  if (has_tensor("rope_freqs.weight")) {
    DI_ASSIGN_OR_RETURN(std::vector<float> factors, read_vector("rope_freqs.weight", half));
    for (int64_t i = 0; i < half; ++i) inv_freq[i] /= factors[i];
  }
  return {};
}

Result<std::unique_ptr<Model>> LlamaFamilyModel::create(std::unique_ptr<TensorSource> source) {
  auto model = std::make_unique<LlamaFamilyModel>();
  model->source_ = std::move(source);
  DI_RETURN_IF_ERROR(model->read_config());
  DI_RETURN_IF_ERROR(model->bind_weights());
  DI_RETURN_IF_ERROR(model->compute_rope_frequencies());
  return std::unique_ptr<Model>(std::move(model));
}

void LlamaBatchRunner::ensure_capacity(int64_t n) {
  if (n <= capacity_) return;
  const ModelConfig& c = model_.config();
  const auto sz = [n](int64_t per_token) { return static_cast<size_t>(n * per_token); };
  x_.resize(sz(c.n_embd));
  h_.resize(sz(c.n_embd));
  q_.resize(sz(c.n_head * c.head_dim));
  k_.resize(sz(c.n_head_kv * c.head_dim));
  v_.resize(sz(c.n_head_kv * c.head_dim));
  att_.resize(sz(c.n_head * c.head_dim));
  gate_.resize(sz(c.n_ff));
  up_.resize(sz(c.n_ff));
  positions_.resize(static_cast<size_t>(n));
  token_seq_.resize(static_cast<size_t>(n));
  capacity_ = n;
}

Status LlamaBatchRunner::validate(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences,
                                  const PagedKvCache& kv) const {
  const ModelConfig& c = model_.config();
  if (kv.kv_dim() != c.n_head_kv * c.head_dim) return invalid_argument("the KV cache was made for another model");
  int64_t total = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const BatchSequence& seq = sequences[s];
    if (seq.n_tokens <= 0 || seq.first_position < 0) {
      return invalid_argument("batch sequence " + std::to_string(s) + " has no tokens or a negative position");
    }
    const int64_t n_blocks = (seq.first_position + seq.n_tokens + kv.block_size() - 1) / kv.block_size();
    if (static_cast<int64_t>(seq.block_table.size()) < n_blocks) {
      return invalid_argument("batch sequence " + std::to_string(s) + " needs " + std::to_string(n_blocks) +
                              " blocks but its block table has " + std::to_string(seq.block_table.size()));
    }
    for (int64_t b = 0; b < n_blocks; ++b) {
      if (seq.block_table[static_cast<size_t>(b)] < 0 || seq.block_table[static_cast<size_t>(b)] >= kv.n_blocks()) {
        return invalid_argument("batch sequence " + std::to_string(s) + " names block " +
                                std::to_string(seq.block_table[static_cast<size_t>(b)]) + " outside the cache");
      }
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

Status LlamaBatchRunner::run(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences,
                             PagedKvCache& kv, ThreadPool& pool) {
  DI_RETURN_IF_ERROR(validate(tokens, sequences, kv));
  const LlamaFamilyModel& m = model_;
  const ModelConfig& c = m.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t kv_dim = c.n_head_kv * c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const auto pairing = c.rope_style == RopeStyle::kInterleaved ? cpu::RotaryPairing::kInterleaved
                                                               : cpu::RotaryPairing::kHalf;
  ensure_capacity(n);
  logit_tokens_.clear();
  {
    int64_t t = 0;
    for (size_t s = 0; s < sequences.size(); ++s) {
      const BatchSequence& seq = sequences[s];
      for (int64_t i = 0; i < seq.n_tokens; ++i, ++t) {
        positions_[t] = static_cast<int32_t>(seq.first_position + i);
        token_seq_[t] = static_cast<int32_t>(s);
        if (seq.logits == LogitsMode::kAll || (seq.logits == LogitsMode::kLast && i + 1 == seq.n_tokens)) {
          logit_tokens_.push_back(static_cast<int32_t>(t));
        }
      }
    }
  }
  const std::span<const int32_t> positions(positions_.data(), static_cast<size_t>(n));
  const std::span<const int32_t> token_seq(token_seq_.data(), static_cast<size_t>(n));
  seq_kv_.resize(sequences.size());

  cpu::gather_rows(m.token_embd, tokens, x_.data());
  const cpu::AttentionShape att_shape{c.n_head, c.n_head_kv, c.head_dim,
                                      1.0f / std::sqrt(static_cast<float>(c.head_dim)), c.sliding_window};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = m.layers[static_cast<size_t>(l)];
    const void* k_layer = kv.k_data(l);
    const void* v_layer = kv.v_data(l);

    cpu::rms_norm(x_.data(), L.attn_norm.data(), eps, n, c.n_embd, h_.data());
    const cpu::MatmulOutput qkv[] = {{&L.wq, q_.data(), c.attn_bias ? L.bq.data() : nullptr},
                                     {&L.wk, k_.data(), c.attn_bias ? L.bk.data() : nullptr},
                                     {&L.wv, v_.data(), c.attn_bias ? L.bv.data() : nullptr}};
    cpu::matmul_group(qkv, h_.data(), n, quant_scratch_, pool);
    cpu::rope(q_.data(), n, c.n_head, c.head_dim, c.n_rot, positions, m.inv_freq, pairing);
    cpu::rope(k_.data(), n, c.n_head_kv, c.head_dim, c.n_rot, positions, m.inv_freq, pairing);
    // K and V rows go to their sequences' cache rows before attention reads them.
    for (size_t s = 0; s < sequences.size(); ++s) {
      seq_kv_[s] = {k_layer, v_layer, sequences[s].block_table.data(), kv.block_size(), 0, kv.dtype()};
    }
    for (int64_t t = 0; t < n; ++t) {
      const int64_t row = seq_kv_[static_cast<size_t>(token_seq_[t])].row(positions_[t]);
      kv.store(l, row, k_.data() + t * kv_dim, v_.data() + t * kv_dim);
    }
    cpu::attention(att_shape, q_.data(), n, positions, seq_kv_, token_seq, att_.data(), pool);
    cpu::matmul(L.wo, att_.data(), n, h_.data(), nullptr, quant_scratch_, pool);
    for (int64_t i = 0; i < n * c.n_embd; ++i) x_[i] += h_[i];

    cpu::rms_norm(x_.data(), L.ffn_norm.data(), eps, n, c.n_embd, h_.data());
    const cpu::MatmulOutput gate_up[] = {{&L.w_gate, gate_.data(), nullptr}, {&L.w_up, up_.data(), nullptr}};
    cpu::matmul_group(gate_up, h_.data(), n, quant_scratch_, pool);
    cpu::silu_mul(gate_.data(), up_.data(), n * c.n_ff);
    cpu::matmul(L.w_down, gate_.data(), n, h_.data(), nullptr, quant_scratch_, pool);
    for (int64_t i = 0; i < n * c.n_embd; ++i) x_[i] += h_[i];
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
  return {};
}

std::span<const float> LlamaBatchRunner::logits(int64_t i) const {
  const int64_t n_vocab = model_.config().n_vocab;
  DI_ICHECK(i >= 0 && i < n_logit_rows_);
  return {logits_.data() + i * n_vocab, static_cast<size_t>(n_vocab)};
}

}  // namespace

Result<std::unique_ptr<Model>> create_llama_family_model(std::unique_ptr<TensorSource> source) {
  return LlamaFamilyModel::create(std::move(source));
}

}  // namespace deepinfer
