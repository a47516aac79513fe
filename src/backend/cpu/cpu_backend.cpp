#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "backend/cpu/attention.h"
#include "backend/cpu/dsv4_ops.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/peak.h"
#include "backend/cpu/packed.h"
#include "backend/cpu/quant.h"
#include "core/check.h"
#include "core/half.h"
#include "core/page_buffer.h"

namespace deepinfer::cpu {

namespace {

using backend::Tensor;

constexpr size_t kAlignment = 64;

const WeightMatrix& matrix_of(const backend::Matrix& m) { return *static_cast<const WeightMatrix*>(m.handle); }
const float* bias_of(const Tensor& t) { return t.empty() ? nullptr : t.f32(); }

class CpuWeightStore final : public backend::WeightStore {
 public:
  explicit CpuWeightStore(KernelChoice choice) : choice_(choice) {}

  Result<backend::Matrix> add_matrix(std::string_view name, DType dtype, const uint8_t* data, int64_t n_out,
                                     int64_t n_in) override {
    if (!quant_supported(dtype)) {
      return unimplemented("tensor '" + std::string(name) + "' has type " + std::string(dtype_name(dtype)) +
                           ", which the CPU backend does not support");
    }
    WeightMatrix m{dtype, data, n_out, n_in};
    // The reference kernels read the stored rows; the fast ones the packed copy where one exists.
    if (choice_ == KernelChoice::kFastest) packs_.pack(m);
    matrices_.push_back(m);
    return backend::Matrix{dtype, n_out, n_in, &matrices_.back()};
  }

  Result<Tensor> add_vector(std::span<const float> values) override {
    std::vector<float>& v = vectors_.emplace_back(values.begin(), values.end());
    vector_bytes_ += v.size() * sizeof(float);
    return Tensor{v.data(), DType::kF32, 1, static_cast<int64_t>(v.size())};
  }

  size_t bytes() const override { return packs_.bytes() + vector_bytes_; }

 private:
  KernelChoice choice_;
  PackedWeights packs_;
  std::deque<WeightMatrix> matrices_;  // deque: Matrix handles point into it
  std::deque<std::vector<float>> vectors_;
  size_t vector_bytes_ = 0;
};

// One pool per group; a layer's K (and V) is n_blocks blocks of KvLayout, layer after layer.
class CpuKvCache final : public backend::KvCache {
 public:
  struct Pool {
    KvLayout layout;
    std::vector<int32_t> slot_of_layer;  // model layer -> index in the group's layers, or -1
    size_t layer_bytes = 0;              // one layer's K (or V)
    PageBuffer k, v;                     // zero-filled (huge pages where the system has them)
  };

  static Result<std::unique_ptr<CpuKvCache>> create(std::vector<KvGroupSpec> groups) {
    if (groups.empty() || groups.size() > static_cast<size_t>(backend::kMaxKvGroups)) {
      return invalid_argument("a KV cache holds 1 to " + std::to_string(backend::kMaxKvGroups) + " groups, not " +
                              std::to_string(groups.size()));
    }
    auto cache = std::unique_ptr<CpuKvCache>(new CpuKvCache());
    for (const KvGroupSpec& g : groups) {
      if (g.dtype != DType::kF32 && g.dtype != DType::kF16) {
        return invalid_argument("KV group '" + g.name + "': the CPU backend stores f32 or f16, not " +
                                std::string(dtype_name(g.dtype)));
      }
      if (g.tokens_per_row < 1 || g.block_size % g.tokens_per_row != 0) {
        return unimplemented("KV group '" + g.name + "': a block of " + std::to_string(g.block_size) +
                             " tokens does not hold whole rows of " + std::to_string(g.tokens_per_row) + " tokens");
      }
      if (g.block_size < 1 || g.n_blocks < 0 || g.n_head_kv < 1 || g.head_dim < 1) {
        return invalid_argument("KV group '" + g.name + "' has a non-positive block size, pool or row shape");
      }
      Pool pool;
      pool.layout = {g.rows_per_block(), g.n_head_kv, g.head_dim};
      for (size_t i = 0; i < g.layers.size(); ++i) {
        const int32_t layer = g.layers[i];
        if (layer < 0) return invalid_argument("KV group '" + g.name + "' names a negative layer");
        if (static_cast<size_t>(layer) >= pool.slot_of_layer.size()) pool.slot_of_layer.resize(layer + 1, -1);
        if (pool.slot_of_layer[layer] >= 0) return invalid_argument("KV group '" + g.name + "' names a layer twice");
        pool.slot_of_layer[layer] = static_cast<int32_t>(i);
      }
      pool.layer_bytes = static_cast<size_t>(g.n_blocks * pool.layout.block_elems()) * dtype_row_bytes(g.dtype, 1);
      const size_t total = pool.layer_bytes * g.layers.size();
      DI_ASSIGN_OR_RETURN(pool.k, PageBuffer::allocate(total));
      if (!g.k_only) {
        DI_ASSIGN_OR_RETURN(pool.v, PageBuffer::allocate(total));
      }
      cache->bytes_ += (g.k_only ? 1 : 2) * total;
      cache->pools_.push_back(std::move(pool));
    }
    cache->groups_ = std::move(groups);
    return cache;
  }

  const std::vector<KvGroupSpec>& groups() const override { return groups_; }
  size_t bytes() const override { return bytes_; }
  std::string_view layout() const override { return "cpu-panels-1"; }
  void prefault() override {
    for (Pool& pool : pools_) {
      pool.k.prefault();
      pool.v.prefault();
    }
  }

  Status read_block(int group, int32_t block, std::span<uint8_t> out) const override {
    DI_RETURN_IF_ERROR(check_block(group, block, out.size()));
    copy_block(group, block, [&](uint8_t* pool_bytes, size_t n, size_t at) { std::memcpy(out.data() + at, pool_bytes, n); });
    return {};
  }

  Status write_block(int group, int32_t block, std::span<const uint8_t> in) override {
    DI_RETURN_IF_ERROR(check_block(group, block, in.size()));
    copy_block(group, block, [&](uint8_t* pool_bytes, size_t n, size_t at) { std::memcpy(pool_bytes, in.data() + at, n); });
    return {};
  }

