// The engine thread: drain submissions, schedule a step, run it as one flattened batch, sample,
// update, publish raw events. Everything mutable here belongs to that thread except the
// submission queue (guarded by the shared EngineWakeup's mutex) and each handle's event queue.
//
// A submitted request is a Group of n sequences; each sequence is one scheduler Request. The
// first sequence runs alone until its prompt is computed; the others start then, so they find
// the prompt's full blocks in the prefix cache (only the tail block is recomputed).
//
// Asynchronous scheduling (config.async_scheduling): forward passes run on a ForwardWorker
// thread, and while step N's pass runs the engine thread plans step N+1 (admissions,
// cancellations, the scheduler's plan, the flattened batch) and then finishes step N-1
// (scheduler update, events, statistics). Between two passes only step N's sampling and the
// filling in of N+1's placeholders remain: a decoding sequence's next position is planned
// before its token is known, and its id is written into N+1's batch right after sampling.
// Each step owns copies of its block tables, since the KV manager's change while it runs. A
// sequence that stops at N still has its N+1 position computed (and discarded); one cancelled
// or preempted while its chunk is in flight has that chunk's outputs dropped (Request::live).
// Without the flag every step plans, runs, samples and finishes in turn on the engine thread.
//
// Batch invariance (config.batch_invariant): every CPU kernel computes a token's row from that
// token's inputs alone in a fixed order (backend tests BatchedDot and
// MatmulRowsDoNotDependOnBatchSize), prefix-cached KV is bitwise what a cold run computes, and
// each sequence samples with its own Sampler and generator (sampling runs in parallel by whole
// sequences), so the CPU engine has no faster, batch-dependent path to switch off: the flag is
// the contract such a path must honour. tests/unit/engine/batch_invariance_test.cpp checks it.
// One exception by design: a model with sliding-window layers (Gemma 3, DeepSeek V4) that takes
// a prefix hit replays the last window (EngineConfig::swa_replay), whose rebuilt KV approximates
// the cold run's.
// Turn swa_replay off where bitwise reproducibility across requests matters more.
#include "deepinfer/engine.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <mutex>
#include <numeric>
#include <thread>
#include <unordered_map>

#include "core/check.h"
#include "engine/constraint.h"
#include "engine/create_engine.h"
#include "engine/forward_worker.h"
#include "engine/kv_cache_dtype.h"
#include "engine/kv_store_connector.h"
#include "engine/sampler.h"
#include "tokenizer/engram_classes.h"
#include "engine/scheduler.h"
#include "engine/speculative/back_off.h"
#include "engine/speculative/draft_model.h"
#include "engine/speculative/dspark_drafter.h"
#include "engine/speculative/mtp_drafter.h"
#include "engine/speculative/schedule.h"
#include "engine/speculative/sequence_drafter.h"
#include "engine/speculative/verify.h"
#include "engine/stream_handle.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_loading.h"

namespace deepinfer {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int32_t kMaxN = 128;  // the OpenAI API's bound on n

struct Submission {
  GenerationRequest request;
  std::shared_ptr<const grammar::CompiledGrammar> grammar;  // the constraint, compiled in submit()
  std::shared_ptr<StreamHandle> handle;
  Clock::time_point submitted;
};

// One submitted request: its sequences share the handle, the prompt and the prompt logprobs.
struct Group {
  GenerationRequest request;
  std::shared_ptr<const grammar::CompiledGrammar> grammar;  // null: unconstrained
  std::shared_ptr<StreamHandle> handle;
  std::vector<int32_t> stop_ids;  // end-of-generation ids unless ignore_eos, then stop_token_ids
  Clock::time_point submitted;
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;  // [n_prompt] when asked
  int32_t n_started = 0;  // sequences handed to the scheduler (or ended before starting)
};

// Per running sequence: what the engine thread needs beyond the scheduler's Request.
struct Sequence {
  std::shared_ptr<Group> group;
  int32_t index = 0;
  Sampler sampler;
  std::unique_ptr<SequenceConstraint> constraint;  // with the group's grammar
  bool collects_prompt_logprobs = false;  // until its prompt is computed
  bool first_event_sent = false;
  int64_t n_cached_prompt = -1;           // set when first scheduled
  double queue_seconds = 0.0;
  std::unique_ptr<speculative::SequenceDrafter> drafter{};  // null: no speculative decoding
  int64_t n_draft_tokens = 0;             // verified so far
  int64_t n_accepted_draft_tokens = 0;
  bool grammar_drafts = false;            // its constraint drafts forced text (grammar_fast_forward)
  bool draft_from_grammar = false;        // the draft last proposed is forced text
  speculative::AcceptanceStats grammar_acceptance{};
  speculative::DraftBackOff model_draft_back_off{};  // a model drafter's (back_off.h)
};

// Everything the engine runs on, made before its thread starts (Engine::create).
struct EngineParts {
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<backend::KvCache> kv;
  kv::KvCacheConfig kv_config;
  int64_t max_context = 0;
  std::unique_ptr<kvstore::PageStore> store;  // null: no KV store
  std::unique_ptr<speculative::DraftModel> draft;  // null: no draft model
  // The model's own draft layers' KV (V4's MTP, V4.1's DSpark); null: none loaded.
  std::unique_ptr<backend::KvCache> draft_layers_kv;
  kv::KvCacheConfig draft_layers_kv_config;
};

// One sampling chunk of a step, and what sampling it produced. A chunk that verifies a draft
// has 1 + n_draft rows: row i predicts the token after draft token i - 1 (row 0: after the
// last known token).
struct SampleJob {
  RequestId id = 0;
  int32_t epoch = 0;         // the chunk's (Request::live)
  int64_t row = 0;           // its first logits row
  Sequence* seq = nullptr;   // resolved after the pass: the sequence may have ended meanwhile
  int32_t n_draft = 0;
  std::array<int32_t, kMaxSpeculativeTokens> draft{};
  // What the sequence keeps: the draft tokens the target agreed with, then its own token.
  int32_t n_tokens = 0;
  std::array<int32_t, kMaxSpeculativeTokens + 1> tokens{};
  int32_t n_accepted = 0;
  FinishReason finish = FinishReason::kNone;  // the constraint ends the sequence at the last token
  std::vector<TokenLogprob> logprobs;     // one per kept token, when asked
  std::vector<float> last_prompt_logits;  // the sequence's first sample, when its request asks
};

// One prompt position whose next-token logprob is asked for.
struct PromptJob {
  RequestId id = 0;
  int32_t epoch = 0;
  int64_t row = 0;
  int64_t position = 0;      // the logits at `position` predict prompt[position + 1]
  Group* group = nullptr;    // resolved after the pass
};

// A batch slot whose token id the step before samples.
struct Placeholder {
  size_t slot = 0;  // index into Step::tokens
  RequestId id = 0;
};

// Everything one step needs from planning to publishing. Under asynchronous scheduling two
// alternate: one in flight, the next being planned.
struct Step {
  StepPlan plan;
  std::vector<int32_t> tokens;              // the flattened batch
  std::vector<BatchSequence> batch;         // its block tables point into block_tables
  std::vector<int32_t> block_tables;        // copied (every group's): the KV manager's change while this runs
  std::vector<int32_t> lookback;            // each sequence's tokens before its chunk (Model::lookback_tokens)
  std::vector<SampleJob> sample_jobs;
  std::vector<PromptJob> prompt_jobs;
  std::vector<Placeholder> placeholders;
  std::vector<SampledToken> sampled;
  // KV loaded from the store, copied into the KV memory before this step's pass (and after the
  // pass before it, which may still write blocks freed while it ran).
  std::vector<KvStoreConnector::BlockWrite> kv_writes;
  int64_t prompt_tokens = 0;                // prompt tokens this step computes
  int64_t draft_tokens = 0;                 // draft tokens this step verifies
  double plan_seconds = 0.0;                // planning on the model's critical path (synchronous)
  double forward_seconds = 0.0;
  double sample_seconds = 0.0;
  Clock::time_point forward_end;
};

class EngineImpl final : public Engine {
 public:
  EngineImpl(const EngineConfig& config, EngineParts parts)
      : config_(config),
        pool_(std::move(parts.pool)),
        backend_(std::move(parts.backend)),
        model_(std::move(parts.model)),
        tokenizer_(std::move(parts.tokenizer)),
        max_context_(parts.max_context),
        kv_(std::move(parts.kv)),
        kv_manager_(std::move(parts.kv_config)),
        store_(std::move(parts.store)),
        draft_model_(std::move(parts.draft)),
        scheduler_(SchedulerConfig{config.max_num_batched_tokens, config.max_num_seqs,
                                   config.priority_scheduling ? SchedulingPolicy::kPriority : SchedulingPolicy::kFcfs,
                                   config.swa_replay, config.swa_replay_tokens},
                   kv_manager_),
        runner_(model_->new_batch_runner()),
        lookback_tokens_(model_->lookback_tokens()),
        logprob_scratch_(static_cast<size_t>(pool_->n_threads())),
        group_peaks_(static_cast<size_t>(kv_manager_.n_groups()), 0) {
    if (tokenizer_) {
      const int64_t n = std::min<int64_t>(tokenizer_->n_vocab(), model_->config().n_vocab);
      for (int32_t id = 0; id < n; ++id) {
        if (tokenizer_->is_end_of_generation(id)) end_of_generation_.push_back(id);
      }
    }
    // The groups' sizes are known before the first step: statistics show them from the start.
    for (const KvGroupSpec& g : kv_->groups()) {
      stats_.kv_groups.push_back({g.name, 0, g.n_blocks, 0, static_cast<int64_t>(g.block_bytes()) * g.n_blocks});
      stats_.kv_blocks_total += g.n_blocks;
    }
    stats_.kv_block_size = config_.block_size;
    stats_.kv_cache_bytes = static_cast<int64_t>(kv_->bytes());
    if (store_) {
      store_connector_ = std::make_unique<KvStoreConnector>(store_connector_config(config_), *store_, kv_manager_, *kv_,
                                                            [wakeup = wakeup_] { wakeup->signal(); });
      scheduler_.set_hook(store_connector_.get());
      stats_.kv_store.enabled = true;
    }
    if (parts.draft_layers_kv) {
      if (config_.speculative.method == SpeculativeMethod::kDspark) {
        speculative::DsparkDrafter::Parts p{model_->new_block_draft_runner(*runner_), std::move(parts.draft_layers_kv),
                                            std::move(parts.draft_layers_kv_config)};
        layer_drafter_ =
            std::make_unique<speculative::DsparkDrafter>(std::move(p), speculative::DsparkDrafter::Limits{n_vocab()});
      } else {
        speculative::MtpDrafter::Parts p{model_->new_draft_head_runner(*runner_), std::move(parts.draft_layers_kv),
                                         std::move(parts.draft_layers_kv_config)};
        layer_drafter_ =
            std::make_unique<speculative::MtpDrafter>(std::move(p), speculative::MtpDrafter::Limits{n_vocab()});
      }
    }
    if (config_.async_scheduling) worker_ = std::make_unique<ForwardWorker>();
    // Masks computed during the pass take a core the pass would use, unless one is spare: a CPU
    // backend whose pool holds every core loses more than it hides (measured, 2 threads on 2
    // cores: 5-10% fewer tokens/s; docs/benchmarks.md, "Masks during the forward pass").
    const bool cpu_backend = std::string_view(backend_->name()).starts_with("cpu");
    overlap_masks_ = config_.overlap_masks && worker_ != nullptr &&
                     (!cpu_backend || pool_->n_threads() < ThreadPool::default_threads());
    thread_ = std::thread([this] { loop(); });
  }

