#include "model/loader/ds4_gguf.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

namespace deepinfer {
namespace {

constexpr std::string_view kFrom = "deepseek4.";
constexpr std::string_view kTo = "deepseek_v4.";

MetaValue u32(uint64_t v) { return MetaValue::of_uint(v, MetaType::kU32); }
MetaValue f32(double v) { return MetaValue::of_float(v, MetaType::kF32); }

class KeyReader {
 public:
  KeyReader(Metadata& md, const std::string& path) : md_(md), path_(path) {}

  Result<uint64_t> uint(std::string_view key) const { return named(md_.get_uint(std::string(kFrom) + std::string(key))); }
  Result<double> real(std::string_view key) const { return named(md_.get_float(std::string(kFrom) + std::string(key))); }
  bool has(std::string_view key) const { return md_.has(std::string(kFrom) + std::string(key)); }

  Status copy_uint(std::string_view from, std::string_view to) {
    DI_ASSIGN_OR_RETURN(uint64_t v, uint(from));
    md_.set(std::string(kTo) + std::string(to), u32(v));
    return {};
  }
  Status copy_float(std::string_view from, std::string_view to) {
    DI_ASSIGN_OR_RETURN(double v, real(from));
    md_.set(std::string(kTo) + std::string(to), f32(v));
    return {};
  }
  template <typename T>
  Result<T> named(Result<T> r) const {
    if (r.ok()) return r;
    return Status(r.status().code(), path_ + ": ds4 GGUF layout: " + r.status().message());
  }