  const Pool& pool(int group) const { return pools_[static_cast<size_t>(group)]; }
  // Layer `layer`'s K and V pools in group `group`.
  std::pair<uint8_t*, uint8_t*> layer_data(int group, int32_t layer) const {
    const Pool& p = pool(group);
    DI_ICHECK(layer >= 0 && static_cast<size_t>(layer) < p.slot_of_layer.size() && p.slot_of_layer[layer] >= 0);
    const size_t at = static_cast<size_t>(p.slot_of_layer[layer]) * p.layer_bytes;
    return {p.k.data() + at, p.v.data() == nullptr ? nullptr : p.v.data() + at};
  }

 private:
  CpuKvCache() = default;

  Status check_block(int group, int32_t block, size_t bytes) const {
    if (group < 0 || static_cast<size_t>(group) >= groups_.size()) return invalid_argument("no KV group " + std::to_string(group));
    const KvGroupSpec& g = groups_[static_cast<size_t>(group)];
    if (block < 0 || block >= g.n_blocks) {
      return invalid_argument("KV group '" + g.name + "' has no block " + std::to_string(block));
    }
    if (bytes != g.block_bytes()) {
      return invalid_argument("a block of KV group '" + g.name + "' is " + std::to_string(g.block_bytes()) +
                              " bytes, not " + std::to_string(bytes));
    }
    return {};
  }

  // fn(address in the pool, bytes, offset in the block's bytes) for each layer's K, then V.
  template <typename Fn>
  void copy_block(int group, int32_t block, Fn fn) const {
    const Pool& p = pool(group);
    const KvGroupSpec& g = groups_[static_cast<size_t>(group)];
    const size_t n = static_cast<size_t>(p.layout.block_elems()) * dtype_row_bytes(g.dtype, 1);
    size_t at = 0;
    for (size_t i = 0; i < g.layers.size(); ++i) {
      const size_t layer_at = i * p.layer_bytes + static_cast<size_t>(block) * n;
      fn(p.k.data() + layer_at, n, at);
      at += n;
      if (g.k_only) continue;
      fn(p.v.data() + layer_at, n, at);
      at += n;
    }
  }

  std::vector<KvGroupSpec> groups_;
  std::vector<Pool> pools_;
  size_t bytes_ = 0;
};

const CpuKvCache& cpu_cache(const backend::KvCache& kv) { return static_cast<const CpuKvCache&>(kv); }

class CpuQueue final : public backend::Queue {
 public:
  CpuQueue(ThreadPool& pool, KernelChoice choice) : pool_(pool), reference_(choice == KernelChoice::kReference) {}

  void upload(const void* host, const Tensor& dst) override { std::memcpy(dst.data, host, dst.bytes()); }
  void download(const Tensor& src, void* host) override { std::memcpy(host, src.data, src.bytes()); }

  Status set_batch(const backend::StepBatch& batch) override {
    const size_t n = batch.tokens.size();
    positions_.resize(n);
    token_seq_.resize(n);
    size_t t = 0;
    for (size_t s = 0; s < batch.sequences.size(); ++s) {
      const backend::StepSequence& seq = batch.sequences[s];
      if (seq.n_tokens < 0 || t + static_cast<size_t>(seq.n_tokens) > n) {
        return invalid_argument("the batch's sequences hold more tokens than the batch");
      }
      for (int64_t i = 0; i < seq.n_tokens; ++i, ++t) {
        positions_[t] = static_cast<int32_t>(seq.first_position + i);
        token_seq_[t] = static_cast<int32_t>(s);
      }
    }
    if (t != n) return invalid_argument("the batch's sequences hold fewer tokens than the batch");
    for (int32_t row : batch.output_rows) {
      if (row < 0 || static_cast<size_t>(row) >= n) return invalid_argument("an output row is outside the batch");
    }
    batch_ = batch;
    seq_kv_.resize(batch.sequences.size());
    return {};
  }

  void embed(const backend::Matrix& table, const Tensor& out) override {
    DI_ICHECK(out.rows == static_cast<int64_t>(batch_.tokens.size()) && out.cols == table.n_in);
    cpu::gather_rows(matrix_of(table), batch_.tokens, out.f32());
  }

  void matmul(const backend::Matrix& w, const Tensor& x, const Tensor& y, const Tensor& bias) override {
    DI_ICHECK(x.cols == w.n_in && y.cols == w.n_out && x.rows == y.rows);
    if (reference_) {
      matmul_reference(matrix_of(w), x.f32(), x.rows, y.f32(), bias_of(bias), scratch_, pool_);
    } else {
      cpu::matmul(matrix_of(w), x.f32(), x.rows, y.f32(), bias_of(bias), scratch_, pool_);
    }
  }

  void matmul_argmax(const backend::Matrix& w, const Tensor& x, const Tensor& best) override {
    DI_ICHECK(x.cols == w.n_in && best.rows == x.rows && best.cols == 1 && best.dtype == DType::kI32);
    if (reference_) {
      argmax_y_.resize(static_cast<size_t>(x.rows * w.n_out));
      matmul_reference(matrix_of(w), x.f32(), x.rows, argmax_y_.data(), nullptr, scratch_, pool_);
      cpu::argmax_rows(argmax_y_.data(), x.rows, w.n_out, best.i32());
    } else {
      cpu::matmul_argmax(matrix_of(w), x.f32(), x.rows, best.i32(), scratch_, pool_);
    }
  }

  void matmul_group(std::span<const backend::MatmulTarget> targets, const Tensor& x) override {
    if (reference_) {
      for (const backend::MatmulTarget& t : targets) matmul(*t.w, x, t.y, t.bias);
      return;
    }
    outputs_.clear();
    for (const backend::MatmulTarget& t : targets) {
      DI_ICHECK(x.cols == t.w->n_in && t.y.cols == t.w->n_out && x.rows == t.y.rows);
      outputs_.push_back({&matrix_of(*t.w), t.y.f32(), bias_of(t.bias)});
    }
    cpu::matmul_group(outputs_, x.f32(), x.rows, scratch_, pool_);
  }

