#include "model/arch/decoder.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "core/check.h"
#include "model/arch/hparams.h"
#include "model/step_inputs.h"

namespace deepinfer {

namespace {

using backend::Matrix;
using backend::Tensor;

struct Ffn {
  Matrix gate, up, down;  // [n_ff, n_embd] x2, [n_embd, n_ff]
};

struct LayerWeights {
  Tensor attn_norm;                 // [n_embd]
  Matrix wq, wk, wv, wo;            // [q_dim, n_embd], [kv_dim, n_embd] x2, [n_embd, q_dim]
  Tensor bq, bk, bv;                // [q_dim], [kv_dim] x2, with attention biases (Qwen2)
  Tensor q_norm, k_norm;            // [head_dim], with qk_norm
  Tensor post_attn_norm;            // [n_embd], with sandwich norms
  Tensor ffn_norm;                  // [n_embd]
  Tensor post_ffn_norm;             // [n_embd], with sandwich norms
  Ffn ffn;                          // dense layers
  Matrix router;                    // [n_expert, n_embd], MoE layers
  std::vector<Matrix> expert_gate;  // [n_expert] of [n_ff_expert, n_embd]
  std::vector<Matrix> expert_up;    // [n_expert] of [n_ff_expert, n_embd]
  std::vector<Matrix> expert_down;  // [n_expert] of [n_embd, n_ff_expert]
  bool sliding = false;
  int kv_group = 0;                 // kFullGroup or kSlidingGroup below
};

// KV groups: every model has the full group (global layers; all layers of a model without
// local ones); models with interleaved local layers add the sliding one.
constexpr int kFullGroup = 0;
constexpr int kSlidingGroup = 1;

class DecoderModel;

// Device scratch of one runner, sized for the largest batch seen (grown, never shrunk).
struct Activations {
  backend::DeviceBuffer x, h, out;     // [n, n_embd]: residual stream, normed input, branch output
  backend::DeviceBuffer q, att;        // [n, q_dim]
  backend::DeviceBuffer k, v;          // [n, kv_dim]
  backend::DeviceBuffer gate, up;      // [n, n_ff] (dense) or [n * k, n_ff_expert] (MoE)
  // MoE: router logits [n, n_expert], choices [n, k] (i32 ids, f32 weights), the dispatch order
  // [n * k] and per-expert offsets [n_expert + 1] (i32), tokens gathered per expert and their
  // outputs [n * k, n_embd].
  backend::DeviceBuffer router, route_ids, route_w, order, offsets, xs, ys;
  backend::DeviceBuffer logits;        // [n_logit_capacity, n_vocab]
  backend::DeviceBuffer best;          // [n_logit_capacity] (i32): greedy choices (kLastArgmax)
  int64_t n_tokens = 0;
  int64_t n_logit_rows = 0;
};

class DecoderRunner final : public BatchRunner {
 public:
  explicit DecoderRunner(const DecoderModel& model);

  Status run(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences,
             backend::KvCache& kv) override;
  std::span<const float> logits(int64_t row) const override;
  int64_t n_logit_rows() const override { return n_logit_rows_; }
  int32_t greedy_token(int64_t row) const override;

 private:
  Status ensure_capacity(int64_t n, int64_t n_logit_rows);
  Tensor f32(const backend::DeviceBuffer& b, int64_t rows, int64_t cols) const { return b.tensor(DType::kF32, rows, cols); }
  void attention_block(const LayerWeights& L, int32_t layer, int64_t n, backend::KvCache& kv);
  void dense_ffn(const Ffn& f, int64_t n);
  void moe_ffn(const LayerWeights& L, int64_t n);

