#include "model/model.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <type_traits>
#include <variant>

#include <openssl/evp.h>

#include "core/check.h"
#include "model/arch/registry.h"

namespace deepinfer {

Result<std::unique_ptr<Model>> Model::load(const std::string& path, backend::Backend& backend,
                                           const LoadOptions& options) {
  DI_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> source, open_tensor_source(path, options));
  DI_ASSIGN_OR_RETURN(std::string arch, source->metadata().get_string("general.architecture"));
  const ArchEntry* entry = find_architecture(arch);
  if (entry == nullptr) {
    std::string known;
    for (const ArchEntry& e : registered_architectures()) known += (known.empty() ? "" : ", ") + std::string(e.name);
    return unimplemented(path + ": architecture '" + arch + "' is not supported (supported: " + known + ")");
  }
  return entry->create(std::move(source), backend);
}

namespace {

Result<std::unique_ptr<backend::KvCache>> allocate_kv_groups(const Model& model, std::vector<KvGroupSpec> groups,
                                                             int64_t block_size, DType dtype,
                                                             std::span<const int64_t> n_blocks) {
  if (dtype != DType::kF32 && dtype != DType::kF16) {
    return invalid_argument("the KV cache holds f32 or f16, not " + std::string(dtype_name(dtype)));
  }
  if (block_size < 1) return invalid_argument("the KV block size must be at least 1");
  using backend::Op;
  const backend::OpUse uses[] = {{Op::kStoreKv, dtype}, {Op::kAttention, dtype}};
  DI_RETURN_IF_ERROR(backend::require(model.backend(), uses, model.source().path()));
  if (n_blocks.size() != 1 && n_blocks.size() != groups.size()) {
    return invalid_argument(std::to_string(n_blocks.size()) + " pool sizes given for " +
                            std::to_string(groups.size()) + " KV groups");
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].dtype = dtype;
    groups[g].block_size = block_size;
    groups[g].n_blocks = n_blocks[n_blocks.size() == 1 ? 0 : g];
  }
  return model.backend().allocate_kv(std::move(groups));
}

}  // namespace

Result<std::unique_ptr<backend::KvCache>> Model::new_kv_cache(int64_t block_size, DType dtype,
                                                              std::span<const int64_t> n_blocks) const {
  return allocate_kv_groups(*this, kv_groups(), block_size, dtype, n_blocks);
}

Result<std::unique_ptr<backend::KvCache>> Model::new_draft_kv_cache(int64_t block_size, DType dtype,
                                                                    std::span<const int64_t> n_blocks) const {
  std::vector<KvGroupSpec> groups = draft_kv_groups();
  if (groups.empty()) return failed_precondition(source().path() + " has no draft layers");
  return allocate_kv_groups(*this, std::move(groups), block_size, dtype, n_blocks);
}

namespace {

// A single sequence over a private cache whose block tables are the identity, so positions map
// to rows directly. Long inputs go through in batches of kMaxBatch tokens to bound scratch.
class SequenceContext final : public InferenceContext {
 public:
  static Result<std::unique_ptr<InferenceContext>> create(const Model& model, int64_t n_ctx, DType kv_dtype) {
    // Blocks of 16 tokens, or a multiple that holds whole compressed rows (DeepSeek V4's
    // HCA rows summarise 128 tokens).
    int64_t block_size = kBlockSize;
    for (const KvGroupSpec& g : model.kv_groups()) block_size = std::lcm(block_size, g.tokens_per_row);
    auto ctx = std::unique_ptr<SequenceContext>(new SequenceContext(model, n_ctx, block_size));
    DI_ASSIGN_OR_RETURN(ctx->kv_, model.new_kv_cache(block_size, kv_dtype, ctx->n_blocks()));
    return std::unique_ptr<InferenceContext>(std::move(ctx));
  }

  Status eval(std::span<const int32_t> tokens, LogitsMode mode) override {
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
      seq.block_tables.fill(block_table_);
      seq.logits = mode == LogitsMode::kLast && !last ? LogitsMode::kNone : mode;
      seq.lookback = std::span<const int32_t>(recent_).last(std::min<size_t>(recent_.size(), static_cast<size_t>(n_past_)));
      DI_RETURN_IF_ERROR(runner_->run(tokens.subspan(begin, count), std::span<const BatchSequence>(&seq, 1), *kv_));
      // Keep the last lookback_ tokens for the next pass.
      recent_.insert(recent_.end(), tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                     tokens.begin() + static_cast<std::ptrdiff_t>(begin + count));
      if (recent_.size() > static_cast<size_t>(lookback_)) {
        recent_.erase(recent_.begin(), recent_.end() - lookback_);
      }
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
    recent_.clear();
  }

 private:
  static constexpr int64_t kBlockSize = 16;
  static constexpr size_t kMaxBatch = 512;

  SequenceContext(const Model& model, int64_t n_ctx, int64_t block_size)
      : n_ctx_(n_ctx),
        block_size_(block_size),
        block_table_(static_cast<size_t>(n_blocks())),
        runner_(model.new_batch_runner()),
        n_vocab_(model.config().n_vocab),
        lookback_(model.lookback_tokens()) {
    std::iota(block_table_.begin(), block_table_.end(), 0);
  }
  int64_t n_blocks() const { return (n_ctx_ + block_size_ - 1) / block_size_; }