  void rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) override {
    DI_ICHECK(w.n_elements() == x.cols && out.rows == x.rows && out.cols == x.cols);
    cpu::rms_norm(x.f32(), w.f32(), eps, x.rows, x.cols, out.f32(), pool_);
  }

  void rope(const Tensor& x, const backend::RopeParams& p, const Tensor& inv_freq) override {
    DI_ICHECK(x.rows == static_cast<int64_t>(positions_.size()) && x.cols == p.n_heads * p.head_dim);
    std::span<const int32_t> positions = positions_;
    if (p.position_offset != 0) {
      shifted_.resize(positions_.size());
      for (size_t t = 0; t < positions_.size(); ++t) {
        shifted_[t] = static_cast<int32_t>(positions_[t] + p.position_offset);
      }
      positions = shifted_;
    }
    const std::span<const float> freq(inv_freq.f32(), static_cast<size_t>(inv_freq.n_elements()));
    DI_ICHECK(static_cast<int64_t>(freq.size()) * 2 == p.n_rot);
    const RotaryPairing pairing =
        p.pairing == backend::RopePairing::kInterleaved ? RotaryPairing::kInterleaved : RotaryPairing::kHalf;
    const int64_t offset = p.trailing ? p.head_dim - p.n_rot : 0;
    const float sign = p.inverse ? -1.0f : 1.0f;
    if (reference_) {
      cpu::rope(x.f32(), x.rows, p.n_heads, p.head_dim, p.n_rot, positions, freq, pairing, offset, sign, pool_);
      return;
    }
    cpu::rope(x.f32(), x.rows, p.n_heads, p.head_dim, p.n_rot, rope_angles_.table(positions, freq, pool_), pairing,
              offset, sign, pool_);
  }

  void gated_activation(backend::Activation act, const Tensor& gate, const Tensor& up) override {
    DI_ICHECK(gate.n_elements() == up.n_elements());
    const bool silu = act == backend::Activation::kSilu;
    if (reference_) {
      (silu ? silu_mul_reference : gelu_tanh_mul_reference)(gate.f32(), up.f32(), gate.n_elements());
    } else {
      if (silu) {
        silu_mul(gate.f32(), up.f32(), gate.n_elements(), pool_);
      } else {
        gelu_tanh_mul(gate.f32(), up.f32(), gate.n_elements(), pool_);
      }
    }
  }

  void add(const Tensor& x, const Tensor& y) override {
    DI_ICHECK(x.n_elements() == y.n_elements());
    cpu::add(x.f32(), y.f32(), x.n_elements(), pool_);
  }

  void scale(const Tensor& x, float factor) override {
    float* a = x.f32();
    for (int64_t i = 0; i < x.n_elements(); ++i) a[i] *= factor;
  }

  void soft_cap(const Tensor& x, float cap) override {
    if (reference_) return cpu::soft_cap_reference(x.f32(), x.n_elements(), cap);
    cpu::soft_cap(x.f32(), x.n_elements(), cap, pool_);
  }

  void store_kv(backend::KvCache& kv, int group, int32_t layer, const Tensor& k, const Tensor& v) override {
    const CpuKvCache& cache = cpu_cache(kv);
    const CpuKvCache::Pool& p = cache.pool(group);
    const DType dtype = cache.groups()[static_cast<size_t>(group)].dtype;
    const int64_t row_elems = p.layout.n_head_kv * p.layout.head_dim;
    DI_ICHECK(k.cols == row_elems && v.cols == row_elems && k.rows == static_cast<int64_t>(positions_.size()));
    const auto [k_pool, v_pool] = cache.layer_data(group, layer);
    const int64_t bs = p.layout.block_size;
    if (cache.groups()[static_cast<size_t>(group)].k_only) {
      const int64_t r = cache.groups()[static_cast<size_t>(group)].tokens_per_row;
      for (size_t t = 0; t < positions_.size(); ++t) {
        const backend::StepSequence& seq = batch_.sequences[static_cast<size_t>(token_seq_[t])];
        // A compressed row is written by the token that closes it, at its first position.
        if ((positions_[t] + 1) % r != 0) continue;
        const int64_t first = positions_[t] + 1 - r;
        if (first < seq.first_write[static_cast<size_t>(group)]) continue;
        write_k_row(cache, group, k_pool, seq, first, k.f32() + static_cast<int64_t>(t) * row_elems);
      }
      return;
    }
    // Every token writes its own row (distinct sequence and position), so the tokens split over
    // the threads where there are 8192 elements or more (a prefill; 32 of Gemma 3's decode rows).
    uint8_t* const k_plane = k_pool;  // a lambda cannot capture a structured binding (clang)
    uint8_t* const v_plane = v_pool;
    auto store_tokens = [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const backend::StepSequence& seq = batch_.sequences[static_cast<size_t>(token_seq_[static_cast<size_t>(t)])];
        const int64_t pos = positions_[static_cast<size_t>(t)];
        if (pos < seq.first_write[static_cast<size_t>(group)]) continue;  // shared prefix rows stay
        const auto& table = seq.block_tables[static_cast<size_t>(group)];
        const int64_t row = static_cast<int64_t>(table[static_cast<size_t>(pos / bs)]) * bs + pos % bs;
        cpu::store_kv(p.layout, dtype, row, k.f32() + t * row_elems, v.f32() + t * row_elems, k_plane, v_plane);
      }
    };
    const auto n_tokens = static_cast<int64_t>(positions_.size());
    if (n_tokens * row_elems < 8192) return store_tokens(0, n_tokens);
    pool_.parallel_for(n_tokens, [&](int, int64_t begin, int64_t end) { store_tokens(begin, end); });
  }

