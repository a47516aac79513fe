// A backend for tests that must see a step fail: the real backend's queues, except that one
// chosen sync() reports a failure, as a GPU stream reports an out-of-memory or a failed launch.
#pragma once

#include <atomic>
#include <memory>

#include "backend/backend.h"

namespace deepinfer::testing {

// The real CPU backend's queues, except that the sync() numbered `fail_at` (counting from 1
// over all queues) reports a failure, as a GPU stream reports an out-of-memory or a failed
// launch. The ops themselves still run: a failure leaves their results unspecified, and the
// engine must not use them.
class FailingQueue final : public backend::Queue {
 public:
  FailingQueue(std::unique_ptr<backend::Queue> inner, std::shared_ptr<std::atomic<int>> syncs, int fail_at)
      : inner_(std::move(inner)), syncs_(std::move(syncs)), fail_at_(fail_at) {}

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
  Status sync() override {
    Status s = inner_->sync();
    if (++*syncs_ == fail_at_) return resource_exhausted("injected: out of device memory");
    return s;
  }

 private:
  std::unique_ptr<backend::Queue> inner_;
  std::shared_ptr<std::atomic<int>> syncs_;
  int fail_at_;
};

class FailingBackend final : public backend::Backend {
 public:
  FailingBackend(std::unique_ptr<backend::Backend> inner, int fail_at) : inner_(std::move(inner)), fail_at_(fail_at) {}
  std::string_view name() const override { return "failing-cpu"; }
  std::string describe() const override { return "failing " + inner_->describe(); }
  bool supports(const backend::OpUse& use) const override { return inner_->supports(use); }
  Result<backend::DeviceBuffer> allocate(size_t bytes) override { return inner_->allocate(bytes); }
  std::unique_ptr<backend::WeightStore> new_weight_store() override { return inner_->new_weight_store(); }
  Result<std::unique_ptr<backend::KvCache>> allocate_kv(std::vector<KvGroupSpec> groups) override {
    return inner_->allocate_kv(std::move(groups));
  }
  std::unique_ptr<backend::Queue> new_queue() override {
    return std::make_unique<FailingQueue>(inner_->new_queue(), syncs_, fail_at_);
  }

 private:
  std::unique_ptr<backend::Backend> inner_;
  int fail_at_;
  std::shared_ptr<std::atomic<int>> syncs_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace deepinfer::testing
