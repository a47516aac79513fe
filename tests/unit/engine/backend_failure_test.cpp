// A backend that fails a step: the requests of that step end with an error event, the engine
// keeps serving, and the requests after it get exactly the tokens a healthy engine gives.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>

#include "backend/backend.h"
#include "deepinfer/engine.h"
#include "engine/engine_internal.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

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

EngineConfig config_for(bool async) {
  EngineConfig c;
  c.model_path = (fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny" / "llama_gqa_tied").string();
  c.threads = 2;
  c.async_scheduling = async;
  return c;
}

GenerationRequest greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  return r;
}

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  std::string error;
};

Outcome collect(RequestHandle& h) {
  Outcome o;
  while (auto e = h.next()) {
    o.tokens.insert(o.tokens.end(), e->tokens.begin(), e->tokens.end());
    if (e->finish != FinishReason::kNone) {
      o.finish = e->finish;
      o.error = e->error;
    }
  }
  return o;
}

class BackendFailure : public ::testing::TestWithParam<bool> {};

TEST_P(BackendFailure, FailsTheStepsRequestsAndServesTheNext) {
  const std::vector<int32_t> a = {1, 5, 9, 22, 7, 3}, b = {4, 8, 15, 16, 23, 42, 2};
  auto healthy = std::move(Engine::create(config_for(GetParam()))).value();
  const Outcome b_alone = collect(*healthy->submit(greedy(b, 12)).value());
  ASSERT_EQ(b_alone.finish, FinishReason::kLength);

  // The third pass fails: request a has prefilled and decoded once by then.
  auto engine = std::move(create_engine(config_for(GetParam()), [](std::unique_ptr<backend::Backend> inner) {
                            return std::unique_ptr<backend::Backend>(new FailingBackend(std::move(inner), 3));
                          })).value();
  const Outcome failed = collect(*engine->submit(greedy(a, 12)).value());
  EXPECT_EQ(failed.finish, FinishReason::kError);
  EXPECT_NE(failed.error.find("injected: out of device memory"), std::string::npos) << failed.error;
  EXPECT_NE(failed.error.find("failing-cpu backend"), std::string::npos) << failed.error;
  EXPECT_LT(failed.tokens.size(), 12u);

  // The engine still serves, with every block of the failed request back in the pool.
  const Outcome next = collect(*engine->submit(greedy(b, 12)).value());
  EXPECT_EQ(next.finish, FinishReason::kLength);
  EXPECT_EQ(next.tokens, b_alone.tokens);
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.n_failed_steps, 1);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.n_running, 0);
}

TEST_P(BackendFailure, EveryRequestOfTheFailedStepEndsAndLaterOnesAreExact) {
  const std::vector<int32_t> a = {1, 5, 9, 22, 7, 3}, b = {4, 8, 15, 16, 23, 42, 2}, c = {11, 12, 13};
  auto healthy = std::move(Engine::create(config_for(GetParam()))).value();
  const Outcome c_alone = collect(*healthy->submit(greedy(c, 10)).value());
  // The first pass fails; a and b were submitted before the engine could start it, or one of
  // them joins a later step: whichever pass each was in, it ends with an error or completes
  // exactly, never both, and never hangs.
  auto engine = std::move(create_engine(config_for(GetParam()), [](std::unique_ptr<backend::Backend> inner) {
                            return std::unique_ptr<backend::Backend>(new FailingBackend(std::move(inner), 1));
                          })).value();
  auto ha = engine->submit(greedy(a, 10)).value();
  auto hb = engine->submit(greedy(b, 10)).value();
  const Outcome oa = collect(*ha), ob = collect(*hb);
  EXPECT_EQ(oa.finish, FinishReason::kError);  // the first pass always holds a
  for (const Outcome* o : {&oa, &ob}) {
    EXPECT_TRUE(o->finish == FinishReason::kError || (o->finish == FinishReason::kLength && o->tokens.size() == 10u));
  }
  const Outcome oc = collect(*engine->submit(greedy(c, 10)).value());
  EXPECT_EQ(oc.finish, FinishReason::kLength);
  EXPECT_EQ(oc.tokens, c_alone.tokens);
  EXPECT_EQ(engine->stats().n_failed_steps, 1);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

INSTANTIATE_TEST_SUITE_P(Scheduling, BackendFailure, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "async" : "sync"; });

}  // namespace
}  // namespace deepinfer