  void attention(const backend::AttentionParams& a, const Tensor& q, const backend::KvCache& kv, int group,
                 int32_t layer, const Tensor& out) override {
    const CpuKvCache& cache = cpu_cache(kv);
    const CpuKvCache::Pool& p = cache.pool(group);
    const DType dtype = cache.groups()[static_cast<size_t>(group)].dtype;
    DI_ICHECK(a.n_head_kv == p.layout.n_head_kv && a.head_dim == p.layout.head_dim);
    DI_ICHECK(q.rows == static_cast<int64_t>(positions_.size()) && q.cols == a.n_head * a.head_dim);
    const auto [k_pool, v_pool] = cache.layer_data(group, layer);
    for (size_t s = 0; s < batch_.sequences.size(); ++s) {
      const backend::StepSequence& seq = batch_.sequences[s];
      seq_kv_[s] = {k_pool, v_pool, seq.block_tables[static_cast<size_t>(group)].data(), p.layout.block_size,
                    seq.min_position[static_cast<size_t>(group)], dtype};
    }
    const AttentionShape shape{a.n_head, a.n_head_kv, a.head_dim, a.scale, a.window};
    if (reference_) {
      attention_reference(shape, q.f32(), q.rows, positions_, seq_kv_, token_seq_, out.f32(), pool_);
    } else {
      cpu::attention(shape, q.f32(), q.rows, positions_, seq_kv_, token_seq_, out.f32(), pool_);
    }
  }

  void gather_output_rows(const Tensor& x, const Tensor& out) override {
    DI_ICHECK(out.rows == static_cast<int64_t>(batch_.output_rows.size()) && out.cols == x.cols);
    for (size_t r = 0; r < batch_.output_rows.size(); ++r) {
      std::copy_n(x.f32() + static_cast<int64_t>(batch_.output_rows[r]) * x.cols, x.cols,
                  out.f32() + static_cast<int64_t>(r) * x.cols);
    }
  }

  void route_top_k(const Tensor& logits, int64_t k, bool renormalize, const Tensor& ids,
                   const Tensor& weights) override {
    DI_ICHECK(ids.rows == logits.rows && ids.cols == k && weights.rows == logits.rows && weights.cols == k);
    for (int64_t t = 0; t < logits.rows; ++t) {
      cpu::route_top_k(logits.f32() + t * logits.cols, logits.cols, k, renormalize, ids.i32() + t * k,
                       weights.f32() + t * k);
    }
  }

