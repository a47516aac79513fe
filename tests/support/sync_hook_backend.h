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
#include "forwarding_queue.h"

namespace deepinfer::testing {

// Called after the inner sync() with its number (counting from 1 over all queues of one backend)
// and its status; what it returns is what the engine sees. The ops themselves always run: a
// failure leaves their results unspecified, and the engine must not use them.
using SyncHook = std::function<Status(int sync_number, Status inner)>;

class SyncHookQueue final : public ForwardingQueue {
 public:
  SyncHookQueue(std::unique_ptr<backend::Queue> inner, std::shared_ptr<std::atomic<int>> syncs, SyncHook hook)
      : ForwardingQueue(std::move(inner)), syncs_(std::move(syncs)), hook_(std::move(hook)) {}

  Status sync() override {
    Status s = inner_->sync();
    return hook_(++*syncs_, std::move(s));
  }

 private:
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