  const DecoderModel& model_;
  std::unique_ptr<backend::Queue> queue_;
  StepInputs inputs_;
  Activations a_;
  // [n_logit_rows_, n_vocab] in host memory: a_.logits itself on a host-memory backend (a
  // copy there cost 3.5% of a served Gemma 3 step at 64 in flight), else logits_.
  const float* host_logits_ = nullptr;
  std::vector<float> logits_;
  // The last pass's greedy choices, where it kept only those (every row kLastArgmax).
  bool argmax_only_ = false;
  std::vector<int32_t> best_;
  int64_t n_logit_rows_ = 0;
};

class DecoderModel final : public Model {
 public:
  DecoderModel(std::unique_ptr<TensorSource> source, ModelConfig config, DecoderSpec spec, backend::Backend& backend)
      : config_(std::move(config)),
        spec_(std::move(spec)),
        source_(std::move(source)),
        backend_(backend),
        weights_(backend.new_weight_store()) {}

  const ModelConfig& config() const override { return config_; }
  const TensorSource& source() const override { return *source_; }
  backend::Backend& backend() const override { return backend_; }
  std::vector<KvGroupSpec> kv_groups() const override;
  std::unique_ptr<BatchRunner> new_batch_runner() const override { return std::make_unique<DecoderRunner>(*this); }

  Status check_ops() const;
  Status bind_weights();
  Status compute_rope_frequencies();

  bool has_sliding_layers() const {
    return spec_.window > 0 && std::find(spec_.layer_sliding.begin(), spec_.layer_sliding.end(), true) !=
                                   spec_.layer_sliding.end();
  }

  ModelConfig config_;
  DecoderSpec spec_;
  std::unique_ptr<TensorSource> source_;
  backend::Backend& backend_;
  std::unique_ptr<backend::WeightStore> weights_;  // owns what the handles below point into
  Matrix token_embd;  // [n_vocab, n_embd]
  Matrix output;      // [n_vocab, n_embd], token_embd when tied
  Tensor output_norm;
  std::vector<LayerWeights> layers;
  Tensor inv_freq_global, inv_freq_sliding;  // [n_rot / 2]

