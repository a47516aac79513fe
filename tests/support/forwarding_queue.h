// A Queue that does what another queue does, op for op: the base of test decorators that change
// one thing (a fault, a hook on sync) and must forward everything else, including ops added to
// the backend interface later (they are added here once).
#pragma once

#include <memory>
#include <utility>

#include "backend/backend.h"

namespace deepinfer::testing {

class ForwardingQueue : public backend::Queue {
 public:
  explicit ForwardingQueue(std::unique_ptr<backend::Queue> inner) : inner_(std::move(inner)) {}

  void upload(const void* host, const backend::Tensor& dst) override { inner_->upload(host, dst); }
  void download(const backend::Tensor& src, void* host) override { inner_->download(src, host); }
  Status set_batch(const backend::StepBatch& batch) override { return inner_->set_batch(batch); }
  void embed(const backend::Matrix& t, const backend::Tensor& out) override { inner_->embed(t, out); }
  void matmul(const backend::Matrix& w, const backend::Tensor& x, const backend::Tensor& y,
              const backend::Tensor& bias) override {
    inner_->matmul(w, x, y, bias);
  }
  void matmul_group(std::span<const backend::MatmulTarget> targets, const backend::Tensor& x) override {
    inner_->matmul_group(targets, x);
  }
  void matmul_argmax(const backend::Matrix& w, const backend::Tensor& x, const backend::Tensor& best) override {
    inner_->matmul_argmax(w, x, best);
  }
  void rms_norm(const backend::Tensor& x, const backend::Tensor& w, float eps, const backend::Tensor& out) override {
    inner_->rms_norm(x, w, eps, out);
  }
  void rope(const backend::Tensor& x, const backend::RopeParams& p, const backend::Tensor& inv_freq) override {
    inner_->rope(x, p, inv_freq);
  }
  void gated_activation(backend::Activation a, const backend::Tensor& g, const backend::Tensor& u) override {
    inner_->gated_activation(a, g, u);
  }
  void add(const backend::Tensor& x, const backend::Tensor& y) override { inner_->add(x, y); }
  void scale(const backend::Tensor& x, float f) override { inner_->scale(x, f); }
  void soft_cap(const backend::Tensor& x, float cap) override { inner_->soft_cap(x, cap); }
  void store_kv(backend::KvCache& kv, int g, int32_t l, const backend::Tensor& k, const backend::Tensor& v) override {
    inner_->store_kv(kv, g, l, k, v);
  }
  void attention(const backend::AttentionParams& p, const backend::Tensor& q, const backend::KvCache& kv, int g,
                 int32_t l, const backend::Tensor& out) override {
    inner_->attention(p, q, kv, g, l, out);
  }
  void gather_output_rows(const backend::Tensor& x, const backend::Tensor& out) override {
    inner_->gather_output_rows(x, out);
  }
  void route_top_k(const backend::Tensor& logits, int64_t k, bool renormalize, const backend::Tensor& ids,
                   const backend::Tensor& weights) override {
    inner_->route_top_k(logits, k, renormalize, ids, weights);
  }
  void moe_dispatch(const backend::Tensor& ids, int64_t n, const backend::Tensor& order,
                    const backend::Tensor& offsets) override {
    inner_->moe_dispatch(ids, n, order, offsets);
  }
  void moe_gather(const backend::Tensor& x, const backend::Tensor& order, int64_t k, const backend::Tensor& xs) override {
    inner_->moe_gather(x, order, k, xs);
  }
  void grouped_matmul(std::span<const backend::GroupedTarget> t, const backend::Tensor& offsets,
                      const backend::Tensor& x) override {
    inner_->grouped_matmul(t, offsets, x);
  }
  void moe_combine(const backend::Tensor& ys, const backend::Tensor& order, const backend::Tensor& w,
                   const backend::Tensor& out) override {
    inner_->moe_combine(ys, order, w, out);
  }
  void clamp(const backend::Tensor& x, float lo, float hi) override { inner_->clamp(x, lo, hi); }
  void hyper_pre(const backend::HyperParams& p, const backend::Tensor& s, const backend::Tensor& m,
                 const backend::Tensor& b, const backend::Tensor& sc, const backend::Tensor& c,
                 const backend::Tensor& post, const backend::Tensor& comb, const backend::Tensor& pre) override {
    inner_->hyper_pre(p, s, m, b, sc, c, post, comb, pre);
  }
  void hyper_post(const backend::HyperParams& p, const backend::Tensor& s, const backend::Tensor& x,
                  const backend::Tensor& post, const backend::Tensor& comb, const backend::Tensor& out) override {
    inner_->hyper_post(p, s, x, post, comb, out);
  }
  void route_sqrt_softplus(const backend::Tensor& l, const backend::Tensor& b, const backend::Tensor& f, int64_t k,
                           float scale, const backend::Tensor& ids, const backend::Tensor& w) override {
    inner_->route_sqrt_softplus(l, b, f, k, scale, ids, w);
  }
  void compress_kv(const backend::CompressParams& p, backend::KvCache& kv, int sg, int og, int32_t layer,
                   const backend::Tensor& ape, const backend::Tensor& norm, const backend::Tensor& f) override {
    inner_->compress_kv(p, kv, sg, og, layer, ape, norm, f);
  }
  void compress_rows(const backend::CompressParams& p, const backend::KvCache& kv, int sg, int rg, int32_t layer,
                     const backend::Tensor& ape, const backend::Tensor& norm, const backend::Tensor& out) override {
    inner_->compress_rows(p, kv, sg, rg, layer, ape, norm, out);
  }
  void cache_round_trip(const backend::Tensor& x, backend::CacheFormat format, int64_t block) override {
    inner_->cache_round_trip(x, format, block);
  }
  void gather_rows(const backend::Matrix& table, const backend::Tensor& ids, const backend::Tensor& out) override {
    inner_->gather_rows(table, ids, out);
  }
  void engram_mix(const backend::Tensor& s, const backend::Tensor& kv, const backend::Tensor& w, float eps) override {
    inner_->engram_mix(s, kv, w, eps);
  }
  void block_attention(const backend::BlockAttentionParams& p, const backend::Tensor& q, const backend::KvCache& kv,
                       int g, int32_t layer, const backend::Tensor& bkv, const backend::Tensor& sinks,
                       const backend::Tensor& out) override {
    inner_->block_attention(p, q, kv, g, layer, bkv, sinks, out);
  }
  void index_top_k(const backend::IndexParams& p, const backend::Tensor& q, const backend::Tensor& w,
                   const backend::KvCache& kv, int g, int32_t layer, const backend::Tensor& ids,
                   const backend::Tensor& candidates) override {
    inner_->index_top_k(p, q, w, kv, g, layer, ids, candidates);
  }
  void sparse_attention(const backend::SparseAttentionParams& p, const backend::Tensor& q, const backend::KvCache& kv,
                        int wg, int cg, int32_t layer, const backend::Tensor& sinks, const backend::Tensor& sel,
                        const backend::Tensor& out) override {
    inner_->sparse_attention(p, q, kv, wg, cg, layer, sinks, sel, out);
  }
  Status sync() override { return inner_->sync(); }

 protected:
  std::unique_ptr<backend::Queue> inner_;
};

}  // namespace deepinfer::testing