  void moe_dispatch(const Tensor& ids, int64_t n_expert, const Tensor& order, const Tensor& offsets) override {
    const int64_t n = ids.n_elements();
    DI_ICHECK(order.n_elements() == n && offsets.n_elements() == n_expert + 1);
    int32_t* off = offsets.i32();
    std::fill_n(off, n_expert + 1, 0);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t e = ids.i32()[i];
      DI_ICHECK(e >= 0 && e < n_expert);
      ++off[e + 1];
    }
    for (int64_t e = 0; e < n_expert; ++e) off[e + 1] += off[e];
    cursor_.assign(off, off + n_expert);
    // Ascending (token, slot) within each expert: the order the experts' rows are summed in.
    for (int64_t i = 0; i < n; ++i) order.i32()[cursor_[static_cast<size_t>(ids.i32()[i])]++] = static_cast<int32_t>(i);
  }

  void moe_gather(const Tensor& x, const Tensor& order, int64_t k, const Tensor& xs) override {
    DI_ICHECK(xs.cols == x.cols && xs.rows == order.n_elements());
    for (int64_t i = 0; i < xs.rows; ++i) {
      std::copy_n(x.f32() + (order.i32()[i] / k) * x.cols, x.cols, xs.f32() + i * x.cols);
    }
  }

  void grouped_matmul(std::span<const backend::GroupedTarget> targets, const Tensor& offsets,
                      const Tensor& x) override {
    DI_ICHECK(!targets.empty());
    const int64_t n_expert = static_cast<int64_t>(targets[0].experts.size());
    DI_ICHECK(offsets.n_elements() == n_expert + 1);
    for (int64_t e = 0; e < n_expert; ++e) {
      const int64_t begin = offsets.i32()[e], m = offsets.i32()[e + 1] - begin;
      if (m == 0) continue;
      group_.clear();
      for (const backend::GroupedTarget& t : targets) {
        group_.push_back({&t.experts[static_cast<size_t>(e)], t.y.view_rows(begin, m), Tensor{}});
      }
      matmul_group(group_, x.view_rows(begin, m));
    }
  }

  void moe_combine(const Tensor& ys, const Tensor& order, const Tensor& weights, const Tensor& out) override {
    DI_ICHECK(ys.cols == out.cols && ys.rows == order.n_elements() && weights.n_elements() == order.n_elements());
    const int64_t k = weights.cols, d = out.cols;
    std::fill_n(out.f32(), out.n_elements(), 0.0f);
    for (int64_t i = 0; i < ys.rows; ++i) {
      const int32_t slot = order.i32()[i];
      float* o = out.f32() + (slot / k) * d;
      const float* y = ys.f32() + i * d;
      const float w = weights.f32()[slot];
      for (int64_t j = 0; j < d; ++j) o[j] += w * y[j];
    }
  }

  // ---- DeepSeek V4 ----

  void clamp(const Tensor& x, float lo, float hi) override {
    float* a = x.f32();
    for (int64_t i = 0; i < x.n_elements(); ++i) a[i] = std::min(std::max(a[i], lo), hi);
  }

  void hyper_pre(const backend::HyperParams& p, const Tensor& streams, const Tensor& mixes, const Tensor& base,
                 const Tensor& scale, const Tensor& collapsed, const Tensor& post, const Tensor& comb,
                 const Tensor& pre) override {
    const int64_t s = p.n_streams, d = collapsed.cols;
    const bool head = post.empty();
    DI_ICHECK(streams.cols == s * d && streams.rows == collapsed.rows && mixes.rows == streams.rows);
    DI_ICHECK(mixes.cols == (head ? s : (2 + s) * s) && base.n_elements() == mixes.cols);
    DI_ICHECK(head || (post.cols == s && comb.cols == s * s));
    DI_ICHECK(pre.empty() || (pre.cols == s && pre.rows == streams.rows));
    for (int64_t t = 0; t < streams.rows; ++t) {
      hyper_pre_row(p, d, streams.f32() + t * s * d, mixes.f32() + t * mixes.cols, base.f32(), scale.f32(),
                    collapsed.f32() + t * d, head ? nullptr : post.f32() + t * s, head ? nullptr : comb.f32() + t * s * s,
                    pre.empty() ? nullptr : pre.f32() + t * s);
    }
  }

  void hyper_post(const backend::HyperParams& p, const Tensor& streams, const Tensor& x, const Tensor& post,
                  const Tensor& comb, const Tensor& out_streams) override {
    const int64_t s = p.n_streams, d = x.cols;
    DI_ICHECK(streams.cols == s * d && out_streams.cols == s * d && streams.rows == x.rows);
    for (int64_t t = 0; t < x.rows; ++t) {
      hyper_post_row(p, d, streams.f32() + t * s * d, x.f32() + t * d, post.f32() + t * s, comb.f32() + t * s * s,
                     out_streams.f32() + t * s * d);
    }
  }

  void route_sqrt_softplus(const Tensor& logits, const Tensor& bias, const Tensor& fixed_ids, int64_t k, float scale,
                           const Tensor& ids, const Tensor& weights) override {
    DI_ICHECK(ids.rows == logits.rows && ids.cols == k && weights.rows == logits.rows && weights.cols == k);
    DI_ICHECK(bias.empty() || bias.n_elements() == logits.cols);
    DI_ICHECK(fixed_ids.empty() || (fixed_ids.rows == logits.rows && fixed_ids.cols == k));
    for (int64_t t = 0; t < logits.rows; ++t) {
      route_sqrt_softplus_row(logits.f32() + t * logits.cols, logits.cols, bias.empty() ? nullptr : bias.f32(),
                              fixed_ids.empty() ? nullptr : fixed_ids.i32() + t * k, k, scale, ids.i32() + t * k,
                              weights.f32() + t * k);
    }
  }

  void compress_kv(const backend::CompressParams& p, backend::KvCache& kv, int state_group, int out_group,
                   int32_t layer, const Tensor& ape, const Tensor& norm, const Tensor& inv_freq) override {
    const CpuKvCache& cache = cpu_cache(kv);
    DI_ICHECK(cache.groups()[static_cast<size_t>(out_group)].row_elems() == p.head_dim);
    DI_ICHECK(cache.groups()[static_cast<size_t>(out_group)].tokens_per_row == p.rate);
    const auto out_pool = cache.layer_data(out_group, layer).first;
    for_each_entry(p, cache, state_group, out_group, layer, ape, norm,
                   [&](size_t, int64_t w, const backend::StepSequence& seq, float* entry) {
                     rope_trailing(entry, p.head_dim, p.n_rot, static_cast<float>(w * p.rate), inv_freq.f32(), 1.0f);
                     write_k_row(cache, out_group, out_pool, seq, w * p.rate, entry);
                   });
  }

  void compress_rows(const backend::CompressParams& p, const backend::KvCache& kv, int state_group, int rows_group,
                     int32_t layer, const Tensor& ape, const Tensor& norm, const Tensor& out) override {
    DI_ICHECK(out.rows == static_cast<int64_t>(positions_.size()) && out.cols == p.head_dim);
    std::fill_n(out.f32(), out.n_elements(), 0.0f);
    for_each_entry(p, cpu_cache(kv), state_group, rows_group, layer, ape, norm,
                   [&](size_t t, int64_t, const backend::StepSequence&, float* entry) {
                     std::copy_n(entry, p.head_dim, out.f32() + static_cast<int64_t>(t) * p.head_dim);
                   });
  }

  void gather_rows(const backend::Matrix& table, const Tensor& ids, const Tensor& out) override {
    DI_ICHECK(out.rows == ids.rows && out.cols == ids.cols * table.n_in);
    const std::span<const int32_t> rows(ids.i32(), static_cast<size_t>(ids.n_elements()));
    for (int32_t r : rows) DI_ICHECK(r >= 0 && r < table.n_out);
    cpu::gather_rows(matrix_of(table), rows, out.f32());
  }

  void engram_mix(const Tensor& streams, const Tensor& kv, const Tensor& weight, float eps) override {
    const int64_t s = weight.n_elements() / (kv.cols - weight.n_elements());
    const int64_t d = weight.n_elements() / s;
    DI_ICHECK(streams.cols == s * d && kv.cols == (s + 1) * d && kv.rows == streams.rows);
    for (int64_t t = 0; t < streams.rows; ++t) {
      engram_mix_row(s, d, streams.f32() + t * streams.cols, kv.f32() + t * kv.cols, weight.f32(), eps);
    }
  }

  void block_attention(const backend::BlockAttentionParams& p, const Tensor& q, const backend::KvCache& kv, int group,
                       int32_t layer, const Tensor& block_kv, const Tensor& sinks, const Tensor& out) override {
    const CpuKvCache& cache = cpu_cache(kv);
    const int64_t d = p.head_dim;
    DI_ICHECK(cache.groups()[static_cast<size_t>(group)].row_elems() == d && block_kv.cols == d);
    DI_ICHECK(q.cols == p.n_head * d && out.cols == q.cols && sinks.n_elements() == p.n_head);
    const uint8_t* pool = cache.layer_data(group, layer).first;
    // The first batch row of each token's sequence (its block).
    std::vector<int64_t>& block_start = block_start_;
    block_start.resize(positions_.size());
    for (size_t t = 0; t < positions_.size(); ++t) {
      block_start[t] = t > 0 && token_seq_[t] == token_seq_[t - 1] ? block_start[t - 1] : static_cast<int64_t>(t);
    }
    pool_.parallel_for(static_cast<int64_t>(positions_.size()), [&](int, int64_t begin, int64_t end) {
      std::vector<float> rows, scores;
      for (int64_t t = begin; t < end; ++t) {
        const backend::StepSequence& seq = batch_.sequences[static_cast<size_t>(token_seq_[t])];
        DI_ICHECK(seq.n_tokens == p.block);
        const int64_t anchor = seq.first_position;
        const int64_t first =
            std::max<int64_t>({0, anchor - p.window, seq.min_position[static_cast<size_t>(group)]});
        const int64_t n_rows = anchor - first + p.block;
        rows.resize(static_cast<size_t>(n_rows * d));
        for (int64_t j = first; j < anchor; ++j) read_row(cache, group, pool, true, seq, j, rows.data() + (j - first) * d);
        std::copy_n(block_kv.f32() + block_start[static_cast<size_t>(t)] * d, p.block * d,
                    rows.data() + (anchor - first) * d);
        attend_with_sinks(p.n_head, d, p.scale, q.f32() + t * q.cols, rows.data(), n_rows, sinks.f32(),
                          out.f32() + t * out.cols, &scores);
      }
    });
  }

  void cache_round_trip(const Tensor& x, backend::CacheFormat format, int64_t block) override {
    DI_ICHECK(x.cols % block == 0);
    for (int64_t r = 0; r < x.rows; ++r) cache_round_trip_row(x.f32() + r * x.cols, x.cols, format, block);
  }

  void index_top_k(const backend::IndexParams& p, const Tensor& q, const Tensor& weights, const backend::KvCache& kv,
                   int group, int32_t layer, const Tensor& ids, const Tensor& candidates) override {
    const CpuKvCache& cache = cpu_cache(kv);
    const KvGroupSpec& g = cache.groups()[static_cast<size_t>(group)];
    DI_ICHECK(g.row_elems() == p.head_dim && g.tokens_per_row == p.rate);
    DI_ICHECK(q.cols == p.n_heads * p.head_dim && weights.cols == p.n_heads && ids.cols == p.top_k);
    const bool use_candidates = p.candidates != backend::CandidateUse::kNone;
    DI_ICHECK(!use_candidates || (p.candidate_block > 0 && candidates.cols == p.candidate_top_blocks &&
                                  candidates.rows == static_cast<int64_t>(positions_.size())));
    const uint8_t* k_pool = cache.layer_data(group, layer).first;
    const auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    pool_.parallel_for(static_cast<int64_t>(positions_.size()), [&](int, int64_t begin, int64_t end) {
      std::vector<float> key(static_cast<size_t>(p.head_dim));
      std::vector<std::pair<float, int32_t>> scores, blocks;
      for (int64_t t = begin; t < end; ++t) {
        const backend::StepSequence& seq = batch_.sequences[static_cast<size_t>(token_seq_[t])];
        const int64_t n_visible = (positions_[t] + 1) / p.rate;
        int32_t* cand = use_candidates ? candidates.i32() + t * p.candidate_top_blocks : nullptr;
        const auto allowed = [&](int64_t w) {
          if (p.candidates != backend::CandidateUse::kRestrict) return true;
          return std::binary_search(cand, std::find(cand, cand + p.candidate_top_blocks, -1),
                                    static_cast<int32_t>(w / p.candidate_block));
        };
        scores.clear();
        for (int64_t w = 0; w < n_visible; ++w) {
          if (!allowed(w)) continue;
          read_row(cache, group, k_pool, true, seq, w * p.rate, key.data());
          float score = 0;
          for (int64_t h = 0; h < p.n_heads; ++h) {
            const float* qh = q.f32() + t * q.cols + h * p.head_dim;
            float dot = 0;
            if (reference_) {
              for (int64_t i = 0; i < p.head_dim; ++i) dot += qh[i] * key[static_cast<size_t>(i)];
            } else {
              dot = vec_dot(DType::kF32, key.data(), qh, p.head_dim);  // the dispatched f32 dot
            }
            score += std::max(dot, 0.0f) * p.scale * weights.f32()[t * p.n_heads + h];
          }
          scores.emplace_back(score, static_cast<int32_t>(w));
        }
        if (p.candidates == backend::CandidateUse::kSelect) {
          // Each block's best entry; the newest visible block always stays.
          const int64_t n_blocks = (n_visible + p.candidate_block - 1) / p.candidate_block;
          blocks.assign(static_cast<size_t>(n_blocks), {-std::numeric_limits<float>::infinity(), 0});
          for (int64_t b = 0; b < n_blocks; ++b) blocks[static_cast<size_t>(b)].second = static_cast<int32_t>(b);
          for (const auto& [score, w] : scores) {
            float& best = blocks[static_cast<size_t>(w / p.candidate_block)].first;
            best = std::max(best, score);
          }
          if (n_blocks > 0) blocks.back().first = std::numeric_limits<float>::infinity();
          const int64_t kept = std::min<int64_t>(p.candidate_top_blocks, n_blocks);
          std::partial_sort(blocks.begin(), blocks.begin() + kept, blocks.end(), better);
          for (int64_t j = 0; j < p.candidate_top_blocks; ++j) cand[j] = j < kept ? blocks[static_cast<size_t>(j)].second : -1;
          std::sort(cand, cand + kept);
        }
        const int64_t n = std::min<int64_t>(p.top_k, static_cast<int64_t>(scores.size()));
        std::partial_sort(scores.begin(), scores.begin() + n, scores.end(), better);
        for (int64_t j = 0; j < p.top_k; ++j) ids.i32()[t * p.top_k + j] = j < n ? scores[static_cast<size_t>(j)].second : -1;
      }
    });
  }

  void sparse_attention(const backend::SparseAttentionParams& p, const Tensor& q, const backend::KvCache& kv,
                        int window_group, int compressed_group, int32_t layer, const Tensor& sinks,
                        const Tensor& selected, const Tensor& out) override {
    const CpuKvCache& cache = cpu_cache(kv);
    const int64_t d = p.head_dim;
    DI_ICHECK(cache.groups()[static_cast<size_t>(window_group)].row_elems() == d);
    DI_ICHECK(q.cols == p.n_head * d && out.cols == q.cols && sinks.n_elements() == p.n_head);
    const uint8_t* win_pool = cache.layer_data(window_group, layer).first;
    const int32_t comp_layer = p.compressed_layer >= 0 ? p.compressed_layer : layer;
    const uint8_t* comp_pool = p.rate > 0 ? cache.layer_data(compressed_group, comp_layer).first : nullptr;
    pool_.parallel_for(static_cast<int64_t>(positions_.size()), [&](int, int64_t begin, int64_t end) {
      std::vector<float> rows, scores;
      for (int64_t t = begin; t < end; ++t) {
        const backend::StepSequence& seq = batch_.sequences[static_cast<size_t>(token_seq_[t])];
        const int64_t pos = positions_[t];
        const int64_t first = std::max<int64_t>({0, pos - p.window + 1, seq.min_position[static_cast<size_t>(window_group)]});
        rows.clear();
        int64_t n_rows = 0;
        const auto add_row = [&](int group, const uint8_t* pool, int64_t logical) {
          rows.resize(static_cast<size_t>((n_rows + 1) * d));
          read_row(cache, group, pool, true, seq, logical, rows.data() + n_rows * d);
          ++n_rows;
        };
        for (int64_t j = first; j <= pos; ++j) add_row(window_group, win_pool, j);
        if (p.rate > 0) {
          const int64_t n_visible = (pos + 1) / p.rate;
          if (selected.empty()) {
            for (int64_t w = 0; w < n_visible; ++w) add_row(compressed_group, comp_pool, w * p.rate);
          } else {
            for (int64_t j = 0; j < selected.cols; ++j) {
              const int32_t w = selected.i32()[t * selected.cols + j];
              if (w >= 0 && w < n_visible) add_row(compressed_group, comp_pool, w * p.rate);
            }
          }
        }
        attend_with_sinks(p.n_head, d, p.scale, q.f32() + t * q.cols, rows.data(), n_rows, sinks.f32(),
                          out.f32() + t * out.cols, &scores);
      }
    });
  }

  Status sync() override { return {}; }

 private:
  // One query row's heads (q [n_head * d]) over n_rows K = V rows [n_rows, d] with a sink logit
  // per head in the denominator: out [n_head * d]. scores: scratch. The reference backend sums
  // in plain loops; the fast one takes the scores through the dispatched f32 dot (AVX2 / AVX-512
  // where the CPU has them), the same values up to summation order.
  void attend_with_sinks(int64_t n_head, int64_t d, float scale, const float* q, const float* rows, int64_t n_rows,
                         const float* sinks, float* out, std::vector<float>* scores) const {
    scores->resize(static_cast<size_t>(n_rows));
    float* sc = scores->data();
    for (int64_t h = 0; h < n_head; ++h) {
      const float* qh = q + h * d;
      float mx = sinks[h];
      for (int64_t r = 0; r < n_rows; ++r) {
        float dot = 0;
        if (reference_) {
          for (int64_t i = 0; i < d; ++i) dot += qh[i] * rows[r * d + i];
        } else {
          dot = vec_dot(DType::kF32, rows + r * d, qh, d);
        }
        sc[r] = dot * scale;
        mx = std::max(mx, sc[r]);
      }
      float denom = std::exp(sinks[h] - mx);
      for (int64_t r = 0; r < n_rows; ++r) denom += sc[r] = std::exp(sc[r] - mx);
      float* oh = out + h * d;
      std::fill_n(oh, d, 0.0f);
      for (int64_t r = 0; r < n_rows; ++r) {
        const float w = sc[r] / denom;
        const float* row = rows + r * d;
        for (int64_t i = 0; i < d; ++i) oh[i] += w * row[i];
      }
    }
  }

  // Each compressor entry the batch closes (CompressParams), pooled from the state group's rows
  // and normed: fn(token, entry index, sequence, entry [head_dim]). Entries whose first position
  // is below first_write of `write_group` (a shared prefix being replayed) are skipped: their
  // state rows need not exist.
  template <typename Fn>
  void for_each_entry(const backend::CompressParams& p, const CpuKvCache& cache, int state_group, int write_group,
                      int32_t layer, const Tensor& ape, const Tensor& norm, Fn&& fn) {
    const KvGroupSpec& sg = cache.groups()[static_cast<size_t>(state_group)];
    const int64_t width = p.overlap ? 2 * p.head_dim : p.head_dim;
    DI_ICHECK(sg.row_elems() == width && !sg.k_only && sg.tokens_per_row == 1);
    DI_ICHECK(ape.rows == p.rate && ape.cols == width && norm.n_elements() == p.head_dim);
    const auto [k_pool, v_pool] = cache.layer_data(state_group, layer);
    const int64_t n_slots = p.overlap ? 2 * p.rate : p.rate;
    std::vector<float> kv_rows(static_cast<size_t>(n_slots * width)), gate_rows(kv_rows.size()), entry(p.head_dim);
    std::vector<const float*> kv_ptr(n_slots), gate_ptr(n_slots);
    std::vector<char> valid(n_slots);
    for (size_t t = 0; t < positions_.size(); ++t) {
      const int64_t pos = positions_[t];
      if ((pos + 1) % p.rate != 0) continue;
      const int64_t w = (pos + 1) / p.rate - 1;
      const backend::StepSequence& seq = batch_.sequences[static_cast<size_t>(token_seq_[t])];
      // A row of a shared prefix (a prefix hit being replayed) is the cached one: the replay's
      // frontier below the replay start does not exist, and the row is not this sequence's.
      if (w * p.rate < seq.first_write[static_cast<size_t>(write_group)]) continue;
      for (int64_t s = 0; s < n_slots; ++s) {
        // Overlap: slots 0..rate-1 are the previous window's first halves, the rest this
        // window's second halves.
        const bool previous = p.overlap && s < p.rate;
        const int64_t token = previous ? p.rate * (w - 1) + s : p.rate * w + (p.overlap ? s - p.rate : s);
        const int64_t half = p.overlap && !previous ? p.head_dim : 0;
        valid[s] = token >= 0;
        if (!valid[s]) continue;
        float* kr = kv_rows.data() + s * width;
        float* gr = gate_rows.data() + s * width;
        read_row(cache, state_group, k_pool, true, seq, token, kr);
        read_row(cache, state_group, v_pool, false, seq, token, gr);
        const float* bias = ape.f32() + (token % p.rate) * width;
        for (int64_t c = 0; c < width; ++c) gr[c] += bias[c];
        kv_ptr[s] = kr + half;
        gate_ptr[s] = gr + half;
      }
      compress_entry(p.head_dim, n_slots, kv_ptr.data(), gate_ptr.data(), reinterpret_cast<const bool*>(valid.data()),
                     norm.f32(), p.eps, entry.data());
      fn(t, w, seq, entry.data());
    }
  }

  // Pool row of the row that holds `position` (a token's own row, or the compressed row whose
  // tokens include it) in one sequence's table of group g.
  static int64_t pool_row(const KvGroupSpec& g, const backend::StepSequence& seq, int group, int64_t position) {
    const auto& table = seq.block_tables[static_cast<size_t>(group)];
    DI_ICHECK(position >= 0 && static_cast<size_t>(position / g.block_size) < table.size());
    const int32_t block = table[static_cast<size_t>(position / g.block_size)];
    DI_ICHECK(block >= 0 && block < g.n_blocks);
    return static_cast<int64_t>(block) * g.rows_per_block() + (position % g.block_size) / g.tokens_per_row;
  }
  // Row (K, or V with is_k false) of the row holding `position`, as f32 (row_elems values).
  static void read_row(const CpuKvCache& cache, int group, const uint8_t* plane, bool is_k,
                       const backend::StepSequence& seq, int64_t position, float* out) {
    const KvGroupSpec& g = cache.groups()[static_cast<size_t>(group)];
    const KvLayout& layout = cache.pool(group).layout;
    const int64_t row = pool_row(g, seq, group, position);
    for (int64_t h = 0; h < layout.n_head_kv; ++h) {
      for (int64_t i = 0; i < layout.head_dim; ++i) {
        const int64_t at = is_k ? layout.k_index(row, h, i) : layout.v_index(row, h, i);
        out[h * layout.head_dim + i] = g.dtype == DType::kF16 ? fp16_to_fp32(reinterpret_cast<const uint16_t*>(plane)[at])
                                                              : reinterpret_cast<const float*>(plane)[at];
      }
    }
  }
  static void write_k_row(const CpuKvCache& cache, int group, uint8_t* plane, const backend::StepSequence& seq,
                          int64_t position, const float* k) {
    const KvGroupSpec& g = cache.groups()[static_cast<size_t>(group)];
    const KvLayout& layout = cache.pool(group).layout;
    const int64_t row = pool_row(g, seq, group, position);
    for (int64_t h = 0; h < layout.n_head_kv; ++h) {
      for (int64_t i = 0; i < layout.head_dim; ++i) {
        const int64_t at = layout.k_index(row, h, i);
        const float v = k[h * layout.head_dim + i];
        if (g.dtype == DType::kF16) {
          reinterpret_cast<uint16_t*>(plane)[at] = fp32_to_fp16(v);
        } else {
          reinterpret_cast<float*>(plane)[at] = v;
        }
      }
    }
  }

  ThreadPool& pool_;
  bool reference_;
  QuantScratch scratch_;
  std::vector<float> argmax_y_;  // the reference's matmul_argmax: the products, then the choice
  backend::StepBatch batch_;
  std::vector<int32_t> positions_, token_seq_;  // [n_tokens] of the current batch
  std::vector<int32_t> shifted_;               // positions_ + a rope offset
  RopeAngles rope_angles_;                     // the step's cos and sin, shared by the layers
  std::vector<int64_t> block_start_;           // block_attention: each token's block's first row
  std::vector<SequenceKv> seq_kv_;              // [sequences], rebuilt per attention call
  std::vector<MatmulOutput> outputs_;
  std::vector<backend::MatmulTarget> group_;
  std::vector<int32_t> cursor_;
};