 private:
  Metadata& md_;
  const std::string& path_;
};

// blk.N.<suffix> -> layers.N.<official suffix>.
constexpr std::pair<std::string_view, std::string_view> kLayerNames[] = {
    {"hc_attn_fn.weight", "hc_attn_fn"},
    {"hc_attn_base.weight", "hc_attn_base"},
    {"hc_attn_scale.weight", "hc_attn_scale"},
    {"hc_ffn_fn.weight", "hc_ffn_fn"},
    {"hc_ffn_base.weight", "hc_ffn_base"},
    {"hc_ffn_scale.weight", "hc_ffn_scale"},
    {"attn_norm.weight", "attn_norm.weight"},
    {"attn_q_a.weight", "attn.wq_a.weight"},
    {"attn_q_a_norm.weight", "attn.q_norm.weight"},
    {"attn_q_b.weight", "attn.wq_b.weight"},
    {"attn_kv.weight", "attn.wkv.weight"},
    {"attn_kv_a_norm.weight", "attn.kv_norm.weight"},
    {"attn_sinks.weight", "attn.attn_sink"},
    {"attn_output_a.weight", "attn.wo_a.weight"},
    {"attn_output_b.weight", "attn.wo_b.weight"},
    {"attn_compressor_kv.weight", "attn.compressor.wkv.weight"},
    {"attn_compressor_gate.weight", "attn.compressor.wgate.weight"},
    {"attn_compressor_ape.weight", "attn.compressor.ape"},
    {"attn_compressor_norm.weight", "attn.compressor.norm.weight"},
    {"indexer.attn_q_b.weight", "attn.indexer.wq_b.weight"},
    {"indexer.proj.weight", "attn.indexer.weights_proj.weight"},
    {"indexer_compressor_kv.weight", "attn.indexer.compressor.wkv.weight"},
    {"indexer_compressor_gate.weight", "attn.indexer.compressor.wgate.weight"},
    {"indexer_compressor_ape.weight", "attn.indexer.compressor.ape"},
    {"indexer_compressor_norm.weight", "attn.indexer.compressor.norm.weight"},
    {"ffn_norm.weight", "ffn_norm.weight"},
    {"ffn_gate_inp.weight", "ffn.gate.weight"},
    {"exp_probs_b.bias", "ffn.gate.bias"},
    {"ffn_gate_tid2eid.weight", "ffn.gate.tid2eid"},
    {"ffn_gate_shexp.weight", "ffn.shared_experts.w1.weight"},
    {"ffn_up_shexp.weight", "ffn.shared_experts.w3.weight"},
    {"ffn_down_shexp.weight", "ffn.shared_experts.w2.weight"},
};
// Stacked experts: blk.N.<suffix> [n_expert, rows, cols] -> layers.N.ffn.experts.E.<w>.weight.
constexpr std::pair<std::string_view, std::string_view> kExpertNames[] = {
    {"ffn_gate_exps.weight", "w1"}, {"ffn_up_exps.weight", "w3"}, {"ffn_down_exps.weight", "w2"}};
constexpr std::pair<std::string_view, std::string_view> kTopNames[] = {
    {"token_embd.weight", "embed.weight"},       {"output.weight", "head.weight"},
    {"output_norm.weight", "norm.weight"},       {"output_hc_fn.weight", "hc_head_fn"},
    {"output_hc_base.weight", "hc_head_base"},   {"output_hc_scale.weight", "hc_head_scale"},
};

// "blk.12.attn_q_a.weight" -> (12, "attn_q_a.weight").
std::optional<std::pair<int64_t, std::string_view>> split_layer(std::string_view name) {
  constexpr std::string_view kBlk = "blk.";
  if (!name.starts_with(kBlk)) return std::nullopt;
  const size_t dot = name.find('.', kBlk.size());
  if (dot == std::string_view::npos || dot == kBlk.size()) return std::nullopt;
  const std::string_view digits = name.substr(kBlk.size(), dot - kBlk.size());
  if (digits.size() > 1 && digits[0] == '0') return std::nullopt;  // "blk.07." would alias "blk.7."
  int64_t layer = 0;
  for (char c : digits) {
    if (c < '0' || c > '9' || layer > (int64_t{1} << 40)) return std::nullopt;
    layer = layer * 10 + (c - '0');
  }
  return std::make_pair(layer, name.substr(dot + 1));
}

Status rename_tensors(GgufContents& contents, const std::string& path) {
  // Experts a stacked tensor may hold: the file's count (checked against the model later), or a
  // bound far above any release when the key is missing, so a hostile shape cannot make views
  // without end.
  uint64_t max_experts = 4096;
  if (Result<uint64_t> n = contents.metadata.get_uint_or(std::string(kFrom) + "expert_count", 0); n.ok() && *n > 0) {
    max_experts = *n;
  }
  std::vector<TensorView> out;
  for (TensorView& t : contents.tensors) {
    if (auto top = std::find_if(std::begin(kTopNames), std::end(kTopNames),
                                [&](const auto& m) { return t.name == m.first; });
        top != std::end(kTopNames)) {
      t.name = std::string(top->second);
      out.push_back(std::move(t));
      continue;
    }
    const auto layer = split_layer(t.name);
    if (!layer) {
      out.push_back(std::move(t));  // mtp.* and anything else: kept, never bound
      continue;
    }
    const std::string prefix = "layers." + std::to_string(layer->first) + ".";
    const std::string_view suffix = layer->second;
    if (auto m = std::find_if(std::begin(kLayerNames), std::end(kLayerNames),
                              [&](const auto& e) { return suffix == e.first; });
        m != std::end(kLayerNames)) {
      t.name = prefix + std::string(m->second);
      out.push_back(std::move(t));
      continue;
    }
    auto e = std::find_if(std::begin(kExpertNames), std::end(kExpertNames),
                          [&](const auto& x) { return suffix == x.first; });
    if (e == std::end(kExpertNames)) {
      out.push_back(std::move(t));
      continue;
    }
    if (t.shape.size() != 3 || t.shape[0] <= 0 || t.shape[1] <= 0 || t.shape[2] <= 0 ||
        static_cast<uint64_t>(t.shape[0]) > max_experts) {
      return invalid_argument(path + ": tensor '" + t.name + "' has shape " + t.shape_string() +
                              "; ds4 stacks a layer's experts as [n_expert, rows, cols] with n_expert up to " +
                              std::to_string(max_experts));
    }
    // Expert x's rows are one contiguous slab: the views share the file's bytes.
    const size_t slab = static_cast<size_t>(t.shape[1]) * t.row_bytes();
    for (int64_t x = 0; x < t.shape[0]; ++x) {
      TensorView v;
      v.name = prefix + "ffn.experts." + std::to_string(x) + "." + std::string(e->second) + ".weight";
      v.dtype = t.dtype;
      v.shape = {t.shape[1], t.shape[2]};
      v.data = t.data + static_cast<size_t>(x) * slab;
      v.n_bytes = slab;
      v.file = t.file;
      out.push_back(std::move(v));
    }
  }
  std::set<std::string_view> names;
  for (const TensorView& t : out) {
    if (!names.insert(t.name).second) {
      return invalid_argument(path + ": two tensors are both '" + t.name + "' in ds4's layout (one under its own name, "
                              "one renamed from ds4's)");
    }
  }
  contents.tensors = std::move(out);
  return {};
}

bool has_tensor(const GgufContents& contents, const std::string& name) {
  return std::any_of(contents.tensors.begin(), contents.tensors.end(),
                     [&](const TensorView& t) { return t.name == name; });
}

Status translate_keys(GgufContents& contents, const std::string& path) {
  Metadata& md = contents.metadata;
  KeyReader k(md, path);
  md.set("general.architecture", MetaValue::of_string("deepseek_v4"));
  md.set("deepinfer.source_format", MetaValue::of_string("gguf (ds4)"));
  static constexpr std::pair<std::string_view, std::string_view> kUints[] = {
      {"block_count", "block_count"},
      {"embedding_length", "embedding_length"},
      {"attention.head_count", "attention.head_count"},
      {"attention.head_count_kv", "attention.head_count_kv"},
      {"attention.key_length", "attention.key_length"},
      {"rope.dimension_count", "rope.dimension_count"},
      {"attention.q_lora_rank", "q_lora_rank"},
      {"attention.output_lora_rank", "o_lora_rank"},
      {"attention.output_group_count", "o_groups"},
      {"attention.sliding_window", "attention.sliding_window"},
      {"attention.indexer.head_count", "index_n_heads"},
      {"attention.indexer.key_length", "index_head_dim"},
      {"attention.indexer.top_k", "index_topk"},
      {"expert_count", "expert_count"},
      {"expert_used_count", "expert_used_count"},
      {"expert_shared_count", "expert_shared_count"},
      {"expert_feed_forward_length", "expert_feed_forward_length"},
      {"hyper_connection.count", "hc_mult"},
      {"hyper_connection.sinkhorn_iterations", "hc_sinkhorn_iters"},
  };
  for (const auto& [from, to] : kUints) DI_RETURN_IF_ERROR(k.copy_uint(from, to));
  static constexpr std::pair<std::string_view, std::string_view> kFloats[] = {
      {"attention.layer_norm_rms_epsilon", "attention.layer_norm_rms_epsilon"},
      {"rope.freq_base", "rope.freq_base"},
      {"attention.compress_rope_freq_base", "compress_rope.freq_base"},
      {"expert_weights_scale", "expert_weights_scale"},
      {"hyper_connection.epsilon", "hc_eps"},
  };
  for (const auto& [from, to] : kFloats) DI_RETURN_IF_ERROR(k.copy_float(from, to));
  const std::string v4(kTo);

  // The vocabulary: the key, else the tokenizer's size, else the embedding's rows.
  if (k.has("vocab_size")) {
    DI_RETURN_IF_ERROR(k.copy_uint("vocab_size", "vocab_size"));
  } else if (auto tokens = md.get_string_array("tokenizer.ggml.tokens"); tokens.ok()) {
    md.set(v4 + "vocab_size", u32(tokens->size()));
  } else if (auto it = std::find_if(contents.tensors.begin(), contents.tensors.end(),
                                    [](const TensorView& t) { return t.name == "embed.weight"; });
             it != contents.tensors.end() && it->shape.size() == 2) {
    md.set(v4 + "vocab_size", u32(static_cast<uint64_t>(it->shape[0])));
  } else {
    return not_found(path + ": ds4 GGUF layout: neither deepseek4.vocab_size nor a tokenizer gives the vocabulary");
  }
  DI_ASSIGN_OR_RETURN(uint64_t n_ctx, k.named(md.get_uint_or(std::string(kFrom) + "context_length", 1048576)));
  md.set(v4 + "context_length", u32(n_ctx));
  DI_ASSIGN_OR_RETURN(uint64_t n_mtp, k.named(md.get_uint_or(std::string(kFrom) + "nextn_predict_layers", 0)));
  md.set(v4 + "nextn_predict_layers", u32(n_mtp));

  DI_ASSIGN_OR_RETURN(bool norm_topk, k.named(md.get_bool_or(std::string(kFrom) + "expert_weights_norm", true)));
  if (!norm_topk) return unimplemented(path + ": DeepSeek V4 with deepseek4.expert_weights_norm false is not supported");

  // One SwiGLU clamp for every layer.
  DI_ASSIGN_OR_RETURN(std::vector<double> clamps, k.named(md.get_float_array(std::string(kFrom) + "swiglu_clamp_exp")));
  DI_ASSIGN_OR_RETURN(uint64_t n_layer, k.uint("block_count"));
  if (clamps.size() < n_layer) {
    return invalid_argument(path + ": deepseek4.swiglu_clamp_exp has " + std::to_string(clamps.size()) +
                            " entries for " + std::to_string(n_layer) + " layers");
  }
  for (uint64_t l = 1; l < n_layer; ++l) {
    if (clamps[l] != clamps[0]) {
      return unimplemented(path + ": deepseek4.swiglu_clamp_exp differs between layers (" + std::to_string(clamps[0]) +
                           " and " + std::to_string(clamps[l]) + "); one clamp for every layer is supported");
    }
  }
  md.set(v4 + "swiglu_limit", f32(clamps.empty() ? 10.0 : clamps[0]));

  // Hash-routed layers come first.
  DI_ASSIGN_OR_RETURN(uint64_t n_hash, k.uint("hash_layer_count"));
  MetaArray hash{MetaType::kBool, {}};
  for (uint64_t l = 0; l < n_layer; ++l) hash.items.push_back(MetaValue::of_bool(l < n_hash));
  md.set(v4 + "mlp_hash", MetaValue::of_array(std::move(hash)));

  // Layer kinds from the ratios: 0 sliding; a compressed layer with an indexer CSA, else HCA.
  DI_ASSIGN_OR_RETURN(std::vector<int64_t> ratios,
                      k.named(md.get_int_array(std::string(kFrom) + "attention.compress_ratios")));
  if (ratios.size() < n_layer) {
    return invalid_argument(path + ": deepseek4.attention.compress_ratios has " + std::to_string(ratios.size()) +
                            " entries for " + std::to_string(n_layer) + " layers");
  }
  MetaArray kinds{MetaType::kU32, {}};
  int64_t rate_csa = 0, rate_hca = 0;
  for (uint64_t l = 0; l < n_layer; ++l) {
    const int64_t r = ratios[l];
    if (r < 0) return invalid_argument(path + ": deepseek4.attention.compress_ratios has a negative entry");
    const bool csa = r > 0 && has_tensor(contents, "layers." + std::to_string(l) + ".attn.indexer.wq_b.weight");
    int64_t& rate = csa ? rate_csa : rate_hca;
    if (r > 0 && rate != 0 && rate != r) {
      return unimplemented(path + ": layer " + std::to_string(l) + " compresses by " + std::to_string(r) + ", another " +
                           (csa ? "CSA" : "HCA") + " layer by " + std::to_string(rate) +
                           "; one rate per kind is supported");
    }
    if (r > 0) rate = r;
    kinds.items.push_back(u32(r == 0 ? 0 : csa ? 1 : 2));
  }
  md.set(v4 + "layer_types", MetaValue::of_array(std::move(kinds)));
  md.set(v4 + "compress_rate_csa", u32(rate_csa > 0 ? rate_csa : 4));
  md.set(v4 + "compress_rate_hca", u32(rate_hca > 0 ? rate_hca : 128));

  // YaRN on the compressed layers' rope (ds4 scales only those).
  if (k.has("rope.scaling.factor")) {
    DI_ASSIGN_OR_RETURN(double factor, k.real("rope.scaling.factor"));
    DI_ASSIGN_OR_RETURN(uint64_t original, k.uint("rope.scaling.original_context_length"));
    DI_ASSIGN_OR_RETURN(double beta_fast, k.real("rope.scaling.yarn_beta_fast"));
    DI_ASSIGN_OR_RETURN(double beta_slow, k.real("rope.scaling.yarn_beta_slow"));
    md.set(v4 + "compress_rope.scaling.type", MetaValue::of_string("yarn"));
    md.set(v4 + "compress_rope.scaling.factor", MetaValue::of_float(factor));
    md.set(v4 + "compress_rope.scaling.original_context_length", u32(original));
    md.set(v4 + "compress_rope.scaling.beta_fast", MetaValue::of_float(beta_fast));
    md.set(v4 + "compress_rope.scaling.beta_slow", MetaValue::of_float(beta_slow));
  }
  return {};
}

}  // namespace

Status adapt_ds4_gguf(GgufContents& contents, const std::string& path) {
  DI_RETURN_IF_ERROR(rename_tensors(contents, path));
  return translate_keys(contents, path);
}

}  // namespace deepinfer