 private:
  Result<Matrix> bind_matrix(const std::string& name, int64_t n_out, int64_t n_in);
  Result<std::vector<Matrix>> bind_stacked(const std::string& name, int64_t n, int64_t n_out, int64_t n_in);
  Result<std::vector<float>> read_vector(const std::string& name, int64_t n) const;
  Result<Tensor> bind_vector(const std::string& name, int64_t n, float offset = 0.0f);
  Result<Tensor> bind_norm(const std::string& name, int64_t n) { return bind_vector(name, n, spec_.norm_weight_offset); }
  Status bind_experts(const std::string& blk, LayerWeights& L);
  bool has_tensor(const std::string& name) const { return source_->find(name) != nullptr; }
};

// "[a, b, c]", appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "[" + to_string().
std::string shape_text(std::initializer_list<int64_t> dims) {
  std::string s = "[";
  for (int64_t d : dims) {
    if (s.size() > 1) s += ", ";
    s += std::to_string(d);
  }
  s += "]";
  return s;
}

Status shape_error(const TensorSource& source, const TensorView& t, const std::string& wanted) {
  return invalid_argument(source.path() + ": tensor '" + t.name + "' has shape " + t.shape_string() +
                          ", but the architecture needs " + wanted);
}

Result<Matrix> DecoderModel::bind_matrix(const std::string& name, int64_t n_out, int64_t n_in) {
  DI_ASSIGN_OR_RETURN(const TensorView* t, source_->get(name));
  if (t->shape.size() != 2 || t->shape[0] != n_out || t->shape[1] != n_in) {
    return shape_error(*source_, *t, shape_text({n_out, n_in}));
  }
  auto m = weights_->add_matrix(name, t->dtype, t->data, n_out, n_in);
  if (!m.ok()) return Status(m.status().code(), source_->path() + ": " + m.status().message());
  return m;
}

// A [n, n_out, n_in] tensor as n matrices (GGUF stores all experts of a layer in one tensor).
Result<std::vector<Matrix>> DecoderModel::bind_stacked(const std::string& name, int64_t n, int64_t n_out,
                                                       int64_t n_in) {
  DI_ASSIGN_OR_RETURN(const TensorView* t, source_->get(name));
  if (t->shape.size() != 3 || t->shape[0] != n || t->shape[1] != n_out || t->shape[2] != n_in) {
    return shape_error(*source_, *t, shape_text({n, n_out, n_in}));
  }
  std::vector<Matrix> out;
  const size_t matrix_bytes = static_cast<size_t>(n_out) * t->row_bytes();
  for (int64_t e = 0; e < n; ++e) {
    auto m = weights_->add_matrix(name, t->dtype, t->data + e * matrix_bytes, n_out, n_in);
    if (!m.ok()) return Status(m.status().code(), source_->path() + ": " + m.status().message());
    out.push_back(*m);
  }
  return out;
}

Result<std::vector<float>> DecoderModel::read_vector(const std::string& name, int64_t n) const {
  DI_ASSIGN_OR_RETURN(const TensorView* t, source_->get(name));
  if (t->n_elements() != n || t->shape.size() != 1) return shape_error(*source_, *t, shape_text({n}));
  std::vector<float> out(static_cast<size_t>(n));
  if (!widen_to_f32(t->dtype, t->data, out.data(), n)) {
    return unimplemented(source_->path() + ": tensor '" + name + "' has type " + std::string(dtype_name(t->dtype)) +
                         "; a norm or bias must be f32, f16 or bf16");
  }
  return out;
}

Result<Tensor> DecoderModel::bind_vector(const std::string& name, int64_t n, float offset) {
  DI_ASSIGN_OR_RETURN(std::vector<float> v, read_vector(name, n));
  // In float32 as the reference does: (1 + w) is formed from the widened weight.
  if (offset != 0.0f) {
    for (float& w : v) w += offset;
  }
  return weights_->add_vector(v);
}

Status DecoderModel::bind_experts(const std::string& blk, LayerWeights& L) {
  const ModelConfig& c = config_;
  const int64_t n_exp = spec_.n_expert, n_ff = spec_.n_ff_expert;
  DI_ASSIGN_OR_RETURN(L.router, bind_matrix(blk + "ffn_gate_inp.weight", n_exp, c.n_embd));
  if (has_tensor(blk + "ffn_gate_exps.weight")) {
    DI_ASSIGN_OR_RETURN(L.expert_gate, bind_stacked(blk + "ffn_gate_exps.weight", n_exp, n_ff, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.expert_up, bind_stacked(blk + "ffn_up_exps.weight", n_exp, n_ff, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.expert_down, bind_stacked(blk + "ffn_down_exps.weight", n_exp, c.n_embd, n_ff));
    return {};
  }
  for (int64_t e = 0; e < n_exp; ++e) {
    std::string id = ".";  // appended, not "." + to_string(e): GCC 12 warns falsely on that (-Wrestrict)
    id += std::to_string(e);
    id += ".weight";
    DI_ASSIGN_OR_RETURN(L.expert_gate.emplace_back(), bind_matrix(blk + "ffn_gate_exps" + id, n_ff, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.expert_up.emplace_back(), bind_matrix(blk + "ffn_up_exps" + id, n_ff, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.expert_down.emplace_back(), bind_matrix(blk + "ffn_down_exps" + id, c.n_embd, n_ff));
  }
  return {};
}

Status DecoderModel::bind_weights() {
  const ModelConfig& c = config_;
  const int64_t q_dim = c.n_head * c.head_dim;
  const int64_t kv_dim = c.n_head_kv * c.head_dim;
  DI_ASSIGN_OR_RETURN(token_embd, bind_matrix("token_embd.weight", c.n_vocab, c.n_embd));
  DI_RETURN_IF_ERROR(backend::require(backend_, std::array{backend::OpUse{backend::Op::kEmbed, token_embd.dtype}},
                                      source_->path()));
  DI_ASSIGN_OR_RETURN(output_norm, bind_norm("output_norm.weight", c.n_embd));
  if (c.tied_embeddings) {
    output = token_embd;
  } else {
    DI_ASSIGN_OR_RETURN(output, bind_matrix("output.weight", c.n_vocab, c.n_embd));
  }
  const bool sliding_group = has_sliding_layers();
  layers.resize(static_cast<size_t>(c.n_layer));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    LayerWeights& L = layers[static_cast<size_t>(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    L.sliding = !spec_.layer_sliding.empty() && spec_.layer_sliding[static_cast<size_t>(l)];
    L.kv_group = sliding_group && L.sliding ? kSlidingGroup : kFullGroup;
    DI_ASSIGN_OR_RETURN(L.attn_norm, bind_norm(b + "attn_norm.weight", c.n_embd));
    DI_ASSIGN_OR_RETURN(L.wq, bind_matrix(b + "attn_q.weight", q_dim, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.wk, bind_matrix(b + "attn_k.weight", kv_dim, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.wv, bind_matrix(b + "attn_v.weight", kv_dim, c.n_embd));
    DI_ASSIGN_OR_RETURN(L.wo, bind_matrix(b + "attn_output.weight", c.n_embd, q_dim));
    if (c.attn_bias) {
      DI_ASSIGN_OR_RETURN(L.bq, bind_vector(b + "attn_q.bias", q_dim));
      DI_ASSIGN_OR_RETURN(L.bk, bind_vector(b + "attn_k.bias", kv_dim));
      DI_ASSIGN_OR_RETURN(L.bv, bind_vector(b + "attn_v.bias", kv_dim));
    }
    if (spec_.qk_norm) {
      DI_ASSIGN_OR_RETURN(L.q_norm, bind_norm(b + "attn_q_norm.weight", c.head_dim));
      DI_ASSIGN_OR_RETURN(L.k_norm, bind_norm(b + "attn_k_norm.weight", c.head_dim));
    }
    DI_ASSIGN_OR_RETURN(L.ffn_norm, bind_norm(b + "ffn_norm.weight", c.n_embd));
    if (spec_.sandwich_norms) {
      DI_ASSIGN_OR_RETURN(L.post_attn_norm, bind_norm(b + "post_attention_norm.weight", c.n_embd));
      DI_ASSIGN_OR_RETURN(L.post_ffn_norm, bind_norm(b + "post_ffw_norm.weight", c.n_embd));
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

// Every op the forward pass enqueues besides the products (whose weight formats add_matrix
// checks) and the KV ops (checked with the cache's element type: Model::new_kv_cache).
Status DecoderModel::check_ops() const {
  using backend::Op;
  const auto pairing = config_.rope_style == RopeStyle::kInterleaved ? backend::RopePairing::kInterleaved
                                                                     : backend::RopePairing::kHalf;
  const auto act = spec_.activation == FfnActivation::kGeluTanh ? backend::Activation::kGeluTanh
                                                                : backend::Activation::kSilu;
  std::vector<backend::OpUse> uses = {{Op::kUpload},
                                      {Op::kDownload},
                                      {Op::kRmsNorm},
                                      {Op::kRope, DType::kF32, static_cast<int>(pairing)},
                                      {Op::kGatedActivation, DType::kF32, static_cast<int>(act)},
                                      {Op::kAdd},
                                      {Op::kGatherOutputRows}};
  if (spec_.embed_scale != 1.0f) uses.push_back({Op::kScale});
  if (spec_.final_logit_softcap > 0) uses.push_back({Op::kSoftCap});
  if (spec_.n_expert > 0) {
    for (Op op : {Op::kRouteTopK, Op::kMoeDispatch, Op::kMoeGather, Op::kMoeCombine}) uses.push_back({op});
  }
  return backend::require(backend_, uses, source_->path());
}

std::vector<float> rope_inv_freq(double theta, int64_t n_rot, double linear_factor) {
  std::vector<float> f(static_cast<size_t>(n_rot / 2));
  for (size_t i = 0; i < f.size(); ++i) {
    const double exponent = -2.0 * static_cast<double>(i) / static_cast<double>(n_rot);
    f[i] = static_cast<float>(std::pow(theta, exponent) / linear_factor);
  }
  return f;
}

// Llama 3.1's scaling: long wavelengths are slowed by `factor`, short ones kept, the band
// between blended (from the float32 base frequencies, as the reference computes them).
void apply_llama3_scaling(const RopeScaling& s, std::vector<float>& inv_freq) {
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

Status DecoderModel::compute_rope_frequencies() {
  const ModelConfig& c = config_;
  const RopeScaling& s = c.rope_scaling;
  std::vector<float> global =
      rope_inv_freq(c.rope_theta, c.n_rot, s.kind == RopeScaling::Kind::kLinear ? s.factor : 1.0);
  if (s.kind == RopeScaling::Kind::kLlama3) apply_llama3_scaling(s, global);
  // GGUF Llama 3 files carry the same adjustment precomputed as divisors.
  if (has_tensor("rope_freqs.weight")) {
    DI_ASSIGN_OR_RETURN(std::vector<float> factors, read_vector("rope_freqs.weight", c.n_rot / 2));
    for (size_t i = 0; i < global.size(); ++i) global[i] /= factors[i];
  }
  DI_ASSIGN_OR_RETURN(inv_freq_global, weights_->add_vector(global));
  DI_ASSIGN_OR_RETURN(inv_freq_sliding, weights_->add_vector(rope_inv_freq(spec_.rope_theta_sliding, c.n_rot, 1.0)));
  return {};
}

std::vector<KvGroupSpec> DecoderModel::kv_groups() const {
  KvGroupSpec full;
  full.name = "full";
  full.kind = KvGroupKind::kFull;
  full.n_head_kv = config_.n_head_kv;
  full.head_dim = config_.head_dim;
  KvGroupSpec sliding = full;
  sliding.name = "sliding";
  sliding.kind = KvGroupKind::kSlidingWindow;
  sliding.window = spec_.window;
  for (size_t l = 0; l < layers.size(); ++l) {
    (layers[l].kv_group == kSlidingGroup ? sliding : full).layers.push_back(static_cast<int32_t>(l));
  }
  // The full group stays even without layers: its blocks index the prefix cache.
  std::vector<KvGroupSpec> groups{std::move(full)};
  if (has_sliding_layers()) groups.push_back(std::move(sliding));
  return groups;
}

DecoderRunner::DecoderRunner(const DecoderModel& model) : model_(model), queue_(model.backend().new_queue()) {}

Status DecoderRunner::ensure_capacity(int64_t n, int64_t n_logit_rows) {
  backend::Backend& be = model_.backend();
  const ModelConfig& c = model_.config();
  const DecoderSpec& s = model_.spec_;
  const auto grow = [&](backend::DeviceBuffer& b, int64_t elems) -> Status {
    const size_t bytes = static_cast<size_t>(elems) * 4;  // f32 and i32 alike
    if (b.bytes() >= bytes) return {};
    b = backend::DeviceBuffer();  // the old buffer goes first: peak memory stays one copy
    DI_ASSIGN_OR_RETURN(b, be.allocate(bytes));
    return {};
  };
  if (n > a_.n_tokens) {
    const int64_t rows = s.n_expert > 0 ? n * s.n_expert_used : n;
    const int64_t n_ff = s.n_expert > 0 ? s.n_ff_expert : c.n_ff;
    for (auto* b : {&a_.x, &a_.h, &a_.out}) DI_RETURN_IF_ERROR(grow(*b, n * c.n_embd));
    for (auto* b : {&a_.q, &a_.att}) DI_RETURN_IF_ERROR(grow(*b, n * c.n_head * c.head_dim));
    for (auto* b : {&a_.k, &a_.v}) DI_RETURN_IF_ERROR(grow(*b, n * c.n_head_kv * c.head_dim));
    for (auto* b : {&a_.gate, &a_.up}) DI_RETURN_IF_ERROR(grow(*b, rows * n_ff));
    if (s.n_expert > 0) {
      DI_RETURN_IF_ERROR(grow(a_.router, n * s.n_expert));
      for (auto* b : {&a_.route_ids, &a_.route_w, &a_.order}) DI_RETURN_IF_ERROR(grow(*b, rows));
      DI_RETURN_IF_ERROR(grow(a_.offsets, s.n_expert + 1));
      for (auto* b : {&a_.xs, &a_.ys}) DI_RETURN_IF_ERROR(grow(*b, rows * c.n_embd));
    }
    a_.n_tokens = n;
  }
  if (n_logit_rows > a_.n_logit_rows) {
    DI_RETURN_IF_ERROR(grow(a_.logits, n_logit_rows * c.n_vocab));
    DI_RETURN_IF_ERROR(grow(a_.best, n_logit_rows));
    a_.n_logit_rows = n_logit_rows;
  }
  return {};
}

// h (normed input) -> out (attention branch output, before any post-norm).
void DecoderRunner::attention_block(const LayerWeights& L, int32_t layer, int64_t n, backend::KvCache& kv) {
  const DecoderModel& m = model_;
  const ModelConfig& c = m.config();
  const DecoderSpec& s = m.spec_;
  backend::Queue& q = *queue_;
  const int64_t q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const Tensor h = f32(a_.h, n, c.n_embd), qt = f32(a_.q, n, q_dim), kt = f32(a_.k, n, kv_dim),
               vt = f32(a_.v, n, kv_dim), att = f32(a_.att, n, q_dim);
  const backend::MatmulTarget qkv[] = {{&L.wq, qt, L.bq}, {&L.wk, kt, L.bk}, {&L.wv, vt, L.bv}};
  q.matmul_group(qkv, h);
  if (s.qk_norm) {
    q.rms_norm(qt.reshaped(n * c.n_head, c.head_dim), L.q_norm, eps, qt.reshaped(n * c.n_head, c.head_dim));
    q.rms_norm(kt.reshaped(n * c.n_head_kv, c.head_dim), L.k_norm, eps, kt.reshaped(n * c.n_head_kv, c.head_dim));
  }
  const auto pairing =
      c.rope_style == RopeStyle::kInterleaved ? backend::RopePairing::kInterleaved : backend::RopePairing::kHalf;
  const Tensor& inv_freq = L.sliding ? m.inv_freq_sliding : m.inv_freq_global;
  q.rope(qt, {c.n_head, c.head_dim, c.n_rot, pairing}, inv_freq);
  q.rope(kt, {c.n_head_kv, c.head_dim, c.n_rot, pairing}, inv_freq);
  // K and V rows go to their sequences' cache rows before attention reads them. A replayed
  // position's full-attention rows are already cached, possibly shared: they stay as they are
  // (the replay's recomputed rows may differ from them in the last bits, or more).
  q.store_kv(kv, L.kv_group, layer, kt, vt);
  const float scale = s.attention_scale > 0 ? s.attention_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const backend::AttentionParams params{c.n_head, c.n_head_kv, c.head_dim, scale,
                                        L.sliding ? s.window : c.sliding_window};
  q.attention(params, qt, kv, L.kv_group, layer, att);
  q.matmul(L.wo, att, f32(a_.out, n, c.n_embd), Tensor{});
}

// h -> out.
void DecoderRunner::dense_ffn(const Ffn& f, int64_t n) {
  const ModelConfig& c = model_.config();
  backend::Queue& q = *queue_;
  const Tensor gate = f32(a_.gate, n, c.n_ff), up = f32(a_.up, n, c.n_ff);
  const backend::MatmulTarget gate_up[] = {{&f.gate, gate, {}}, {&f.up, up, {}}};
  q.matmul_group(gate_up, f32(a_.h, n, c.n_embd));
  q.gated_activation(model_.spec_.activation == FfnActivation::kGeluTanh ? backend::Activation::kGeluTanh
                                                                         : backend::Activation::kSilu,
                     gate, up);
  q.matmul(f.down, gate, f32(a_.out, n, c.n_embd), Tensor{});
}

// h -> out: each token's k chosen experts, weighted by their router probabilities. Tokens are
// grouped by expert so each expert's matrices stream once per batch.
void DecoderRunner::moe_ffn(const LayerWeights& L, int64_t n) {
  const ModelConfig& c = model_.config();
  const DecoderSpec& s = model_.spec_;
  backend::Queue& q = *queue_;
  const int64_t k = s.n_expert_used, rows = n * k;
  const Tensor h = f32(a_.h, n, c.n_embd), router = f32(a_.router, n, s.n_expert);
  const Tensor ids = a_.route_ids.tensor(DType::kI32, n, k), weights = f32(a_.route_w, n, k);
  const Tensor order = a_.order.tensor(DType::kI32, 1, rows), offsets = a_.offsets.tensor(DType::kI32, 1, s.n_expert + 1);
  const Tensor xs = f32(a_.xs, rows, c.n_embd), ys = f32(a_.ys, rows, c.n_embd);
  const Tensor gate = f32(a_.gate, rows, s.n_ff_expert), up = f32(a_.up, rows, s.n_ff_expert);
  q.matmul(L.router, h, router, Tensor{});
  q.route_top_k(router, k, s.expert_weights_norm, ids, weights);
  q.moe_dispatch(ids, s.n_expert, order, offsets);
  q.moe_gather(h, order, k, xs);
  const backend::GroupedTarget gate_up[] = {{L.expert_gate, gate}, {L.expert_up, up}};
  q.grouped_matmul(gate_up, offsets, xs);
  q.gated_activation(s.activation == FfnActivation::kGeluTanh ? backend::Activation::kGeluTanh
                                                              : backend::Activation::kSilu,
                     gate, up);
  const backend::GroupedTarget down[] = {{L.expert_down, ys}};
  q.grouped_matmul(down, offsets, gate);
  q.moe_combine(ys, order, weights, f32(a_.out, n, c.n_embd));
}

Status DecoderRunner::run(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences,
                          backend::KvCache& kv) {
  const DecoderModel& m = model_;
  const ModelConfig& c = m.config();
  const DecoderSpec& s = m.spec_;
  n_logit_rows_ = 0;
  DI_RETURN_IF_ERROR(inputs_.build(tokens, sequences, kv, m.has_sliding_layers() ? 2 : 1, c.n_vocab));
  const int64_t n = inputs_.n_tokens(), n_rows = inputs_.n_output_rows();
  const float eps = static_cast<float>(c.rms_norm_eps);
  DI_RETURN_IF_ERROR(ensure_capacity(n, n_rows));
  backend::Queue& q = *queue_;
  DI_RETURN_IF_ERROR(q.set_batch(inputs_.batch()));
  const Tensor x = f32(a_.x, n, c.n_embd), h = f32(a_.h, n, c.n_embd), out = f32(a_.out, n, c.n_embd);

  q.embed(m.token_embd, x);
  if (s.embed_scale != 1.0f) q.scale(x, s.embed_scale);
  for (int32_t l = 0; l < static_cast<int32_t>(c.n_layer); ++l) {
    const LayerWeights& L = m.layers[static_cast<size_t>(l)];
    q.rms_norm(x, L.attn_norm, eps, h);
    attention_block(L, l, n, kv);
    if (s.sandwich_norms) q.rms_norm(out, L.post_attn_norm, eps, out);
    q.add(x, out);

    q.rms_norm(x, L.ffn_norm, eps, h);
    if (s.n_expert > 0) {
      moe_ffn(L, n);
    } else {
      dense_ffn(L.ffn, n);
    }
    if (s.sandwich_norms) q.rms_norm(out, L.post_ffn_norm, eps, out);
    q.add(x, out);
  }

  // Only the rows whose logits are wanted go through the final norm and the output head.
  argmax_only_ = false;
  if (n_rows > 0) {
    const Tensor hr = f32(a_.h, n_rows, c.n_embd);
    q.gather_output_rows(x, hr);
    q.rms_norm(hr, m.output_norm, eps, hr);
    // Greedy rows alone: their choices straight from the head (the soft cap's rounding can tie
    // logits that differ before it, so a capped head writes its logits).
    argmax_only_ = inputs_.argmax_only() && s.final_logit_softcap <= 0 &&
                   m.backend().supports({backend::Op::kMatmulArgmax, m.output.dtype});
    if (argmax_only_) {
      const Tensor best = a_.best.tensor(DType::kI32, n_rows, 1);
      q.matmul_argmax(m.output, hr, best);
      best_.resize(static_cast<size_t>(n_rows));
      q.download(best, best_.data());
    } else {
      const Tensor logits = f32(a_.logits, n_rows, c.n_vocab);
      q.matmul(m.output, hr, logits, Tensor{});
      if (s.final_logit_softcap > 0) q.soft_cap(logits, s.final_logit_softcap);
      if (m.backend().host_memory()) {
        host_logits_ = static_cast<const float*>(a_.logits.data());
      } else {
        if (logits_.size() < static_cast<size_t>(n_rows * c.n_vocab)) logits_.resize(static_cast<size_t>(n_rows * c.n_vocab));
        q.download(logits, logits_.data());
        host_logits_ = logits_.data();
      }
    }
  }
  DI_RETURN_IF_ERROR(q.sync());
  n_logit_rows_ = n_rows;
  return {};
}

std::span<const float> DecoderRunner::logits(int64_t i) const {
  const int64_t n_vocab = model_.config().n_vocab;
  DI_ICHECK(i >= 0 && i < n_logit_rows_ && !argmax_only_);
  return {host_logits_ + i * n_vocab, static_cast<size_t>(n_vocab)};
}

int32_t DecoderRunner::greedy_token(int64_t i) const {
  DI_ICHECK(i >= 0 && i < n_logit_rows_);
  return argmax_only_ ? best_[static_cast<size_t>(i)] : -1;
}

}  // namespace

Status read_decoder_config(const TensorSource& source, double default_rms_eps, ModelConfig* config) {
  DI_RETURN_IF_ERROR(read_common_hparams(source, default_rms_eps, config));
  const Metadata& md = source.metadata();
  ModelConfig& c = *config;
  const std::string p = c.architecture + ".";
  c.rope_style = RopeStyle::kHalf;
  DI_ASSIGN_OR_RETURN(std::string scaling, md.get_string_or(p + "rope.scaling.type", "none"));
  if (scaling == "linear") {
    c.rope_scaling.kind = RopeScaling::Kind::kLinear;
    DI_ASSIGN_OR_RETURN(c.rope_scaling.factor, md.get_float(p + "rope.scaling.factor"));
  } else if (scaling == "llama3") {
    RopeScaling& s = c.rope_scaling;
    s.kind = RopeScaling::Kind::kLlama3;
    DI_ASSIGN_OR_RETURN(s.factor, md.get_float(p + "rope.scaling.factor"));
    DI_ASSIGN_OR_RETURN(s.low_freq_factor, md.get_float_or(p + "rope.scaling.low_freq_factor", 1.0));
    DI_ASSIGN_OR_RETURN(s.high_freq_factor, md.get_float_or(p + "rope.scaling.high_freq_factor", 4.0));
    DI_ASSIGN_OR_RETURN(uint64_t orig, md.get_uint(p + "rope.scaling.original_context_length"));
    s.original_context = static_cast<int64_t>(orig);
  } else if (scaling != "none") {
    return unimplemented(source.path() + ": rope scaling '" + scaling + "' is not supported for " + c.architecture);
  }
  return {};
}

Result<std::unique_ptr<Model>> create_decoder_model(std::unique_ptr<TensorSource> source, ModelConfig config,
                                                    DecoderSpec spec, backend::Backend& backend) {
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
    return invalid_argument(source->path() + ": metadata key '" + config.architecture +
                            ".feed_forward_length' is missing");
  }
  auto model = std::make_unique<DecoderModel>(std::move(source), std::move(config), std::move(spec), backend);
  DI_RETURN_IF_ERROR(model->check_ops());
  DI_RETURN_IF_ERROR(model->bind_weights());
  DI_RETURN_IF_ERROR(model->compute_rope_frequencies());
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace deepinfer
