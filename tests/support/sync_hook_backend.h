// Backends for tests that must control a step: the real backend's queues, with a hook on every
// sync(). FailingBackend makes one chosen sync() report a failure, as a GPU stream reports an
// out-of-memory or a failed launch; a hook that blocks holds the engine inside a step, so that a
// test can queue requests while one is in flight whatever the machine's timing.
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <memory>

#include "backend/backend.h"

namespace deepinfer::testing {

// Called after the inner sync() with its number (counting from 1 over all queues of one backend)
// and its status; what it returns is what the engine sees. The ops themselves always run: a
// failure leaves their results unspecified, and the engine must not use them.
using SyncHook = std::function<Status(int sync_number, Status inner)>;

class SyncHookQueue final : public backend::Queue {
 public:
  SyncHookQueue(std::unique_ptr<backend::Queue> inner, std::shared_ptr<std::atomic<int>> syncs, SyncHook hook)
      : inner_(std::move(inner)), syncs_(std::move(syncs)), hook_(std::move(hook)) {}

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
                 const backend::Tensor& post, const backend::Tensor& comb) override {
    inner_->hyper_pre(p, s, m, b, sc, c, post, comb);
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
  void index_top_k(const backend::IndexParams& p, const backend::Tensor& q, const backend::Tensor& w,
                   const backend::KvCache& kv, int g, int32_t layer, const backend::Tensor& ids) override {
    inner_->index_top_k(p, q, w, kv, g, layer, ids);
  }
  void sparse_attention(const backend::SparseAttentionParams& p, const backend::Tensor& q, const backend::KvCache& kv,
                        int wg, int cg, int32_t layer, const backend::Tensor& sinks, const backend::Tensor& sel,
                        const backend::Tensor& out) override {
    inner_->sparse_attention(p, q, kv, wg, cg, layer, sinks, sel, out);
  }
  Status sync() override {
    Status s = inner_->sync();
    return hook_(++*syncs_, std::move(s));
  }

 private:
  std::unique_ptr<backend::Queue> inner_;
  std::shared_ptr<std::atomic<int>> syncs_;
  SyncHook hook_;
};

class SyncHookBackend : public backend::Backend {
 public:
  SyncHookBackend(std::unique_ptr<backend::Backend> inner, SyncHook hook)
      : inner_(std::move(inner)), hook_(std::move(hook)) {}
  std::string_view name() const override { return "sync-hook-cpu"; }
  std::string describe() const override { return "sync-hooked " + inner_->describe(); }
  bool supports(const backend::OpUse& use) const override { return inner_->supports(use); }
  Result<backend::DeviceBuffer> allocate(size_t bytes) override { return inner_->allocate(bytes); }
  std::unique_ptr<backend::WeightStore> new_weight_store() override { return inner_->new_weight_store(); }
  Result<std::unique_ptr<backend::KvCache>> allocate_kv(std::vector<KvGroupSpec> groups) override {
    return inner_->allocate_kv(std::move(groups));
  }
  std::unique_ptr<backend::Queue> new_queue() override {
    return std::make_unique<SyncHookQueue>(inner_->new_queue(), syncs_, hook_);
  }

 private:
  std::unique_ptr<backend::Backend> inner_;
  SyncHook hook_;
  std::shared_ptr<std::atomic<int>> syncs_ = std::make_shared<std::atomic<int>>(0);
};

// The sync() numbered `fail_at` reports out of device memory.
class FailingBackend final : public SyncHookBackend {
 public:
  FailingBackend(std::unique_ptr<backend::Backend> inner, int fail_at)
      : SyncHookBackend(std::move(inner), [fail_at](int n, Status s) {
          return n == fail_at ? resource_exhausted("injected: out of device memory") : s;
        }) {}
};

// Holds the first sync() after arm() until release(): the engine stays inside that step while
// the test submits. Shared by the test and the backend's hook; outlives both through shared_ptr.
class StepGate {
 public:
  void arm() { armed_ = true; }
  void release() { opened_.set_value(); }
  SyncHook hook() {
    return [this](int, Status s) {
      if (armed_.exchange(false)) open_.wait();
      return s;
    };
  }

 private:
  std::atomic<bool> armed_{false};
  std::promise<void> opened_;
  std::shared_future<void> open_ = opened_.get_future().share();
};

}  // namespace deepinfer::testing