  ~EngineImpl() override {
    {
      std::lock_guard<std::mutex> lock(wakeup_->mutex);
      stop_ = true;
    }
    wakeup_->cv.notify_all();
    thread_.join();
  }

  Result<std::shared_ptr<RequestHandle>> submit(GenerationRequest request) override {
    DI_RETURN_IF_ERROR(validate(request));
    // On the caller's thread: a grammar that takes long to compile delays only its own request.
    DI_ASSIGN_OR_RETURN(auto grammar, constraints_.compile(request.sampling.constraint));
    auto handle = std::make_shared<StreamHandle>(request.detokenize ? tokenizer_ : nullptr, request, wakeup_);
    {
      std::lock_guard<std::mutex> lock(wakeup_->mutex);
      queue_.push_back({std::move(request), std::move(grammar), handle, Clock::now()});
    }
    wakeup_->cv.notify_all();
    return std::shared_ptr<RequestHandle>(handle);
  }

  EngineStats stats() const override {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    EngineStats s = stats_;
    // The store's threads go on writing and loading between steps (and after the last one):
    // its counters are read now, not at the last step's end.
    if (store_connector_) fill_store_stats(s.kv_store);
    return s;
  }
  int64_t n_vocab() const override { return model_->config().n_vocab; }
  int64_t max_context() const override { return max_context_; }
  void flush_kv_store() override {
    if (store_connector_) store_connector_->flush();
  }

 private:
  Status validate(const GenerationRequest& r) const {
    if (r.prompt.empty()) return invalid_argument("the prompt is empty");
    if (r.max_tokens < 1) return invalid_argument("max_tokens must be at least 1, got " + std::to_string(r.max_tokens));
    if (r.sampling.min_tokens > r.max_tokens) {
      return invalid_argument("min_tokens (" + std::to_string(r.sampling.min_tokens) + ") must not exceed max_tokens (" +
                              std::to_string(r.max_tokens) + ")");
    }
    if (r.n < 1 || r.n > kMaxN) {
      return invalid_argument("n must be in [1, " + std::to_string(kMaxN) + "], got " + std::to_string(r.n));
    }
    for (size_t i = 0; i < r.prompt.size(); ++i) {
      if (r.prompt[i] < 0 || r.prompt[i] >= n_vocab()) {
        return invalid_argument("prompt token " + std::to_string(r.prompt[i]) + " at index " + std::to_string(i) +
                                " is outside the vocabulary [0, " + std::to_string(n_vocab()) + ")");
      }
    }
    for (int32_t id : r.stop_token_ids) {
      if (id < 0 || id >= n_vocab()) {
        return invalid_argument("stop token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                std::to_string(n_vocab()) + ")");
      }
    }
    for (size_t i = 0; i < r.stop.size(); ++i) {
      if (r.stop[i].empty()) return invalid_argument("stop string " + std::to_string(i) + " is empty");
    }
    if (!r.stop.empty() && !tokenizer_) {
      return invalid_argument("stop strings need the model's tokenizer, and " + model_->source().path() +
                              " carries none");
    }
    if (!r.stop.empty() && !r.detokenize) return invalid_argument("stop strings need detokenize");
    // No sum here: max_tokens may be anything up to INT64_MAX, and prompt + max_tokens would
    // overflow past the check (and generate beyond the context).
    const int64_t n_prompt = static_cast<int64_t>(r.prompt.size());
    if (n_prompt > max_context() || r.max_tokens > max_context() - n_prompt) {
      return out_of_range("prompt (" + std::to_string(r.prompt.size()) + " tokens) plus max_tokens " +
                          std::to_string(r.max_tokens) + " exceeds the context of " + std::to_string(max_context()) +
                          " tokens");
    }
    if (r.speculative_method && *r.speculative_method != SpeculativeMethod::kNone && config_.batch_invariant) {
      return invalid_argument("speculative decoding and batch-invariant mode are mutually exclusive: how many draft "
                              "tokens a step verifies depends on the load");
    }
    if (r.speculative_method == SpeculativeMethod::kDraft && !draft_model_) {
      return invalid_argument("speculative method 'draft' needs a draft model, and this engine has none (start it "
                              "with --draft-model PATH)");
    }
    if (r.speculative_method && is_layer_method(*r.speculative_method) && *r.speculative_method != layer_method()) {
      const std::string name = speculative_method_name(*r.speculative_method);
      return invalid_argument("speculative method '" + name + "' needs the model's " +
                              (name == "mtp" ? "MTP" : "DSpark") + " layers, which this engine has not loaded (start "
                              "it with --speculative-method " + name + ", on a model with those layers)");
    }
    return Sampler::validate(r.sampling, n_vocab());
  }

  // ---- Admission and sequences ----

  void admit(Submission s) {
    auto g = std::make_shared<Group>();
    g->handle = std::move(s.handle);
    g->submitted = s.submitted;
    if (!s.request.sampling.ignore_eos) g->stop_ids = end_of_generation_;
    g->stop_ids.insert(g->stop_ids.end(), s.request.stop_token_ids.begin(), s.request.stop_token_ids.end());
    if (s.request.sampling.prompt_logprobs >= 0) g->prompt_logprobs.resize(s.request.prompt.size());
    g->request = std::move(s.request);
    g->grammar = std::move(s.grammar);
    start_sequences(g, 1);
  }

  // Starts the group's next `count` sequences (children get seed + index).
  void start_sequences(const std::shared_ptr<Group>& g, int32_t count) {
    const GenerationRequest& req = g->request;
    for (int32_t k = 0; k < count && g->n_started < req.n; ++k) {
      if (g->handle->cancelled()) {
        end_unstarted(*g);  // all of them, however many were asked for: nothing else would end them
        return;
      }
      const int32_t index = g->n_started++;
      SamplingParams params = req.sampling;
      if (params.seed) params.seed = *params.seed + static_cast<uint64_t>(index);
      // Validated in submit(), so creation cannot fail.
      Sampler sampler = std::move(Sampler::create(params, n_vocab(), g->stop_ids)).value();
      sampler.set_prompt(req.prompt);
      auto r = std::make_unique<Request>();
      r->id = next_id_++;
      r->tokens = req.prompt;
      r->n_prompt = r->n_tokens();
      r->max_tokens = req.max_tokens;
      r->stop_token_ids = g->stop_ids;
      r->cache_salt = req.cache_salt;
      r->priority = req.priority;
      const bool collect = index == 0 && req.sampling.prompt_logprobs >= 0;
      r->use_prefix_cache = !collect;
      auto constraint = g->grammar ? std::make_unique<SequenceConstraint>(g->grammar, g->stop_ids, n_vocab(),
                                                                      req.sampling.constraint.start_after)
                                : nullptr;
      Sequence& seq = seqs_.emplace(r->id, Sequence{.group = g,
                                                    .index = index,
                                                    .sampler = std::move(sampler),
                                                    .constraint = std::move(constraint),
                                                    .collects_prompt_logprobs = collect})
                          .first->second;
      const SpeculativeMethod method = req.speculative_method.value_or(config_.speculative.method);
      if (method != SpeculativeMethod::kNone) {
        seq.drafter = std::make_unique<speculative::SequenceDrafter>(method);
        ++n_speculating_;
      }
      if (seq.constraint && config_.grammar_fast_forward) {
        seq.grammar_drafts = true;
        ++n_grammar_drafting_;
      }
      scheduler_.add(std::move(r));
    }
  }

  // The event that ends sequence `index` of `g` without a token (seq null: never started).
  TokenEvent final_event(Sequence* seq, Group& g, int32_t index, FinishReason reason) {
    TokenEvent e;
    e.index = index;
    e.finish = reason;
    e.finish_seconds = std::chrono::duration<double>(Clock::now() - g.submitted).count();
    if (seq != nullptr) {
      e.n_draft_tokens = seq->n_draft_tokens;
      e.n_accepted_draft_tokens = seq->n_accepted_draft_tokens;
    }
    if (seq == nullptr || !seq->first_event_sent) fill_first_event(seq, g, &e);
    return e;
  }

  void fill_first_event(Sequence* seq, const Group& g, TokenEvent* e) {
    e->n_prompt_tokens = static_cast<int64_t>(g.request.prompt.size());
    if (seq != nullptr) {
      e->n_cached_prompt_tokens = std::max<int64_t>(0, seq->n_cached_prompt);
      e->queue_seconds = seq->queue_seconds;
      e->first_token_seconds = std::chrono::duration<double>(Clock::now() - g.submitted).count();
      seq->first_event_sent = true;
    }
    e->prompt_logprobs = g.prompt_logprobs;
  }

  void drain_submissions() {
    std::deque<Submission> incoming;
    {
      std::lock_guard<std::mutex> lock(wakeup_->mutex);
      incoming.swap(queue_);
    }
    for (Submission& s : incoming) admit(std::move(s));
  }

  void apply_cancellations() {
    for (auto& [id, seq] : seqs_) {
      if (seq.group->handle->cancelled() || seq.group->handle->stop_requested(seq.index)) scheduler_.cancel(id);
    }
  }

  // ---- The loop ----