  int64_t n_ctx_;
  int64_t block_size_;
  std::unique_ptr<backend::KvCache> kv_;  // every group as large as the context
  std::vector<int32_t> block_table_;      // the identity, for every group
  std::unique_ptr<BatchRunner> runner_;
  int64_t n_vocab_;
  int64_t n_past_ = 0;
  int64_t lookback_ = 0;
  std::vector<int32_t> recent_;           // the last lookback_ tokens evaluated
  std::vector<float> logits_;
  int64_t n_rows_ = 0;
};

using Digest = std::array<uint8_t, 32>;

Digest sha256(const uint8_t* data, size_t n) {
  Digest d{};
  unsigned int len = 0;
  DI_ICHECK(EVP_Digest(data, n, d.data(), &len, EVP_sha256(), nullptr) == 1 && len == d.size());
  return d;
}

// The metadata that shapes the computation, as text: every key but the tokenizer's and the
// general.* descriptions (name, author, URL...) other than the architecture.
std::string computation_metadata(const Metadata& md) {
  std::string out;
  const std::function<void(const MetaValue&)> append = [&](const MetaValue& v) {
    out += std::to_string(static_cast<int>(v.type));
    out += ':';
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            out += std::to_string(x.size());
            out += ':';
            out += x;
          } else if constexpr (std::is_same_v<T, std::shared_ptr<MetaArray>>) {
            out += '[';
            out += std::to_string(x->items.size());
            for (const MetaValue& item : x->items) append(item);
            out += "]";
          } else if constexpr (std::is_same_v<T, double>) {
            char buf[32];
            std::snprintf(buf, sizeof(buf), "%a", x);  // exact
            out += buf;
          } else {
            out += std::to_string(x);
          }
        },
        v.value);
    out += ";";
  };
  for (const auto& [key, value] : md.all()) {
    if (key.starts_with("tokenizer.")) continue;
    if (key.starts_with("general.") && key != "general.architecture") continue;
    out += key;
    out += '=';
    append(value);
  }
  return out;
}

}  // namespace

std::string model_fingerprint(const TensorSource& source, ThreadPool& pool) {
  // Tensors in chunks of 16 MiB, each hashed on its own so that the pool's threads share the
  // work; the fingerprint hashes the chunks' digests with each tensor's name, type and shape.
  // Draft layers (loaded or not) do not shape the model's own KV: they are left out.
  constexpr size_t kChunk = size_t{16} << 20;
  struct Chunk {
    const uint8_t* data;
    size_t n;
  };
  const Result<std::string> arch_or = source.metadata().get_string_or("general.architecture", "");
  const std::string arch = arch_or.ok() ? *arch_or : std::string();
  std::vector<const TensorView*> tensors;
  for (const TensorView& t : source.tensors()) {
    if (!is_draft_layer_tensor(arch, t.name)) tensors.push_back(&t);
  }
  std::sort(tensors.begin(), tensors.end(), [](const TensorView* a, const TensorView* b) { return a->name < b->name; });
  std::vector<Chunk> chunks;
  for (const TensorView* t : tensors) {
    for (size_t at = 0; at < t->n_bytes || at == 0; at += kChunk) {
      chunks.push_back({t->data + at, std::min(kChunk, t->n_bytes - std::min(at, t->n_bytes))});
      if (t->n_bytes == 0) break;
    }
  }
  std::vector<Digest> digests(chunks.size());
  pool.parallel_for(static_cast<int64_t>(chunks.size()), [&](int, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) digests[i] = sha256(chunks[i].data, chunks[i].n);
  });
  std::string record = "deepinfer-model-fingerprint-1\n" + computation_metadata(source.metadata()) + "\n";
  size_t next = 0;
  for (const TensorView* t : tensors) {
    record += t->name + " " + std::string(dtype_name(t->dtype)) + " " + t->shape_string() + " " +
              std::to_string(t->n_bytes) + "\n";
    for (size_t at = 0; at < t->n_bytes || at == 0; at += kChunk) {
      record.append(reinterpret_cast<const char*>(digests[next].data()), digests[next].size());
      ++next;
      if (t->n_bytes == 0) break;
    }
  }
  const Digest d = sha256(reinterpret_cast<const uint8_t*>(record.data()), record.size());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : d) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  return hex;
}

Result<std::unique_ptr<InferenceContext>> Model::new_context(int64_t n_ctx, DType kv_dtype) const {
  if (n_ctx <= 0) return invalid_argument("context size must be positive, got " + std::to_string(n_ctx));
  if (kv_dtype != DType::kF32 && kv_dtype != DType::kF16) {
    return invalid_argument("the KV cache holds f32 or f16, not " + std::string(dtype_name(kv_dtype)));
  }
  return SequenceContext::create(*this, n_ctx, kv_dtype);
}

}  // namespace deepinfer
