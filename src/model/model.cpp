#include "model/model.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "model/arch/registry.h"

namespace deepinfer {

Result<std::unique_ptr<Model>> Model::load(const std::string& path) {
  DI_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> source, open_tensor_source(path));
  DI_ASSIGN_OR_RETURN(std::string arch, source->metadata().get_string("general.architecture"));
  const ArchEntry* entry = find_architecture(arch);
  if (entry == nullptr) {
    std::string known;
    for (const ArchEntry& e : registered_architectures()) known += (known.empty() ? "" : ", ") + std::string(e.name);
    return unimplemented(path + ": architecture '" + arch + "' is not supported (supported: " + known + ")");
  }
  return entry->create(std::move(source));
}

PagedKvCache::PagedKvCache(const ModelConfig& config, int64_t n_full, int64_t n_sliding, int64_t block_size,
                           DType dtype)
    : n_blocks_(n_full),
      n_sliding_blocks_(n_sliding),
      layout_{block_size, config.n_head_kv, config.head_dim},
      dtype_(dtype) {
  DI_ICHECK(dtype == DType::kF32 || dtype == DType::kF16);
  if (config.has_sliding_layers()) layer_sliding_ = config.layer_sliding;
  layer_offset_.resize(static_cast<size_t>(config.n_layer));
  int64_t total = 0;
  for (int64_t l = 0; l < config.n_layer; ++l) {
    layer_offset_[static_cast<size_t>(l)] = total;
    total += n_blocks(l) * layout_.block_elems();
  }
  k_ = PageBuffer(static_cast<size_t>(total) * element_bytes());
  v_ = PageBuffer(static_cast<size_t>(total) * element_bytes());
}

void PagedKvCache::store(int64_t layer, int64_t row, const float* k, const float* v) {
  cpu::store_kv(layout_, dtype_, row, k, v, k_data(layer), v_data(layer));
}

namespace {

// A single sequence over a private cache whose block table is the identity, so positions map
// to rows directly. Long inputs go through in batches of kMaxBatch tokens to bound scratch.
class SequenceContext final : public InferenceContext {
 public:
  SequenceContext(const Model& model, int64_t n_ctx, DType kv_dtype)
      : n_ctx_(n_ctx),
        kv_(model.config(), (n_ctx + kBlockSize - 1) / kBlockSize, kBlockSize, kv_dtype),
        block_table_(static_cast<size_t>(kv_.n_blocks())),
        runner_(model.new_batch_runner()),
        n_vocab_(model.config().n_vocab) {
    std::iota(block_table_.begin(), block_table_.end(), 0);
  }

  Status eval(std::span<const int32_t> tokens, LogitsMode mode, ThreadPool& pool) override {
    if (tokens.empty()) return invalid_argument("eval needs at least one token");
    if (n_past_ + static_cast<int64_t>(tokens.size()) > n_ctx_) {
      return out_of_range("the sequence needs " + std::to_string(n_past_ + tokens.size()) +
                          " positions but the context holds " + std::to_string(n_ctx_));
    }
    logits_.clear();
    n_rows_ = 0;
    for (size_t begin = 0; begin < tokens.size(); begin += kMaxBatch) {
      const size_t count = std::min<size_t>(kMaxBatch, tokens.size() - begin);
      const bool last = begin + count == tokens.size();
      BatchSequence seq;
      seq.n_tokens = static_cast<int64_t>(count);
      seq.first_position = n_past_;
      seq.block_table = block_table_;
      seq.logits = mode == LogitsMode::kLast && !last ? LogitsMode::kNone : mode;
      DI_RETURN_IF_ERROR(runner_->run(tokens.subspan(begin, count), std::span<const BatchSequence>(&seq, 1), kv_, pool));
      for (int64_t r = 0; r < runner_->n_logit_rows(); ++r) {
        auto row = runner_->logits(r);
        logits_.insert(logits_.end(), row.begin(), row.end());
        ++n_rows_;
      }
      n_past_ += static_cast<int64_t>(count);
    }
    return {};
  }

  std::span<const float> logits(int64_t i) const override {
    return {logits_.data() + i * n_vocab_, static_cast<size_t>(n_vocab_)};
  }
  int64_t n_logit_rows() const override { return n_rows_; }
  int64_t n_past() const override { return n_past_; }
  int64_t n_ctx() const override { return n_ctx_; }
  void reset() override {
    n_past_ = 0;
    n_rows_ = 0;
  }

 private:
  static constexpr int64_t kBlockSize = 16;
  static constexpr size_t kMaxBatch = 512;

  int64_t n_ctx_;
  PagedKvCache kv_;
  std::vector<int32_t> block_table_;
  std::unique_ptr<BatchRunner> runner_;
  int64_t n_vocab_;
  int64_t n_past_ = 0;
  std::vector<float> logits_;
  int64_t n_rows_ = 0;
};

}  // namespace

Result<std::unique_ptr<InferenceContext>> Model::new_context(int64_t n_ctx, DType kv_dtype) const {
  if (n_ctx <= 0) return invalid_argument("context size must be positive, got " + std::to_string(n_ctx));
  if (kv_dtype != DType::kF32 && kv_dtype != DType::kF16) {
    return invalid_argument("the KV cache holds f32 or f16, not " + std::string(dtype_name(kv_dtype)));
  }
  return std::unique_ptr<InferenceContext>(new SequenceContext(*this, n_ctx, kv_dtype));
}

}  // namespace deepinfer
