// The engine thread: drain submissions, schedule a step, run it as one flattened batch, sample,
// update, publish events. Everything mutable here belongs to that thread except the
// submission queue (mutex) and each handle's event queue (its own mutex).
#include "deepinfer/engine.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "kv/kv_cache_manager.h"
#include "core/check.h"
#include "model/model.h"

namespace deepinfer {

namespace {

using Clock = std::chrono::steady_clock;

class Handle final : public RequestHandle {
 public:
  std::optional<TokenEvent> next() override {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [&] { return !events_.empty() || done_; });
    if (events_.empty()) return std::nullopt;
    TokenEvent e = std::move(events_.front());
    events_.pop_front();
    if (e.finish != FinishReason::kNone) done_ = true;
    return e;
  }
  void cancel() override { cancelled_.store(true); }

  bool cancelled() const { return cancelled_.load(); }
  void push(TokenEvent e) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      events_.push_back(std::move(e));
    }
    ready_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<TokenEvent> events_;
  bool done_ = false;
  std::atomic<bool> cancelled_{false};
};

struct Submission {
  RequestId id;
  GenerationRequest request;
  std::shared_ptr<Handle> handle;
};

// Per running request: what the engine thread needs beyond the scheduler's state.
struct Live {
  std::shared_ptr<Handle> handle;
  Sampler sampler;
  int64_t n_cached_prompt = -1;  // reported with the first event
};

class EngineImpl final : public Engine {
 public:
  EngineImpl(const EngineConfig& config, std::unique_ptr<Model> model, int64_t n_blocks)
      : config_(config),
        model_(std::move(model)),
        kv_manager_(kv::KvCacheConfig{config.block_size, static_cast<int32_t>(n_blocks), config.enable_prefix_caching,
                                      model_->source().path()}),
        kv_(model_->config(), n_blocks, config.block_size),
        scheduler_(SchedulerConfig{config.max_num_batched_tokens, config.max_num_seqs,
                                   config.priority_scheduling ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs},
                   kv_manager_),
        runner_(model_->new_batch_runner()),
        pool_(config.threads > 0 ? config.threads : ThreadPool::default_threads()),
        thread_([this] { loop(); }) {}