  void loop() {
    bool idle = false;
    Step* in_flight = nullptr;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(wakeup_->mutex);
        // Nothing could be scheduled last time: sleep until a submission, a cancel or a
        // stop-string match changes that (no busy waiting).
        if (idle) wakeup_->cv.wait(lock, [&] { return stop_ || !queue_.empty() || wakeup_->n_signals != seen_signals_; });
        if (stop_) break;
        seen_signals_ = wakeup_->n_signals;
      }
      drain_submissions();
      apply_cancellations();
      // Drafts need synchronous steps (the next draft depends on what this step keeps): while
      // a sequence speculates, the step in flight is finished and steps run in turn.
      if (worker_ && n_speculating_ == 0 && !grammar_draft_pending()) {
        Step* const before = in_flight;
        in_flight = step_async(in_flight);
        idle = before == nullptr && in_flight == nullptr && !ended_some_;
      } else {
        if (in_flight != nullptr) in_flight = drain(in_flight);
        idle = !step_sync();
      }
    }
    if (in_flight != nullptr) DI_ICHECK(worker_->wait().ok());
    for (auto& [id, seq] : seqs_) {
      seq.group->handle->push(final_event(&seq, *seq.group, seq.index, FinishReason::kCancelled));
      end_unstarted(*seq.group);
    }
    std::lock_guard<std::mutex> lock(wakeup_->mutex);
    for (Submission& s : queue_) {
      for (int32_t i = 0; i < s.request.n; ++i) {
        TokenEvent e;
        e.index = i;
        e.finish = FinishReason::kCancelled;
        s.handle->push(std::move(e));
      }
    }
  }

  // Samples and finishes the step in flight, launching nothing after it.
  Step* drain(Step* in_flight) {
    const Status st = worker_->wait();
    if (!st.ok()) {
      fail_step(*in_flight, st, nullptr);
      return nullptr;
    }
    sample(*in_flight);
    finish(*in_flight, Clock::time_point{});
    return nullptr;
  }

  // One step planned, run, sampled and finished in turn; false when there was nothing to do.
  bool step_sync() {
    Step& step = steps_[0];
    const auto t0 = Clock::now();
    propose_drafts();
    plan(step);
    step.plan_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    apply_kv_writes(step);
    if (!step.plan.empty()) {
      const auto tf = Clock::now();
      const Status st = runner_->run(step.tokens, step.batch, *kv_);
      step.forward_end = Clock::now();
      step.forward_seconds = std::chrono::duration<double>(step.forward_end - tf).count();
      if (!st.ok()) {
        fail_step(step, st, nullptr);
        return true;
      }
      sample(step);
      // The schedule trades tokens for seconds of the whole step: drafting, planning and
      // sampling each verified row cost time too, not only the forward pass. Only steps
      // without prompt tokens: a row costs less in a large prefill matrix product than in a
      // decode step's, and a fit through both would price a draft row too cheaply.
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      if (step.prompt_tokens == 0) {
        step_cost_.observe(static_cast<int64_t>(step.plan.chunks.size()), step.plan.n_tokens, seconds);
      }
      if (model_drafters_decoding_) failed_draft_budget_.elapse(seconds);
    }
    finish(step, Clock::time_point{});
    if (!step.plan.empty()) observe_draft_layers(step);
    return !step.plan.empty() || !step.plan.finished.empty();
  }

  // Plans the step after `in_flight` while it runs, then samples `in_flight`, launches the new
  // step and finishes `in_flight` while the new one runs. Returns the step now in flight.
  Step* step_async(Step* in_flight) {
    Step& next = in_flight == &steps_[0] ? steps_[1] : steps_[0];
    plan(next);
    ended_some_ = !next.plan.finished.empty();
    if (in_flight != nullptr) {
      const Status st = worker_->wait();
      apply_kv_writes(next);  // in_flight's pass is over, next's is not launched
      if (!st.ok()) {
        // `next` was planned on top of the failed step: its requests start over.
        fail_step(*in_flight, st, &next);
        return nullptr;
      }
      sample(*in_flight);
      fill_placeholders(next, *in_flight);
    }
    if (in_flight == nullptr) apply_kv_writes(next);
    const auto launch = Clock::now();
    if (!next.plan.empty()) {
      worker_->launch([this, &next] {
        const auto t0 = Clock::now();
        Status st = runner_->run(next.tokens, next.batch, *kv_);
        next.forward_end = Clock::now();
        next.forward_seconds = std::chrono::duration<double>(next.forward_end - t0).count();
        return st;
      });
    }
    if (in_flight != nullptr) {
      // The model was idle from the end of in_flight's pass until `launch` (or, with nothing
      // launched, until in_flight is finished).
      finish(*in_flight, next.plan.empty() ? Clock::time_point{} : launch);
    }
    if (!next.plan.empty() && overlap_masks_) prepare_masks(next);
    return next.plan.empty() ? nullptr : &next;
  }

  // The masks `step`'s constrained rows will sample with, computed while its pass runs: each
  // sequence's matcher already holds every token before the row (in_flight's were accepted in
  // sample()), and nothing touches it until `step` is sampled. Sequences that ended since the
  // step was planned are skipped, as sample() drops them.
  void prepare_masks(const Step& step) {
    for (const SampleJob& s : step.sample_jobs) {
      const Request* r = scheduler_.find(s.id);
      if (r == nullptr || !r->live(s.epoch)) continue;
      auto it = seqs_.find(s.id);
      if (it != seqs_.end() && it->second.constraint) it->second.constraint->prepare_mask();
    }
  }

  // Schedules into `step` and builds its batch; ends the requests cancelled meanwhile.
  void plan(Step& step) {
    step.plan = scheduler_.schedule();
    if (store_connector_) step.kv_writes = store_connector_->take_block_writes();
    for (RequestId id : step.plan.finished) end_cancelled(id);
    build_batch(step);
  }

  void apply_kv_writes(Step& step) {
    if (step.kv_writes.empty()) return;
    const Status st = store_connector_->apply(step.kv_writes);
    DI_ICHECK(st.ok());  // blocks of this cache's own groups, sized by it
    step.kv_writes.clear();
  }

  void build_batch(Step& step) {
    const StepPlan& plan = step.plan;
    step.tokens.clear();
    step.batch.clear();
    step.block_tables.clear();
    step.lookback.clear();
    lookback_at_.clear();
    step.sample_jobs.clear();
    step.prompt_jobs.clear();
    step.placeholders.clear();
    step.sampled.clear();
    step.prompt_tokens = 0;
    step.draft_tokens = 0;
    step.plan_seconds = 0.0;
    step.forward_seconds = 0.0;
    step.sample_seconds = 0.0;
    std::vector<std::pair<size_t, size_t>>& table_at = table_offsets_;  // (offset, size) per sequence and group
    table_at.clear();
    int64_t row = 0;
    const auto now = Clock::now();
    for (const ScheduledChunk& c : plan.chunks) {
      const Request* r = scheduler_.find(c.id);
      Sequence& seq = seqs_.at(c.id);
      if (seq.n_cached_prompt < 0) {
        seq.n_cached_prompt = c.first_position;
        seq.queue_seconds = std::chrono::duration<double>(now - seq.group->submitted).count();
      }
      step.prompt_tokens += std::clamp<int64_t>(r->n_prompt - c.first_position, 0, c.n_tokens);
      step.draft_tokens += c.n_draft;
      for (int64_t pos = c.first_position; pos < c.first_position + c.n_tokens; ++pos) {
        if (pos < r->n_tokens()) {
          step.tokens.push_back(r->tokens[static_cast<size_t>(pos)]);
        } else if (c.n_draft > 0) {
          step.tokens.push_back(r->draft[static_cast<size_t>(pos - r->n_tokens())]);
        } else {
          DI_ICHECK(pos == r->n_tokens() && r->n_placeholders > 1);  // the token in flight
          step.placeholders.push_back({step.tokens.size(), c.id});
          step.tokens.push_back(-1);
        }
      }
      // Prompt logprobs need every prompt position's logits; otherwise only a sampling row.
      // A verifying chunk needs every row: row i judges draft token i.
      const bool all = (seq.collects_prompt_logprobs && c.first_position < r->n_prompt - 1) || c.n_draft > 0;
      const LogitsMode mode = all         ? LogitsMode::kAll
                              : !c.samples ? LogitsMode::kNone
                              : takes_raw_argmax(seq) ? LogitsMode::kLastArgmax
                                                      : LogitsMode::kLast;
      BatchSequence& b = step.batch.emplace_back();
      b.n_tokens = c.n_tokens;
      b.first_position = c.first_position;
      b.logits = mode;
      b.replay_start = r->replay_start;
      b.n_shared = r->n_shared;
      // Tokens before the chunk were sampled (or are the prompt's) before this step was planned.
      const int64_t n_back = std::min(lookback_tokens_, c.first_position);
      lookback_at_.emplace_back(step.lookback.size(), static_cast<size_t>(n_back));
      step.lookback.insert(step.lookback.end(), r->tokens.begin() + (c.first_position - n_back),
                           r->tokens.begin() + c.first_position);
      for (int g = 0; g < kv_manager_.n_groups(); ++g) {
        const auto table = kv_manager_.block_table(c.id, g);
        table_at.emplace_back(step.block_tables.size(), table.size());
        step.block_tables.insert(step.block_tables.end(), table.begin(), table.end());
      }
      const int64_t first_row = row;
      if (all) {
        for (int64_t i = 0; i < c.n_tokens && c.first_position + i + 1 < r->n_prompt; ++i) {
          step.prompt_jobs.push_back({c.id, c.epoch, row + i, c.first_position + i, nullptr});
        }
        row += c.n_tokens;
      } else if (c.samples) {
        ++row;
      }
      if (c.samples) {
        SampleJob& job = step.sample_jobs.emplace_back();
        job.id = c.id;
        job.epoch = c.epoch;
        job.row = c.n_draft > 0 ? first_row : row - 1;
        job.n_draft = c.n_draft;
        std::copy_n(r->draft.begin(), c.n_draft, job.draft.begin());
      }
    }
    // The copies are complete: the spans cannot move any more.
    const int32_t* tables = step.block_tables.data();
    const auto per_seq = static_cast<size_t>(kv_manager_.n_groups());
    for (size_t i = 0; i < step.batch.size(); ++i) {
      for (size_t g = 0; g < per_seq; ++g) {
        const auto [at, n] = table_at[i * per_seq + g];
        step.batch[i].block_tables[g] = {tables + at, n};
      }
      const auto [at, n] = lookback_at_[i];
      step.batch[i].lookback = {step.lookback.data() + at, n};
    }
  }

  // Whether the sequence's next token is the first maximum of its raw logits, so that the pass
  // may choose it without handing the logits over (LogitsMode::kLastArgmax). Decided when the
  // step is planned, before the step in flight is sampled: each condition can only stay true
  // (min_tokens is met for good, the prompt's logits were handed over with the first event).
  static bool takes_raw_argmax(const Sequence& seq) {
    return seq.constraint == nullptr && seq.sampler.params().logprobs < 0 &&
           !(seq.group->request.return_last_prompt_logits && !seq.first_event_sent) && seq.sampler.takes_raw_argmax();
  }

  // Writes the ids `done` sampled into `next`'s placeholder slots. Every placeholder's sequence
  // sampled in `done` and is still live: one cancelled or preempted since was left out of next.
  void fill_placeholders(Step& next, const Step& done) {
    for (const Placeholder& p : next.placeholders) {
      auto it = std::find_if(done.sampled.begin(), done.sampled.end(), [&](const SampledToken& t) { return t.id == p.id; });
      DI_ICHECK(it != done.sampled.end());
      next.tokens[p.slot] = it->token;
    }
  }

  // Samples every live sampling row and computes the logprobs asked for, sequences in
  // parallel: each has its own Sampler, so the result does not depend on how rows meet threads.
  // Rows of sequences cancelled or preempted since the step was planned are dropped.
  void sample(Step& step) {
    const auto live = [&](RequestId id, int32_t epoch) {
      const Request* r = scheduler_.find(id);
      return r != nullptr && r->live(epoch);
    };
    std::erase_if(step.sample_jobs, [&](const SampleJob& s) { return !live(s.id, s.epoch); });
    std::erase_if(step.prompt_jobs, [&](const PromptJob& p) { return !live(p.id, p.epoch); });
    for (SampleJob& s : step.sample_jobs) s.seq = &seqs_.at(s.id);
    for (PromptJob& p : step.prompt_jobs) p.group = seqs_.at(p.id).group.get();
    const auto t0 = Clock::now();
    const auto n_samples = static_cast<int64_t>(step.sample_jobs.size());
    const auto n_jobs = n_samples + static_cast<int64_t>(step.prompt_jobs.size());
    pool_->parallel_for(n_jobs, [&](int thread, int64_t begin, int64_t end) {
      auto& scratch = logprob_scratch_[static_cast<size_t>(thread)];
      for (int64_t j = begin; j < end; ++j) {
        if (j < n_samples) {
          sample_job(step.sample_jobs[static_cast<size_t>(j)], scratch);
        } else {
          const PromptJob& p = step.prompt_jobs[static_cast<size_t>(j - n_samples)];
          const auto next = static_cast<size_t>(p.position + 1);
          p.group->prompt_logprobs[next] = compute_logprob(runner_->logits(p.row), p.group->request.prompt[next],
                                                           p.group->request.sampling.prompt_logprobs, scratch);
        }
      }
    });
    step.sampled.clear();
    for (const SampleJob& s : step.sample_jobs) {
      SampledToken& t = step.sampled.emplace_back();
      t.id = s.id;
      t.token = s.tokens[0];
      t.epoch = s.epoch;
      t.finish = s.finish;
      t.n_draft = s.n_draft;
      t.n_more = s.n_tokens - 1;
      std::copy_n(s.tokens.begin() + 1, t.n_more, t.more.begin());
    }
    step.sample_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // Samples the job's rows in order (speculative/verify.h: the draft's verification).
  void sample_job(SampleJob& s, std::vector<std::pair<float, int32_t>>& scratch) {
    s.finish = FinishReason::kNone;
    s.logprobs.clear();
    const int32_t k = s.seq->sampler.params().logprobs;
    const speculative::Verified v = speculative::verify_draft(
        std::span<const int32_t>(s.draft.data(), static_cast<size_t>(s.n_draft)), s.tokens, [&](int32_t i, bool* ends) {
          if (const int32_t greedy = runner_->greedy_token(s.row + i); greedy >= 0) {
            const int32_t token = s.seq->sampler.sample_argmax(greedy);
            s.last_prompt_logits.clear();
            *ends = is_stop(*s.seq, token);
            return token;
          }
          const std::span<const float> logits = runner_->logits(s.row + i);
          const int32_t token = sample_row(*s.seq, logits, &s.finish);
          if (k >= 0) s.logprobs.push_back(compute_logprob(logits, token, k, scratch));
          if (i == 0) copy_last_prompt_logits(s, logits);
          *ends = s.finish != FinishReason::kNone || is_stop(*s.seq, token);
          return token;
        });
    s.n_tokens = v.n_tokens;
    s.n_accepted = v.n_accepted;
  }

  static bool is_stop(const Sequence& seq, int32_t token) {
    const std::vector<int32_t>& stops = seq.group->stop_ids;
    return std::find(stops.begin(), stops.end(), token) != stops.end();
  }

  // The constraint's mask goes into the sampler and the token into the matcher (one sequence
  // per thread: the sequence's matcher and buffer are its own).
  static int32_t sample_row(Sequence& seq, std::span<const float> logits, FinishReason* finish) {
    SequenceConstraint* constraint = seq.constraint.get();
    const int32_t token = seq.sampler.sample(logits, constraint ? constraint->mask() : std::span<const uint64_t>());
    if (constraint == nullptr) return token;
    switch (constraint->accept(token)) {
      case SequenceConstraint::Next::kContinue: break;
      case SequenceConstraint::Next::kComplete: *finish = FinishReason::kStop; break;
      case SequenceConstraint::Next::kRefused: *finish = FinishReason::kError; break;
    }
    return token;
  }

  // A sequence's first sample row is its prompt's last position.
  static void copy_last_prompt_logits(SampleJob& s, std::span<const float> logits) {
    s.last_prompt_logits.clear();
    if (s.seq->group->request.return_last_prompt_logits && !s.seq->first_event_sent) {
      s.last_prompt_logits.assign(logits.begin(), logits.end());
    }
  }

  // After sampling: the scheduler's update, statistics, events, and the finished sequences'
  // release. `model_resumed` is when the model's next pass started (none: now, after all this).
  void finish(Step& step, Clock::time_point model_resumed) {
    std::vector<RequestId> finished;
    if (!step.plan.empty()) finished = scheduler_.update(step.plan, step.sampled);
    // Statistics first: a caller that has seen its last event finds this step counted.
    update_stats(step);
    publish(step);
    for (RequestId id : finished) {
      const std::unique_ptr<Request> r = scheduler_.take_finished(id);
      if (r) remember_output(id, *r);
      erase_sequence(id);
    }
    if (!step.plan.empty()) {
      const auto resumed = model_resumed == Clock::time_point{} ? Clock::now() : model_resumed;
      const double overhead =
          step.plan_seconds + std::max(0.0, std::chrono::duration<double>(resumed - step.forward_end).count());
      std::lock_guard<std::mutex> lock(stats_mutex_);
      stats_.overhead_seconds += overhead;
      if (step.prompt_tokens == 0) {
        ++stats_.decode_steps;
        for (const SampleJob& s : step.sample_jobs) stats_.decode_step_tokens += s.n_tokens;
        stats_.decode_step_seconds += step.forward_seconds + overhead;
      }
    }
  }

  void publish(Step& step) {
    for (SampleJob& s : step.sample_jobs) {
      const Request* r = scheduler_.find(s.id);
      Sequence& seq = *s.seq;
      Group& g = *seq.group;
      seq.collects_prompt_logprobs = false;
      TokenEvent e;
      e.index = seq.index;
      // A token the grammar refused (it allowed none) is not output.
      const bool refused = s.finish == FinishReason::kError;
      const auto n_out = static_cast<size_t>(s.n_tokens - (refused ? 1 : 0));
      e.tokens.assign(s.tokens.begin(), s.tokens.begin() + static_cast<ptrdiff_t>(n_out));
      if (seq.sampler.params().logprobs >= 0) {
        s.logprobs.resize(std::min(s.logprobs.size(), n_out));
        e.logprobs = std::move(s.logprobs);
      }
      if (refused) e.error = "the constraint's grammar allows no token here (nesting deeper than its limit)";
      if (seq.draft_from_grammar && s.n_draft > 0) {
        record_grammar_verification(seq, s);
      } else if (seq.drafter) {
        record_verification(seq, s);
      }
      if (!seq.first_event_sent) {
        fill_first_event(&seq, g, &e);
        e.last_prompt_logits = std::move(s.last_prompt_logits);
      }
      if (r->state == RequestState::kFinished) {
        e.finish = r->finish;
        e.finish_seconds = std::chrono::duration<double>(Clock::now() - g.submitted).count();
        e.n_draft_tokens = seq.n_draft_tokens;
        e.n_accepted_draft_tokens = seq.n_accepted_draft_tokens;
        const int32_t last = r->tokens.back();  // the scheduler cut what followed a stop
        const bool stop_id = std::find(r->stop_token_ids.begin(), r->stop_token_ids.end(), last) != r->stop_token_ids.end();
        if (r->finish == FinishReason::kStop && stop_id) e.stop_token = last;  // else a complete grammar
      }
      g.handle->push(std::move(e));
      // The first sequence's prompt is in the cache now: its siblings start and share it.
      if (seq.index == 0 && g.n_started < g.request.n) start_sequences(seq.group, g.request.n - 1);
    }
  }

  // The backend failed `step`'s pass (out of memory, a kernel failure): its live requests end
  // with kError and their blocks go back (nothing the pass wrote was published to the prefix
  // cache). `planned`, the step planned on top of it (asynchronous scheduling), is dropped: its
  // requests that did not fail start over, from the prefix cache. The engine keeps serving.
  void fail_step(Step& step, const Status& failure, Step* planned) {
    const std::string message = "the " + std::string(backend_->name()) + " backend failed a step: " + failure.message();
    std::fprintf(stderr, "deepinfer: %s (%zu requests ended)\n", message.c_str(), step.plan.chunks.size());
    const std::vector<RequestId> failed = scheduler_.fail(step.plan);
    if (planned != nullptr) scheduler_.restart(planned->plan);
    for (RequestId id : failed) end_with(id, FinishReason::kError, message);
    std::lock_guard<std::mutex> lock(stats_mutex_);
    ++stats_.n_failed_steps;
    stats_.n_running = static_cast<int64_t>(scheduler_.n_running());
    stats_.n_waiting = static_cast<int64_t>(scheduler_.n_waiting());
  }

  void end_cancelled(RequestId id) { end_with(id, FinishReason::kCancelled, {}); }

  void erase_sequence(RequestId id) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) return;
    if (it->second.drafter) {
      --n_speculating_;
      if (it->second.drafter->method() == SpeculativeMethod::kDraft) draft_model_->release(id);
      if (is_layer_method(it->second.drafter->method())) layer_drafter_->release(id);
    }
    if (it->second.grammar_drafts) --n_grammar_drafting_;
    seqs_.erase(it);
  }

  // ---- Speculative decoding ----

  // Before planning a synchronous step: drafts for the speculating sequences that decode, and
  // how much of each to verify (the schedule).
  void propose_drafts() {
    if (n_speculating_ == 0 && n_grammar_drafting_ == 0) return;
    if (!step_cost_profiled_) profile_step_cost();
    proposals_.clear();
    model_drafters_decoding_ = false;
    draft_jobs_.clear();
    layer_jobs_.clear();
    int64_t n_decoding = 0;
    for (auto& [id, seq] : seqs_) {
      const Request* r = scheduler_.find(id);
      if (r == nullptr || r->state != RequestState::kRunning || r->n_computed != r->n_tokens() - 1) continue;
      ++n_decoding;
      if (!seq.drafter && !seq.grammar_drafts) continue;
      // The kept tokens never pass max_tokens: a draft leaves room for the target's own token.
      const int64_t left = r->max_tokens - r->n_generated() - 1;
      Proposal p;
      p.id = id;
      if (seq.grammar_drafts && left > 0) p.draft = grammar_draft(seq, std::min<int64_t>(kMaxSpeculativeTokens, left));
      seq.draft_from_grammar = p.draft.n > 0;
      const int64_t room = std::min<int64_t>(config_.speculative.num_tokens, left);
      if (p.draft.n == 0 && seq.drafter && room > 0) {
        const bool model = is_model_drafter(seq.drafter->method());
        model_drafters_decoding_ = model_drafters_decoding_ || model;
        if (model && !seq.model_draft_back_off.may_propose(failed_draft_budget_)) {
          // backing off (back_off.h)
        } else if (seq.drafter->method() == SpeculativeMethod::kDraft) {
          // Drafted below, all sequences in the same passes; `out` is set once proposals_ stops growing.
          draft_jobs_.push_back({id, r->tokens, static_cast<int32_t>(room), nullptr});
          p.draft_job = static_cast<int32_t>(draft_jobs_.size());
        } else if (is_layer_method(seq.drafter->method())) {
          layer_jobs_.push_back({id, r->tokens, static_cast<int32_t>(room), nullptr});
          p.draft_job = -static_cast<int32_t>(layer_jobs_.size());
        } else {
          p.draft = seq.drafter->propose(r->tokens, static_cast<int32_t>(room), global_suffix_,
                                         pooled_[static_cast<size_t>(seq.drafter->method())]);
        }
      }
      proposals_.push_back(p);
    }
    if (!draft_jobs_.empty()) {
      for (Proposal& p : proposals_) {
        if (p.draft_job > 0) draft_jobs_[static_cast<size_t>(p.draft_job - 1)].out = &p.draft;
      }
      // A failed draft pass leaves those sequences without drafts this step; the target's pass
      // reports a backend failure of its own.
      const auto t0 = Clock::now();
      (void)draft_model_->propose(draft_jobs_);
      charge_draft_pass(draft_jobs_, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    if (!layer_jobs_.empty()) {
      for (Proposal& p : proposals_) {
        if (p.draft_job < 0) layer_jobs_[static_cast<size_t>(-p.draft_job - 1)].out = &p.draft;
      }
      const auto t0 = Clock::now();
      (void)layer_drafter_->propose(layer_jobs_);  // as above: a failed pass leaves fewer drafts
      charge_draft_pass(layer_jobs_, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    // Nothing after a stop token can be kept: the sequence ends with it.
    for (Proposal& p : proposals_) cut_after_stop(p.draft, scheduler_.find(p.id)->stop_token_ids);
    std::sort(proposals_.begin(), proposals_.end(), [](const Proposal& a, const Proposal& b) { return a.id < b.id; });
    const std::vector<int32_t> lengths = draft_lengths(n_decoding);
    for (size_t i = 0; i < proposals_.size(); ++i) {
      const Proposal& p = proposals_[i];
      scheduler_.set_draft(p.id, p.draft.view().first(static_cast<size_t>(lengths[i])));
      if (p.draft.n > 0 && lengths[i] == 0) {
        forget_a_little(p.id);
        back_off(p.id);
      }
    }
  }

  // After a synchronous step: the draft layers' rows of the positions its pass computed for
  // sequences that draft with them, while the runner still holds that pass's states
  // (layer_drafter.h).
  void observe_draft_layers(const Step& step) {
    if (!layer_drafter_) return;
    layer_chunks_.clear();
    int64_t row = 0;
    for (const ScheduledChunk& c : step.plan.chunks) {
      const int64_t first_row = row;
      row += c.n_tokens;
      const Request* r = scheduler_.find(c.id);
      auto it = seqs_.find(c.id);
      if (r == nullptr || !r->live(c.epoch) || it == seqs_.end() || !it->second.drafter ||
          !is_layer_method(it->second.drafter->method())) {
        continue;
      }
      layer_chunks_.push_back({c.id, c.first_position, c.n_tokens, first_row, r->tokens});
    }
    // A failed pass leaves those sequences without MTP state: they draft again after their next chunk.
    if (!layer_chunks_.empty()) (void)layer_drafter_->observe(layer_chunks_);
  }

  static void cut_after_stop(speculative::Draft& d, std::span<const int32_t> stop_ids) {
    for (int32_t j = 0; j + 1 < d.n; ++j) {
      if (std::find(stop_ids.begin(), stop_ids.end(), d.tokens[static_cast<size_t>(j)]) != stop_ids.end()) {
        d.n = j + 1;
        return;
      }
    }
  }

  // The tokens of the text a sequence's grammar forces next (its tokenizer's spelling: the
  // model may spell it otherwise, and verification keeps what it samples).
  speculative::Draft grammar_draft(Sequence& seq, int64_t room) {
    speculative::Draft d;
    const std::string text = seq.constraint->forced_text(kForcedTextBytes);
    if (text.empty()) return d;
    // Confidence: how often this sequence (and all of them, the prior) kept forced tokens; the
    // schedule then verifies them only where they pay for their rows (a large batch is
    // compute-bound: a token the model would spell otherwise costs a row for nothing).
    for (int32_t id : tokenizer_->encode(text, {.add_bos = false})) {
      if (d.n >= room) break;
      d.push(id, seq.grammar_acceptance.rate(d.n, grammar_pooled_.rate(d.n, kForcedTokenPrior)));
    }
    return d;
  }

  // Whether some constrained sequence has forced text the schedule would verify: steps then
  // run synchronously. In a large batch the schedule seldom verifies it (the step is
  // compute-bound), and giving up asynchronous steps for nothing cost a few per cent.
  bool grammar_draft_pending() {
    if (n_grammar_drafting_ == 0) return false;
    Sequence* forced = nullptr;
    for (auto& [id, seq] : seqs_) {
      if (seq.grammar_drafts && seq.constraint->forces_text()) {
        forced = &seq;
        break;
      }
    }
    if (forced == nullptr) return false;
    if (config_.speculative.schedule == SpeculativeSchedule::kFixed || !step_cost_profiled_) return true;
    const auto n = static_cast<int64_t>(scheduler_.n_running());
    const std::array<float, 1> survival = {forced->grammar_acceptance.rate(0, grammar_pooled_.rate(0, kForcedTokenPrior))};
    const std::array<speculative::DraftCandidate, 1> one = {speculative::DraftCandidate{survival}};
    if (speculative::choose_draft_lengths(one, n, n, static_cast<double>(n), 1, step_cost_)[0] > 0) return true;
    // Not worth verifying now; the evidence ages all the same, so that a rate one early refusal
    // pushed down drifts back to the prior and forced text is tried again (AcceptanceStats).
    forced->grammar_acceptance.record(0, 0);
    grammar_pooled_.record(0, 0);
    return false;
  }

  static bool is_model_drafter(SpeculativeMethod m) { return m == SpeculativeMethod::kDraft || is_layer_method(m); }

  // A model drafter's proposal kept nothing (rejected, or not worth verifying): it backs off.
  void back_off(RequestId id) {
    auto it = seqs_.find(id);
    if (it == seqs_.end() || !it->second.drafter || !is_model_drafter(it->second.drafter->method())) return;
    failed_draft_budget_.fail(it->second.model_draft_back_off.missed());
  }

  // Each sequence whose job drafted is charged an equal share of the drafter's pass: the
  // engine's budget counts the shares of those that keep nothing.
  template <typename Jobs>
  void charge_draft_pass(const Jobs& jobs, double seconds) {
    int64_t drafted = 0;
    for (const auto& j : jobs) drafted += j.out->n > 0 ? 1 : 0;
    for (const auto& j : jobs) {
      if (j.out->n == 0) continue;
      if (auto it = seqs_.find(j.id); it != seqs_.end()) {
        it->second.model_draft_back_off.charge(seconds / static_cast<double>(drafted));
      }
    }
  }

  // A draft the schedule left unverified teaches nothing, but its evidence still ages: else a
  // sequence (or a method's pool) whose estimate once fell below what a step costs would never
  // be verified again, and never learn that its text became repetitive.
  void forget_a_little(RequestId id) {
    auto it = seqs_.find(id);
    if (it == seqs_.end() || !it->second.drafter) return;
    it->second.drafter->record(0, 0);
    pooled_[static_cast<size_t>(it->second.drafter->method())].record(0, 0);
  }

  // The step-time curve the schedule starts from, measured once before the first draft: one
  // sequence's pass over 1 and over 1 + num_tokens positions (after a pass that warms the
  // memory up; the best of two each), weighted as a few dozen steps so that the engine's own
  // steps then take over. A cold first pass or a grammar's first mask would otherwise teach
  // the model that tokens are dear. Positions in blocks that are freed unpublished.
  void profile_step_cost() {
    step_cost_profiled_ = true;
    constexpr kv::RequestId kProfileId = ~kv::RequestId{0};
    const int64_t wide = 1 + config_.speculative.num_tokens;
    if (!kv_manager_.allocate_slots(kProfileId, wide, nullptr)) return;  // the cache is busy: learn online
    std::vector<int32_t> tokens(static_cast<size_t>(wide), 0);
    std::array<std::vector<int32_t>, backend::kMaxKvGroups> tables;
    BatchSequence b;
    b.first_position = 0;
    b.logits = LogitsMode::kAll;
    for (int g = 0; g < kv_manager_.n_groups(); ++g) {
      const auto t = kv_manager_.block_table(kProfileId, g);
      tables[static_cast<size_t>(g)].assign(t.begin(), t.end());
      b.block_tables[static_cast<size_t>(g)] = tables[static_cast<size_t>(g)];
    }
    const auto time_pass = [&](int64_t n) {
      b.n_tokens = n;
      const auto t0 = Clock::now();
      const bool ok = runner_->run(std::span<const int32_t>(tokens.data(), static_cast<size_t>(n)), {&b, 1}, *kv_).ok();
      return ok ? std::chrono::duration<double>(Clock::now() - t0).count() : -1.0;
    };
    time_pass(wide);
    const double one = std::min(time_pass(1), time_pass(1));
    const double many = std::min(time_pass(wide), time_pass(wide));
    kv_manager_.free(kProfileId);
    if (!(one > 0.0 && many > 0.0)) return;
    for (int i = 0; i < 16; ++i) {
      step_cost_.observe(1, 1, one);
      step_cost_.observe(1, wide, many);
    }
  }

  std::vector<int32_t> draft_lengths(int64_t n_decoding) {
    std::vector<int32_t> lengths;
    if (config_.speculative.schedule == SpeculativeSchedule::kFixed) {
      for (const Proposal& p : proposals_) lengths.push_back(p.draft.n);
      return lengths;
    }
    std::vector<speculative::DraftCandidate> candidates;
    for (Proposal& p : proposals_) {
      float survival = 1.0f;
      for (int32_t j = 0; j < p.draft.n; ++j) {
        survival *= p.draft.confidence[static_cast<size_t>(j)];
        p.survival[static_cast<size_t>(j)] = survival;
      }
      candidates.push_back({std::span<const float>(p.survival.data(), static_cast<size_t>(p.draft.n))});
    }
    // The step's other tokens: one per decoding sequence, and prompt tokens as many as the last
    // step computed (the plan that decides them comes after the drafts).
    const int64_t base = n_decoding + std::min(last_prompt_tokens_, config_.max_num_batched_tokens);
    const int64_t room = std::max<int64_t>(0, config_.max_num_batched_tokens - base);
    const int64_t chunks = n_decoding + (last_prompt_tokens_ > 0 ? 1 : 0);
    return speculative::choose_draft_lengths(candidates, chunks, base, static_cast<double>(n_decoding), room,
                                             step_cost_);
  }

  // After a speculating sequence's sample: its drafter's statistics and the engine's counts.
  void record_verification(Sequence& seq, const SampleJob& s) {
    if (!seq.first_event_sent) return;  // its prompt's chunk: nothing could be drafted
    if (s.n_draft > 0 && is_model_drafter(seq.drafter->method())) {
      if (s.n_accepted > 0) {
        seq.model_draft_back_off.kept();
      } else {
        back_off(s.id);
      }
    }
    if (s.n_draft > 0) {
      seq.drafter->record(s.n_draft, s.n_accepted);
      pooled_[static_cast<size_t>(seq.drafter->method())].record(s.n_draft, s.n_accepted);
      seq.n_draft_tokens += s.n_draft;
      seq.n_accepted_draft_tokens += s.n_accepted;
    }
    std::lock_guard<std::mutex> lock(stats_mutex_);
    SpeculativeUsage& u = speculative_usage();
    ++u.verify_sizes[static_cast<size_t>(s.n_draft)];
    if (s.n_draft > 0) count_verification(u.methods[method_usage_index(seq.drafter->method())], s);
  }

  static void count_verification(SpeculativeMethodUsage& m, const SampleJob& s) {
    ++m.verifications;
    m.draft_tokens += s.n_draft;
    m.accepted_tokens += s.n_accepted;
  }

  // After a verification of forced text (fast-forward): the sequence's and the pooled
  // acceptance, and the "grammar" method's counts.
  void record_grammar_verification(Sequence& seq, const SampleJob& s) {
    seq.grammar_acceptance.record(s.n_draft, s.n_accepted);
    grammar_pooled_.record(s.n_draft, s.n_accepted);
    seq.n_draft_tokens += s.n_draft;
    seq.n_accepted_draft_tokens += s.n_accepted;
    std::lock_guard<std::mutex> lock(stats_mutex_);
    count_verification(speculative_usage().methods[kGrammarUsage], s);
  }

  // Where a method's counts are in SpeculativeUsage::methods: ngram, suffix, grammar, draft.
  static constexpr size_t kGrammarUsage = 2;
  static size_t method_usage_index(SpeculativeMethod m) {
    DI_ICHECK(m != SpeculativeMethod::kNone);
    switch (m) {
      case SpeculativeMethod::kNgram: return 0;
      case SpeculativeMethod::kSuffix: return 1;
      case SpeculativeMethod::kDraft: return 3;
      case SpeculativeMethod::kMtp: return 4;
      case SpeculativeMethod::kDspark: return 5;
      case SpeculativeMethod::kNone: break;
    }
    return 0;
  }

  // stats_.speculative, its methods made on first use. Under stats_mutex_.
  SpeculativeUsage& speculative_usage() {
    SpeculativeUsage& u = stats_.speculative;
    if (u.methods.empty()) {
      for (SpeculativeMethod m : {SpeculativeMethod::kNgram, SpeculativeMethod::kSuffix}) {
        u.methods.push_back({speculative_method_name(m)});
      }
      u.methods.push_back({"grammar"});
      u.methods.push_back({speculative_method_name(SpeculativeMethod::kDraft)});
      u.methods.push_back({speculative_method_name(SpeculativeMethod::kMtp)});
      u.methods.push_back({speculative_method_name(SpeculativeMethod::kDspark)});
      u.verify_sizes.assign(kMaxSpeculativeTokens + 1, 0);
    }
    return u;
  }

  // A finished sequence's output joins the suffix trie of earlier outputs (suffix decoding);
  // when the trie is full it is rebuilt from the latest outputs.
  void remember_output(RequestId id, const Request& r) {
    auto it = seqs_.find(id);
    if (it == seqs_.end() || !it->second.drafter || it->second.drafter->method() != SpeculativeMethod::kSuffix) return;
    std::vector<int32_t> output(r.tokens.begin() + r.n_prompt, r.tokens.end());
    recent_output_tokens_ += static_cast<int64_t>(output.size());
    recent_outputs_.push_back(std::move(output));
    while (recent_outputs_.size() > 1 && recent_output_tokens_ > kRecentOutputTokens) {
      recent_output_tokens_ -= static_cast<int64_t>(recent_outputs_.front().size());
      recent_outputs_.pop_front();
    }
    if (global_suffix_.full()) {
      global_suffix_.clear();
      for (const std::vector<int32_t>& o : recent_outputs_) global_suffix_.insert(o);
    } else {
      global_suffix_.insert(recent_outputs_.back());
    }
  }

  // Ends a sequence the scheduler has finished without a token, and its siblings that never
  // started.
  void end_with(RequestId id, FinishReason reason, const std::string& error) {
    scheduler_.take_finished(id);
    auto it = seqs_.find(id);
    if (it == seqs_.end()) return;
    Sequence& seq = it->second;
    TokenEvent e = final_event(&seq, *seq.group, seq.index, reason);
    e.error = error;
    seq.group->handle->push(std::move(e));
    end_unstarted(*seq.group, reason, error);  // siblings that never started end with it
    erase_sequence(id);
  }

  void end_unstarted(Group& g, FinishReason reason = FinishReason::kCancelled, const std::string& error = {}) {
    for (; g.n_started < g.request.n; ++g.n_started) {
      TokenEvent e = final_event(nullptr, g, g.n_started, reason);
      e.error = error;
      g.handle->push(std::move(e));
    }
  }

  void update_stats(const Step& step) {
    const StepPlan& plan = step.plan;
    const kv::KvCacheStats kvs = kv_manager_.stats();
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.n_running = static_cast<int64_t>(scheduler_.n_running());
    stats_.n_waiting = static_cast<int64_t>(scheduler_.n_waiting());
    stats_.kv_usage = kvs.usage;
    stats_.kv_blocks_total = kvs.pool.n_blocks;
    stats_.kv_blocks_used = kvs.pool.n_blocks - kvs.pool.n_free;
    stats_.kv_groups.resize(kvs.groups.size());
    for (size_t g = 0; g < kvs.groups.size(); ++g) {
      KvGroupUsage& u = stats_.kv_groups[g];
      const KvGroupSpec& spec = kv_->groups()[g];
      u.name = kvs.groups[g].name;
      u.blocks_total = kvs.groups[g].n_blocks;
      u.blocks_used = kvs.groups[g].n_used;
      group_peaks_[g] = std::max(group_peaks_[g], scheduler_.blocks_of_done_positions(static_cast<int>(g)));
      u.blocks_peak = group_peaks_[g];
      u.bytes = static_cast<int64_t>(spec.block_bytes()) * spec.n_blocks;
    }
    stats_.kv_block_size = config_.block_size;
    stats_.kv_cache_bytes = static_cast<int64_t>(kv_->bytes());
    stats_.prefix_queries = kvs.prefix_queries;
    stats_.prefix_hits = kvs.prefix_hits;
    stats_.n_preemptions += static_cast<int64_t>(plan.preempted.size());
    stats_.prompt_tokens += step.prompt_tokens;
    for (const SampleJob& s : step.sample_jobs) stats_.generation_tokens += s.n_tokens;
    if (!plan.empty()) last_prompt_tokens_ = step.prompt_tokens;
    if (!plan.empty()) {
      ++stats_.n_steps;
      stats_.forward_seconds += step.forward_seconds;
    }
  }

  void fill_store_stats(KvStoreUsage& u) const {
    const KvStoreConnectorStats c = store_connector_->stats();
    const kvstore::PageStoreStats s = store_->stats();
    u.hit_pages = c.hit_pages;
    u.miss_pages = c.miss_pages;
    u.hit_tokens = c.hit_tokens;
    u.write_drops = c.write_drops;
    u.load_seconds = c.load_seconds;
    u.bytes_read = s.bytes_read;
    u.bytes_written = s.bytes_written;
    u.pages_written = s.pages_written;
    u.write_failures = s.write_failures;
    u.checksum_failures = s.checksum_failures;
    u.evictions = s.evictions;
    u.expirations = s.expirations;
    u.pages = s.pages;
    u.bytes = s.bytes;
    u.memory_bytes = s.memory_bytes;
  }

  static KvStoreConnectorConfig store_connector_config(const EngineConfig& c) {
    return {c.kv_store_page_tokens, c.kv_store_write_queue_bytes};
  }

  EngineConfig config_;
  // Declared in the order they depend on each other: the backend runs on the pool, the model and
  // the KV memory live on the backend.
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<backend::Backend> backend_;
  std::unique_ptr<Model> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;  // null when the model carries none
  std::vector<int32_t> end_of_generation_;
  ConstraintCompiler constraints_{tokenizer_};  // used by submitters (thread-safe)
  int64_t max_context_;
  std::unique_ptr<backend::KvCache> kv_;
  kv::KvCacheManager kv_manager_;
  std::unique_ptr<kvstore::PageStore> store_;  // null: no KV store
  std::unique_ptr<speculative::DraftModel> draft_model_;  // null: none (SpeculativeConfig::draft_model_path)
  Scheduler scheduler_;
  // After the scheduler (which borrows it as its hook) and the store; destroyed before them,
  // writing its queued pages.
  std::unique_ptr<KvStoreConnector> store_connector_;
  std::unique_ptr<BatchRunner> runner_;
  std::unique_ptr<ForwardWorker> worker_;  // with async_scheduling
  bool overlap_masks_ = false;              // prepare_masks() while a pass runs (see the constructor)
  // Engine-thread state.
  std::unordered_map<RequestId, Sequence> seqs_;
  RequestId next_id_ = 1;
  uint64_t seen_signals_ = 0;  // wakeup_->n_signals when cancellations were last applied
  Step steps_[2];  // synchronous: steps_[0]; asynchronous: in flight and being planned, alternating
  std::vector<std::pair<size_t, size_t>> table_offsets_;  // build_batch's scratch
  std::vector<std::pair<size_t, size_t>> lookback_at_;    // (offset, size) per sequence, build_batch's scratch
  int64_t lookback_tokens_ = 0;                           // Model::lookback_tokens()
  bool ended_some_ = false;  // the last plan ended cancelled requests (work was done)
  std::vector<std::vector<std::pair<float, int32_t>>> logprob_scratch_;  // [pool threads]
  std::vector<int64_t> group_peaks_;  // [KV groups] most blocks held for computed positions
  // Speculative decoding.
  struct Proposal {
    RequestId id = 0;
    int32_t draft_job = 0;  // 1 + its index in draft_jobs_, -(1 + its index) in layer_jobs_; 0: neither
    speculative::Draft draft;
    std::array<float, kMaxSpeculativeTokens> survival{};
  };
  static constexpr int64_t kRecentOutputTokens = int64_t{1} << 20;  // what a rebuilt trie holds
  int64_t n_speculating_ = 0;  // sequences with a drafter: steps run synchronously meanwhile
  int64_t n_grammar_drafting_ = 0;  // sequences whose constraint drafts forced text
  // Forced text drafted per step at most, and the prior of a forced token's acceptance (the
  // model mostly spells forced text as the tokenizer does; grammar_pooled_ corrects it).
  static constexpr size_t kForcedTextBytes = 256;
  static constexpr float kForcedTokenPrior = 0.9f;
  speculative::AcceptanceStats grammar_pooled_;  // forced-text verifications of every sequence
  std::vector<Proposal> proposals_;  // propose_drafts' scratch
  std::vector<speculative::DraftModel::Job> draft_jobs_;  // propose_drafts' scratch
  // The model's own draft layers (MTP or DSpark, as the engine was started): null without.
  std::unique_ptr<speculative::LayerDrafter> layer_drafter_;
  SpeculativeMethod layer_method() const {
    return layer_drafter_ ? config_.speculative.method : SpeculativeMethod::kNone;
  }
  static bool is_layer_method(SpeculativeMethod m) { return m == SpeculativeMethod::kMtp || m == SpeculativeMethod::kDspark; }
  std::vector<speculative::DraftJob> layer_jobs_;                  // propose_drafts' scratch
  std::vector<speculative::LayerDrafter::Chunk> layer_chunks_;     // observe_draft_layers's scratch
  std::array<speculative::AcceptanceStats, 5> pooled_{};  // by SpeculativeMethod, over all sequences
  speculative::StepCostModel step_cost_;
  speculative::FailedDraftBudget failed_draft_budget_;  // model drafters' passes that kept nothing
  bool model_drafters_decoding_ = false;  // in this step (propose_drafts)
  bool step_cost_profiled_ = false;
  int64_t last_prompt_tokens_ = 0;
  speculative::SuffixTrie global_suffix_;
  std::deque<std::vector<int32_t>> recent_outputs_;
  int64_t recent_output_tokens_ = 0;
  // Shared with submitters and handles.
  std::shared_ptr<EngineWakeup> wakeup_ = std::make_shared<EngineWakeup>();
  std::deque<Submission> queue_;  // guarded by wakeup_->mutex
  bool stop_ = false;             // guarded by wakeup_->mutex
  mutable std::mutex stats_mutex_;
  EngineStats stats_;
  std::thread thread_;  // started last, in the constructor body
};

// Blocks of a sliding-window group: between steps a running sequence holds at most its
// window rounded out to whole blocks plus the block being filled (ceil((W - 1) / bs) + 1);
// during a step its chunk adds its own blocks, and all chunks of a step hold at most the token
// budget (plus one partial block each). With asynchronous scheduling the step planned ahead
// holds its chunks too, before the step in flight gives back what left the window: two steps'
// budget. Never more than the full group, which bounds every sequence's length. Falling short
// would only mean preemption, a normal outcome.
int64_t sliding_pool_blocks(const EngineConfig& config, int64_t window, int64_t n_blocks) {
  const int64_t bs = config.block_size;
  const int64_t per_seq = (window - 1 + bs - 1) / bs + 2;
  const int64_t chunks = (config.max_num_batched_tokens + bs - 1) / bs * (config.async_scheduling ? 2 : 1);
  return std::min(n_blocks, config.max_num_seqs * per_seq + chunks);
}

// Each group's pool for a cache of n_blocks full blocks: windowed groups keep only what their
// windows need (see sliding_pool_blocks).
std::vector<int64_t> kv_pool_blocks(const EngineConfig& config, const std::vector<KvGroupSpec>& groups,
                                    int64_t n_blocks) {
  std::vector<int64_t> pools;
  for (const KvGroupSpec& g : groups) {
    pools.push_back(g.windowed() ? sliding_pool_blocks(config, g.window, n_blocks) : n_blocks);
  }
  return pools;
}

// The default capacity: 16 full-length sequences, or as many tokens as kv_cache_memory_bytes of
// KV holds, the smaller. The bytes are the pools' as allocated: a compressed group costs its bytes per row over
// the tokens a row summarises, K-only rows no V, and a windowed group its bounded pool, whatever
// the capacity (DeepSeek V4's sliding ring and compressor frontiers, Gemma 3's local layers).
Result<int64_t> default_kv_cache_tokens(const EngineConfig& config, const std::vector<KvGroupSpec>& groups,
                                        int64_t n_ctx) {
  const auto budget = static_cast<uint64_t>(config.kv_cache_memory_bytes);
  const auto bytes = [&](int64_t n_blocks) {
    const std::vector<int64_t> pools = kv_pool_blocks(config, groups, n_blocks);
    uint64_t total = 0;
    for (size_t i = 0; i < groups.size(); ++i) total += static_cast<uint64_t>(pools[i]) * groups[i].block_bytes();
    return total;
  };
  // bytes() grows with n_blocks: the largest count within the budget, by bisection.
  int64_t lo = 1, hi = (16 * std::min<int64_t>(n_ctx, int64_t{1} << 40) + config.block_size - 1) / config.block_size;
  if (bytes(lo) > budget) {
    return invalid_argument("--kv-cache-memory " + std::to_string(budget) + " bytes holds no KV block: one block of "
                            "every layer group takes " + std::to_string(bytes(lo)) + " bytes");
  }
  if (bytes(hi) <= budget) return hi * config.block_size;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (bytes(mid) <= budget) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo * config.block_size;
}

// The store the config asks for (null: none), checked against the KV cache's groups.
Result<std::unique_ptr<kvstore::PageStore>> open_kv_store(const EngineConfig& config, const kv::KvCacheConfig& kv_config) {
  if (config.kv_store_dir.empty() && config.kv_store_memory_bytes <= 0) return std::unique_ptr<kvstore::PageStore>();
  DI_RETURN_IF_ERROR(
      KvStoreConnector::validate({config.kv_store_page_tokens, config.kv_store_write_queue_bytes}, kv_config));
  kvstore::PageStoreOptions o;
  o.dir = config.kv_store_dir;
  o.memory_bytes = config.kv_store_memory_bytes;
  o.capacity_bytes = config.kv_store_capacity_bytes;
  o.ttl = std::chrono::seconds(config.kv_store_ttl_seconds);
  return kvstore::PageStore::open(std::move(o));
}

// The model's KV groups in the config's element type and block size; a block must hold whole
// rows of every group (DeepSeek V4's HCA rows summarise 128 tokens).
Result<std::vector<KvGroupSpec>> sized_kv_groups(const EngineConfig& config, const Model& model) {
  std::vector<KvGroupSpec> groups = model.kv_groups();
  int64_t whole_rows = 1;
  for (const KvGroupSpec& g : groups) whole_rows = std::lcm(whole_rows, g.tokens_per_row);
  if (config.block_size % whole_rows != 0) {
    return invalid_argument("block_size " + std::to_string(config.block_size) + " does not hold whole rows of " +
                            model.source().path() + "'s compressed KV (up to " + std::to_string(whole_rows) +
                            " tokens a row): use a multiple of " + std::to_string(whole_rows));
  }
  for (KvGroupSpec& g : groups) {
    g.dtype = kv_element_type(config.kv_cache_dtype);
    g.block_size = config.block_size;
  }
  return groups;
}

// A draft model must spell every token id as the target does: its drafts are the target's ids.
Status check_same_vocabulary(const std::string& draft_path, const Tokenizer* draft, const Model& draft_model,
                             const Tokenizer* target, const Model& target_model) {
  const std::string refuse = "draft model " + draft_path + " cannot draft for " + target_model.source().path() + ": ";
  if (draft == nullptr || target == nullptr) {
    // Without both tokenizers only the sizes can be compared.
    if (draft_model.config().n_vocab != target_model.config().n_vocab) {
      return invalid_argument(refuse + "its vocabulary has " + std::to_string(draft_model.config().n_vocab) +
                              " tokens, the target's " + std::to_string(target_model.config().n_vocab));
    }
    return Status::ok_status();
  }
  if (draft->n_vocab() != target->n_vocab()) {
    return invalid_argument(refuse + "its tokenizer has " + std::to_string(draft->n_vocab()) + " tokens, the target's " +
                            std::to_string(target->n_vocab()) + "; a draft model must share the target's tokenizer");
  }
  for (int32_t id = 0; id < target->n_vocab(); ++id) {
    if (draft->token_piece(id) != target->token_piece(id)) {
      return invalid_argument(refuse + "token " + std::to_string(id) + " is '" + draft->token_text(id) + "' there and '" +
                              target->token_text(id) + "' in the target; a draft model must share the target's tokenizer");
    }
  }
  return Status::ok_status();
}

// A drafter's own KV cache (a draft model's, the MTP's or DSpark's layers'): committed at start as the target's
// is, and never prefix-cached: its blocks follow one sequence's drafts.
Result<kv::KvCacheConfig> drafter_kv_config(const EngineConfig& config, backend::KvCache& kv) {
  if (config.prefault_kv_cache) kv.prefault();
  kv::KvCacheConfig c;
  c.groups = kv.groups();
  c.enable_prefix_caching = false;
  DI_RETURN_IF_ERROR(kv::KvCacheManager::validate(c));
  return c;
}

// The draft model for SpeculativeMethod::kDraft (null: none asked for), on the target's backend
// and thread pool, with a KV cache of its own: `target_tokens` tokens unless the config says.
Result<std::unique_ptr<speculative::DraftModel>> load_draft_model(const EngineConfig& config, const EngineParts& parts,
                                                                  int64_t target_tokens) {
  const std::string& path = config.speculative.draft_model_path;
  if (path.empty()) {
    if (config.speculative.method == SpeculativeMethod::kDraft) {
      return invalid_argument("speculative method 'draft' needs a draft model: pass --draft-model PATH");
    }
    return std::unique_ptr<speculative::DraftModel>();
  }
  speculative::DraftModel::Parts d;
  DI_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tokenizer, load_tokenizer(path, TokenizerPresence::kOptional));
  DI_ASSIGN_OR_RETURN(d.model, Model::load(path, *parts.backend));
  DI_RETURN_IF_ERROR(check_same_vocabulary(path, tokenizer.get(), *d.model, parts.tokenizer.get(), *parts.model));
  DI_ASSIGN_OR_RETURN(std::vector<KvGroupSpec> groups, sized_kv_groups(config, *d.model));
  const int64_t tokens = config.speculative.draft_kv_cache_tokens > 0 ? config.speculative.draft_kv_cache_tokens
                                                                      : target_tokens;
  const int64_t n_blocks = (tokens + config.block_size - 1) / config.block_size;
  const DType kv_dtype = kv_element_type(config.kv_cache_dtype);
  DI_ASSIGN_OR_RETURN(d.kv, d.model->new_kv_cache(config.block_size, kv_dtype, kv_pool_blocks(config, groups, n_blocks)));
  DI_ASSIGN_OR_RETURN(d.kv_config, drafter_kv_config(config, *d.kv));
  const speculative::DraftModel::Limits limits{config.max_num_batched_tokens,
                           std::min<int64_t>(d.model->config().n_ctx_train, n_blocks * config.block_size),
                           std::min(d.model->config().n_vocab, parts.model->config().n_vocab)};
  return std::make_unique<speculative::DraftModel>(std::move(d), limits);
}

// The KV of the model's draft layers (V4's MTP, V4.1's DSpark), when it has them: their windowed
// groups keep what max_num_seqs windows need, as the model's own do.
Status allocate_draft_layers_kv(const EngineConfig& config, int64_t n_blocks, EngineParts& parts) {
  std::vector<KvGroupSpec> groups = parts.model->draft_kv_groups();
  if (groups.empty()) {
    if (config.speculative.method == SpeculativeMethod::kMtp) {
      return invalid_argument("speculative method 'mtp' needs a model with MTP layers (DeepSeek V4's "
                              "num_nextn_predict_layers and its mtp.* tensors), and " + parts.model->source().path() +
                              " has none; use ngram, suffix or draft");
    }
    if (config.speculative.method == SpeculativeMethod::kDspark) {
      return invalid_argument("speculative method 'dspark' needs a model with DSpark layers (DeepSeek V4.1's "
                              "num_nextn_predict_layers and its mtp.* tensors), and " + parts.model->source().path() +
                              " has none; use ngram, suffix or draft");
    }
    return Status::ok_status();
  }
  // Draft layers of the other kind (V4's MTP for dspark, V4.1's DSpark for mtp) do not serve.
  if (config.speculative.method == SpeculativeMethod::kMtp || config.speculative.method == SpeculativeMethod::kDspark) {
    const auto probe = parts.model->new_batch_runner();
    const bool dspark = config.speculative.method == SpeculativeMethod::kDspark;
    if (dspark ? parts.model->new_block_draft_runner(*probe) == nullptr
               : parts.model->new_draft_head_runner(*probe) == nullptr) {
      return invalid_argument(std::string("speculative method '") + speculative_method_name(config.speculative.method) +
                              "' does not fit " + parts.model->source().path() + "'s draft layers (" +
                              (dspark ? "MTP" : "DSpark") + " layers); use --speculative-method " +
                              (dspark ? "mtp" : "dspark"));
    }
  }
  const DType kv_dtype = kv_element_type(config.kv_cache_dtype);
  DI_ASSIGN_OR_RETURN(parts.draft_layers_kv, parts.model->new_draft_kv_cache(config.block_size, kv_dtype,
                                                                     kv_pool_blocks(config, groups, n_blocks)));
  DI_ASSIGN_OR_RETURN(parts.draft_layers_kv_config, drafter_kv_config(config, *parts.draft_layers_kv));
  return Status::ok_status();
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config) {
  DI_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tokenizer,
                      load_tokenizer(config.model_path, TokenizerPresence::kOptional));
  return create_engine(config, std::move(tokenizer));
}

Result<std::unique_ptr<Engine>> create_engine(const EngineConfig& config, const BackendWrapper& wrap) {
  DI_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tokenizer,
                      load_tokenizer(config.model_path, TokenizerPresence::kOptional));
  return create_engine(config, std::move(tokenizer), wrap);
}