void release_aligned(void* data, size_t) { std::free(data); }

class CpuBackend final : public backend::Backend {
 public:
  CpuBackend(ThreadPool& pool, KernelChoice choice) : pool_(pool), choice_(choice) {}

  std::string_view name() const override { return choice_ == KernelChoice::kFastest ? "cpu" : "cpu-reference"; }
  std::string describe() const override {
    return std::string(name()) + " (" + (choice_ == KernelChoice::kFastest ? kernel_isa() : "scalar reference") +
           " kernels, " + std::to_string(pool_.n_threads()) + " threads)";
  }

  bool host_memory() const override { return true; }

  bool supports(const backend::OpUse& use) const override {
    switch (use.op) {
      case backend::Op::kMatmul:
      case backend::Op::kMatmulArgmax:
      case backend::Op::kGroupedMatmul:
      case backend::Op::kEmbed: return quant_supported(use.dtype);
      case backend::Op::kAttention:
      case backend::Op::kStoreKv: return use.dtype == DType::kF32 || use.dtype == DType::kF16;
      case backend::Op::kRope: return use.variant == 0 || use.variant == 1;
      case backend::Op::kGatedActivation: return use.variant == 0 || use.variant == 1;
      default: return true;
    }
  }

  Result<backend::DeviceBuffer> allocate(size_t bytes) override {
    const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (p == nullptr) return resource_exhausted("out of memory: could not allocate " + std::to_string(bytes) + " bytes");
    return backend::DeviceBuffer(p, bytes, release_aligned);
  }

  std::unique_ptr<backend::WeightStore> new_weight_store() override {
    return std::make_unique<CpuWeightStore>(choice_);
  }

  Result<std::unique_ptr<backend::KvCache>> allocate_kv(std::vector<KvGroupSpec> groups) override {
    DI_ASSIGN_OR_RETURN(std::unique_ptr<CpuKvCache> cache, CpuKvCache::create(std::move(groups)));
    return std::unique_ptr<backend::KvCache>(std::move(cache));
  }

  std::unique_ptr<backend::Queue> new_queue() override { return std::make_unique<CpuQueue>(pool_, choice_); }
  backend::PeakRates measure_peak() override {
    const cpu::PeakRates p = cpu::measure_peak_rates(pool_);
    return {p.f32_gflops, p.int8_gops, p.bf16_gflops,
            p.amx ? "AMX tiles present (no kernel uses them yet)" : "AMX tiles absent"};
  }

 private:
  ThreadPool& pool_;
  KernelChoice choice_;
};

}  // namespace

std::unique_ptr<backend::Backend> make_cpu_backend(ThreadPool& pool, KernelChoice choice) {
  return std::make_unique<CpuBackend>(pool, choice);
}

}  // namespace deepinfer::cpu