  ~EngineImpl() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  Result<std::shared_ptr<RequestHandle>> submit(GenerationRequest request) override {
    if (request.prompt.empty()) return invalid_argument("the prompt is empty");
    if (request.max_tokens < 1) return invalid_argument("max_tokens must be at least 1, got " + std::to_string(request.max_tokens));
    for (size_t i = 0; i < request.prompt.size(); ++i) {
      if (request.prompt[i] < 0 || request.prompt[i] >= n_vocab()) {
        return invalid_argument("prompt token " + std::to_string(request.prompt[i]) + " at index " + std::to_string(i) +
                                " is outside the vocabulary [0, " + std::to_string(n_vocab()) + ")");
      }
    }
    const int64_t need = static_cast<int64_t>(request.prompt.size()) + request.max_tokens;
    if (need > max_context()) {
      return out_of_range("prompt (" + std::to_string(request.prompt.size()) + " tokens) plus max_tokens " +
                          std::to_string(request.max_tokens) + " exceeds the context of " +
                          std::to_string(max_context()) + " tokens");
    }
    DI_RETURN_IF_ERROR(Sampler::create(request.sampling).status());
    auto handle = std::make_shared<Handle>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({next_id_++, std::move(request), handle});
    }
    wake_.notify_all();
    return std::shared_ptr<RequestHandle>(handle);
  }

  EngineStats stats() const override {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    return stats_;
  }
  int64_t n_vocab() const override { return model_->config().n_vocab; }
  int64_t max_context() const override {
    // A request must fit the KV cache on its own, and the model's trained context.
    return std::min<int64_t>(model_->config().n_ctx_train, kv_.n_blocks() * kv_.block_size());
  }

 private:
  void admit(Submission s) {
    auto r = std::make_unique<Request>();
    r->id = s.id;
    r->tokens = std::move(s.request.prompt);
    r->n_prompt = r->n_tokens();
    r->max_tokens = s.request.max_tokens;
    r->stop_token_ids = std::move(s.request.stop_token_ids);
    r->cache_salt = std::move(s.request.cache_salt);
    r->priority = s.request.priority;
    live_.emplace(s.id, Live{std::move(s.handle), std::move(Sampler::create(s.request.sampling)).value(), -1});
    scheduler_.add(std::move(r));
  }

  void loop() {
    while (true) {
      std::deque<Submission> incoming;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || !queue_.empty() || !live_.empty(); });
        if (stop_) break;
        incoming.swap(queue_);
      }
      for (Submission& s : incoming) admit(std::move(s));
      for (auto& [id, live] : live_) {
        if (live.handle->cancelled()) scheduler_.cancel(id);
      }
      step();
    }
    for (auto& [id, live] : live_) live.handle->push({{}, FinishReason::kCancelled, 0});
    std::lock_guard<std::mutex> lock(mutex_);
    for (Submission& s : queue_) s.handle->push({{}, FinishReason::kCancelled, 0});
  }

  void step() {
    const auto t0 = Clock::now();
    StepPlan plan = scheduler_.schedule();
    for (RequestId id : plan.finished) finish(id);
    double forward = 0.0;
    if (!plan.empty()) {
      tokens_.clear();
      batch_.clear();
      for (const ScheduledChunk& c : plan.chunks) {
        const Request* r = scheduler_.find(c.id);
        tokens_.insert(tokens_.end(), r->tokens.begin() + c.first_position,
                       r->tokens.begin() + c.first_position + c.n_tokens);
        batch_.push_back({c.n_tokens, c.first_position, kv_manager_.block_table(c.id),
                          c.samples ? LogitsMode::kLast : LogitsMode::kNone});
        Live& live = live_.at(c.id);
        if (live.n_cached_prompt < 0) live.n_cached_prompt = c.first_position;
      }
      const auto tf = Clock::now();
      Status st = runner_->run(tokens_, batch_, kv_, pool_);
      forward = std::chrono::duration<double>(Clock::now() - tf).count();
      DI_ICHECK(st.ok());  // the scheduler only plans valid batches
      sampled_.clear();
      int64_t row = 0;
      for (const ScheduledChunk& c : plan.chunks) {
        if (!c.samples) continue;
        sampled_.push_back({c.id, live_.at(c.id).sampler.sample(runner_->logits(row++))});
      }
      const std::vector<RequestId> finished = scheduler_.update(plan, sampled_);
      for (const SampledToken& s : sampled_) {
        const Request* r = scheduler_.find(s.id);
        Live& live = live_.at(s.id);
        TokenEvent e{{s.token}, FinishReason::kNone, live.n_cached_prompt};
        if (r->state == RequestState::kFinished) e.finish = r->finish;
        live.handle->push(std::move(e));
      }
      for (RequestId id : finished) {
        scheduler_.take_finished(id);
        live_.erase(id);
      }
    }
    const double total = std::chrono::duration<double>(Clock::now() - t0).count();
    const kv::KvCacheStats kvs = kv_manager_.stats();
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.n_running = static_cast<int64_t>(scheduler_.n_running());
    stats_.n_waiting = static_cast<int64_t>(scheduler_.n_waiting());
    stats_.kv_usage = kvs.usage;
    stats_.prefix_queries = kvs.prefix_queries;
    stats_.prefix_hits = kvs.prefix_hits;
    stats_.n_preemptions += static_cast<int64_t>(plan.preempted.size());
    if (!plan.empty()) {
      ++stats_.n_steps;
      stats_.forward_seconds += forward;
      stats_.overhead_seconds += total - forward;
    }
  }

  void finish(RequestId id) {
    auto r = scheduler_.take_finished(id);
    auto it = live_.find(id);
    if (it == live_.end()) return;
    it->second.handle->push({{}, r ? r->finish : FinishReason::kCancelled, std::max<int64_t>(0, it->second.n_cached_prompt)});
    live_.erase(it);
  }

  EngineConfig config_;
  std::unique_ptr<Model> model_;
  kv::KvCacheManager kv_manager_;
  PagedKvCache kv_;
  Scheduler scheduler_;
  std::unique_ptr<BatchRunner> runner_;
  ThreadPool pool_;
  // Engine-thread state.
  std::unordered_map<RequestId, Live> live_;
  std::vector<int32_t> tokens_;
  std::vector<BatchSequence> batch_;
  std::vector<SampledToken> sampled_;
  // Shared with submitters.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Submission> queue_;
  RequestId next_id_ = 1;
  bool stop_ = false;
  mutable std::mutex stats_mutex_;
  EngineStats stats_;
  std::thread thread_;  // last: starts after everything above is built
};

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config) {
  if (config.block_size < 1) return invalid_argument("block_size must be at least 1");
  if (config.max_num_batched_tokens < 1 || config.max_num_seqs < 1) {
    return invalid_argument("max_num_batched_tokens and max_num_seqs must be at least 1");
  }
  DI_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::load(config.model_path));
  int64_t tokens = config.kv_cache_tokens;
  if (tokens <= 0) {
    // Default: 16 full-length sequences or 1 GiB of KV, whichever is smaller.
    const ModelConfig& c = model->config();
    const int64_t bytes_per_token = c.n_layer * c.n_head_kv * c.head_dim * static_cast<int64_t>(sizeof(float)) * 2;
    tokens = std::min<int64_t>(16 * c.n_ctx_train, (int64_t{1} << 30) / bytes_per_token);
  }
  const int64_t n_blocks = (tokens + config.block_size - 1) / config.block_size;
  return std::unique_ptr<Engine>(new EngineImpl(config, std::move(model), n_blocks));
}

}  // namespace deepinfer