Result<std::unique_ptr<Engine>> create_engine(const EngineConfig& config, std::shared_ptr<const Tokenizer> tokenizer,
                                              const BackendWrapper& wrap) {
  if (config.block_size < 1) return invalid_argument("block_size must be at least 1");
  if (config.max_num_batched_tokens < 1 || config.max_num_seqs < 1) {
    return invalid_argument("max_num_batched_tokens and max_num_seqs must be at least 1");
  }
  if (config.speculative.num_tokens < 1 || config.speculative.num_tokens > kMaxSpeculativeTokens) {
    return invalid_argument("the number of speculative tokens must be in [1, " + std::to_string(kMaxSpeculativeTokens) +
                            "], got " + std::to_string(config.speculative.num_tokens));
  }
  if (config.kv_cache_memory_bytes <= 0) {
    return invalid_argument("kv_cache_memory_bytes must be positive, got " + std::to_string(config.kv_cache_memory_bytes));
  }
  if (config.speculative.method != SpeculativeMethod::kNone && config.batch_invariant) {
    return invalid_argument("speculative decoding and batch-invariant mode are mutually exclusive: how many draft "
                            "tokens a step verifies depends on the load");
  }
  EngineParts parts;
  parts.pool = std::make_unique<ThreadPool>(config.threads > 0 ? config.threads : ThreadPool::default_threads());
  DI_ASSIGN_OR_RETURN(parts.backend, backend::create_backend(config.backend, backend::BackendOptions{parts.pool.get()}));
  if (wrap) parts.backend = wrap(std::move(parts.backend));
  // The model's draft layers only for the engine's mtp method: FP8 / FP4 ones cost BF16 memory.
  LoadOptions load_options;
  load_options.draft_layers = config.speculative.method == SpeculativeMethod::kMtp ||
                              config.speculative.method == SpeculativeMethod::kDspark;
  if (tokenizer) {
    load_options.token_classes = [tokenizer]() -> Result<TokenClasses> {
      TokenClasses c;
      c.of_token = engram_token_classes(*tokenizer, &c.count);
      return c;
    };
  }
  DI_ASSIGN_OR_RETURN(parts.model, Model::load(config.model_path, *parts.backend, load_options));
  parts.tokenizer = std::move(tokenizer);
  const ModelConfig& c = parts.model->config();
  const DType kv_dtype = kv_element_type(config.kv_cache_dtype);
  DI_ASSIGN_OR_RETURN(std::vector<KvGroupSpec> groups, sized_kv_groups(config, *parts.model));
  int64_t tokens = config.kv_cache_tokens;
  if (tokens <= 0) {
    DI_ASSIGN_OR_RETURN(tokens, default_kv_cache_tokens(config, groups, c.n_ctx_train));
  }
  const int64_t n_blocks = (tokens + config.block_size - 1) / config.block_size;
  DI_ASSIGN_OR_RETURN(parts.kv, parts.model->new_kv_cache(config.block_size, kv_dtype,
                                                          kv_pool_blocks(config, groups, n_blocks)));
  if (config.prefault_kv_cache) parts.kv->prefault();
  // A request must fit the KV cache on its own, and the model's trained context.
  parts.max_context = std::min<int64_t>(c.n_ctx_train, n_blocks * config.block_size);
  // Blocks are keyed by what decides their contents: the weights (not the file's path), the
  // element type and the backend's layout.
  parts.kv_config.groups = parts.kv->groups();
  parts.kv_config.enable_prefix_caching = config.enable_prefix_caching;
  parts.kv_config.model_fingerprint = model_fingerprint(parts.model->source(), *parts.pool) + "/" +
                                      std::string(dtype_name(kv_dtype)) + "/" + std::string(parts.kv->layout());
  DI_RETURN_IF_ERROR(kv::KvCacheManager::validate(parts.kv_config));
  DI_ASSIGN_OR_RETURN(parts.store, open_kv_store(config, parts.kv_config));
  DI_ASSIGN_OR_RETURN(parts.draft, load_draft_model(config, parts, n_blocks * config.block_size));
  DI_RETURN_IF_ERROR(allocate_draft_layers_kv(config, n_blocks, parts));
  return std::unique_ptr<Engine>(new EngineImpl(config, std::move(parts)));
}

}  // namespace deepinfer
