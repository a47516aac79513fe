// Scheduler scenarios as tables: per step, the chunks scheduled (request:tokens), who runs,
// who waits and who was preempted. A fake runner samples token 100 + position, so a request's
// output depends only on its own tokens, as with a real model.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <sstream>

namespace deepinfer {
namespace {

struct Step {
  std::string chunks;     // "A:8 B:3" (request:tokens, plan order)
  std::string running;    // "A B" after the step
  std::string waiting;    // "C"
  std::string preempted;  // "B"
};

// "A B" lists, appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "" + std::string.
void append_name(std::string& list, char name) {
  if (!list.empty()) list += ' ';
  list += name;
}

class Harness {
 public:
  Harness(SchedulerConfig cfg, int32_t n_blocks, int32_t block_size = 4)
      : kv_(kv::single_group_config(block_size, n_blocks, "test-model")), scheduler_(cfg, kv_) {}

  void add(char name, int n_prompt, int max_tokens, int priority = 0, int first_token = 1) {
    auto r = std::make_unique<Request>();
    r->id = static_cast<RequestId>(name);
    for (int i = 0; i < n_prompt; ++i) r->tokens.push_back(first_token + i);
    r->n_prompt = n_prompt;
    r->max_tokens = max_tokens;
    r->priority = priority;
    scheduler_.add(std::move(r));
  }

  Step step() {
    StepPlan plan = scheduler_.schedule();
    Step s;
    std::vector<SampledToken> sampled;
    for (const ScheduledChunk& c : plan.chunks) {
      append_name(s.chunks, static_cast<char>(c.id));
      s.chunks += ':';
      s.chunks += std::to_string(c.n_tokens);
      if (c.samples) sampled.push_back({c.id, static_cast<int32_t>(100 + c.first_position + c.n_tokens), c.epoch});
    }
    for (RequestId id : scheduler_.update(plan, sampled)) finished_.push_back(scheduler_.take_finished(id));
    for (RequestId id : plan.finished) finished_.push_back(scheduler_.take_finished(id));
    for (RequestId id : plan.preempted) append_name(s.preempted, static_cast<char>(id));
    s.running = names(RequestState::kRunning);
    s.waiting = names(RequestState::kWaiting);
    return s;
  }

  void expect(const std::vector<Step>& table) {
    for (size_t i = 0; i < table.size(); ++i) {
      const Step got = step();
      EXPECT_EQ(got.chunks, table[i].chunks) << "step " << i + 1;
      EXPECT_EQ(got.running, table[i].running) << "step " << i + 1;
      EXPECT_EQ(got.waiting, table[i].waiting) << "step " << i + 1;
      EXPECT_EQ(got.preempted, table[i].preempted) << "step " << i + 1;
    }
  }

  const Request* finished(char name) const {
    for (const auto& r : finished_) {
      if (r && r->id == static_cast<RequestId>(name)) return r.get();
    }
    return nullptr;
  }

  // A 3-token prompt {1, 2, 3} that stops on `stop`.
  void add_stopping(char name, int32_t stop) {
    auto r = std::make_unique<Request>();
    r->id = static_cast<RequestId>(name);
    r->tokens = {1, 2, 3};
    r->n_prompt = 3;
    r->max_tokens = 10;
    r->stop_token_ids = {stop};
    scheduler_.add(std::move(r));
  }

  Scheduler& scheduler() { return scheduler_; }
  kv::KvCacheManager& kv() { return kv_; }

 private:
  std::string names(RequestState state) const {
    std::string out;
    for (char c = 'A'; c <= 'Z'; ++c) {
      const Request* r = scheduler_.find(static_cast<RequestId>(c));
      if (r && r->state == state) append_name(out, c);
    }
    return out;
  }

  kv::KvCacheManager kv_;
  Scheduler scheduler_;
  std::vector<std::unique_ptr<Request>> finished_;
};

TEST(Scheduler, BudgetChunksLongPromptsAndMixesDecodes) {
  Harness h({.max_num_batched_tokens = 8, .max_num_seqs = 4}, 64);
  h.add('A', 10, 2);
  h.add('B', 3, 2);
  h.expect({
      {"A:8", "A", "B", ""},          // A's prompt is chunked to the budget; B must wait
      {"A:2 B:3", "A B", "", ""},     // A's last chunk samples; B fits in what is left
      {"A:1 B:1", "", "", ""},        // both decode their second token and finish (max 2)
  });
  ASSERT_NE(h.finished('A'), nullptr);
  EXPECT_EQ(h.finished('A')->tokens.size(), 12u);
  EXPECT_EQ(h.finished('A')->finish, FinishReason::kLength);
  EXPECT_EQ(h.kv().stats().pool.n_free, 64);
}

TEST(Scheduler, SequenceCapHoldsRequestsBack) {
  Harness h({.max_num_batched_tokens = 100, .max_num_seqs = 2}, 64);
  h.add('A', 4, 2);
  h.add('B', 4, 1);
  h.add('C', 4, 1);
  h.expect({
      {"A:4 B:4", "A", "C", ""},  // B samples its only token and finishes at once
      {"A:1 C:4", "", "", ""},
  });
}

TEST(Scheduler, PriorityPolicyAdmitsByPriorityThenArrival) {
  Harness h({.max_num_batched_tokens = 4, .max_num_seqs = 8, .policy = SchedulingPolicy::kPriority}, 64);
  h.add('A', 4, 1, /*priority=*/5);
  h.add('B', 4, 1, 1);
  h.add('C', 4, 1, 1);
  h.expect({
      {"B:4", "", "A C", ""},
      {"C:4", "", "A", ""},
      {"A:4", "", "", ""},
  });
}

TEST(Scheduler, FcfsKeepsArrivalOrder) {
  Harness h({.max_num_batched_tokens = 4, .max_num_seqs = 8}, 64);
  h.add('A', 4, 1, 5);
  h.add('B', 4, 1, 1);
  h.expect({
      {"A:4", "", "B", ""},
      {"B:4", "", "", ""},
  });
}

TEST(Scheduler, PreemptsTheLowestRankedWhenBlocksRunOutAndRecomputesIt) {
  // 4 blocks of 4 tokens. A and B (7-token prompts, 4 new tokens each) fit two blocks each until
  // their 9th token; then A needs a third block and B, ranked lower, is preempted.
  Harness h({.max_num_batched_tokens = 64, .max_num_seqs = 8}, 4);
  h.add('A', 7, 4, 0, 1);
  h.add('B', 7, 4, 0, 50);
  h.expect({
      {"A:7 B:7", "A B", "", ""},
      {"A:1 B:1", "A B", "", ""},
      {"A:1", "A", "B", "B"},       // A grows into B's blocks
      {"A:1", "", "B", ""},         // A finishes; B cannot return while A holds 3 of 4 blocks
      {"B:5", "B", "", ""},         // B: block 0 still cached, recompute tokens 4..8, sample its 3rd
      {"B:1", "", "", ""},          // 4th token: done
  });
  const Request* b = h.finished('B');
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->n_preemptions, 1);
  // Same tokens as an undisturbed run: the fake runner samples 100 + position.
  std::vector<int32_t> expect;
  for (int i = 0; i < 7; ++i) expect.push_back(50 + i);
  for (int p = 7; p < 11; ++p) expect.push_back(100 + p);
  EXPECT_EQ(b->tokens, expect);
  EXPECT_EQ(h.kv().stats().pool.n_free, 4);
}

TEST(Scheduler, CancellationFreesBlocksOnTheNextStep) {
  Harness h({.max_num_batched_tokens = 64, .max_num_seqs = 8}, 16);
  h.add('A', 9, 100);
  h.add('B', 4, 100);
  h.expect({{"A:9 B:4", "A B", "", ""}});
  EXPECT_EQ(h.kv().stats().pool.n_free, 16 - 3 - 1);
  h.scheduler().cancel('A');
  h.expect({{"B:1", "B", "", ""}});
  EXPECT_EQ(h.kv().stats().pool.n_free, 16 - 2);
  ASSERT_NE(h.finished('A'), nullptr);
  EXPECT_EQ(h.finished('A')->finish, FinishReason::kCancelled);
}

TEST(Scheduler, PrefixHitSkipsCachedTokens) {
  Harness h({.max_num_batched_tokens = 64, .max_num_seqs = 8}, 16);
  h.add('A', 9, 1);
  h.expect({{"A:9", "", "", ""}});
  h.add('B', 9, 1);  // same prompt: two cached blocks, only the last token is computed
  h.expect({{"B:1", "", "", ""}});
  EXPECT_EQ(h.kv().stats().prefix_hits, 8);
}

TEST(Scheduler, RequestWithoutPrefixCacheComputesItsWholePrompt) {
  // Prompt logprobs need every position's logits, so such a request skips the lookup; it still
  // publishes its blocks for the others.
  Harness h({.max_num_batched_tokens = 64, .max_num_seqs = 8}, 16);
  h.add('A', 9, 1);
  h.expect({{"A:9", "", "", ""}});
  auto r = std::make_unique<Request>();
  r->id = 'B';
  for (int i = 1; i <= 9; ++i) r->tokens.push_back(i);
  r->n_prompt = 9;
  r->max_tokens = 1;
  r->use_prefix_cache = false;
  h.scheduler().add(std::move(r));
  h.expect({{"B:9", "", "", ""}});
  h.add('C', 9, 1);
  h.expect({{"C:1", "", "", ""}});
  EXPECT_EQ(h.kv().stats().prefix_hits, 8);
}

TEST(Scheduler, StopTokenFinishes) {
  Harness h({.max_num_batched_tokens = 64, .max_num_seqs = 8}, 16);
  h.add_stopping('S', 104);  // the fake runner samples 100 + position: 103, 104, ...
  h.expect({{"S:3", "S", "", ""}, {"S:1", "", "", ""}});
  EXPECT_EQ(h.finished('S')->finish, FinishReason::kStop);
}

// Asynchronous scheduling: the next plan is made before the last one's update. A sampling
// chunk leaves a placeholder; the next plan decodes one position past the known tokens.
TEST(Scheduler, PlansTheNextDecodeBeforeTheTokenIsKnown) {
  Harness h({.max_num_batched_tokens = 64, .max_num_seqs = 8}, 16);
  h.add('A', 5, 3);
  const StepPlan first = h.scheduler().schedule();
  ASSERT_EQ(first.chunks.size(), 1u);
  EXPECT_TRUE(first.chunks[0].samples);
  const Request* a = h.scheduler().find('A');
  EXPECT_EQ(a->n_computed, 5);
  EXPECT_EQ(a->n_placeholders, 1);
  // Planned while `first` runs: position 5, whose token `first` samples.
  const StepPlan second = h.scheduler().schedule();
  ASSERT_EQ(second.chunks.size(), 1u);
  EXPECT_EQ(second.chunks[0].first_position, 5);
  EXPECT_EQ(second.chunks[0].n_tokens, 1);
  EXPECT_EQ(a->n_placeholders, 2);
  EXPECT_TRUE(h.scheduler().update(first, {{'A', 105, first.chunks[0].epoch}}).empty());
  EXPECT_EQ(a->n_tokens(), 6);
  EXPECT_EQ(a->n_placeholders, 1);
  // Third plan while `second` runs: its token would be the 3rd and last, so nothing is planned
  // past it (no wasted position at max_tokens).
  const StepPlan third = h.scheduler().schedule();
  ASSERT_EQ(third.chunks.size(), 1u);
  EXPECT_EQ(third.chunks[0].first_position, 6);
  EXPECT_TRUE(h.scheduler().update(second, {{'A', 106, second.chunks[0].epoch}}).empty());
  EXPECT_TRUE(h.scheduler().schedule().empty());
  EXPECT_EQ(h.scheduler().update(third, {{'A', 107, third.chunks[0].epoch}}), std::vector<RequestId>{'A'});
  EXPECT_EQ(a->tokens, (std::vector<int32_t>{1, 2, 3, 4, 5, 105, 106, 107}));
  h.scheduler().take_finished('A');
  EXPECT_EQ(h.kv().stats().pool.n_free, 16);
}

// A stop token in flight: the position planned after it is computed and discarded, and the
// request's blocks come back once; a plan for a preempted request is ignored by update().
TEST(Scheduler, OutputsOfPlansOvertakenByAStopOrAPreemptionAreDropped) {
  Harness h({.max_num_batched_tokens = 64, .max_num_seqs = 8}, 16);
  h.add_stopping('S', 7);
  const StepPlan first = h.scheduler().schedule();
  const StepPlan second = h.scheduler().schedule();  // planned past the token in flight
  ASSERT_EQ(second.chunks.size(), 1u);
  EXPECT_EQ(h.scheduler().update(first, {{'S', 7, first.chunks[0].epoch}}), std::vector<RequestId>{'S'});
  EXPECT_EQ(h.kv().stats().pool.n_free, 16);
  // `second` ran anyway; its update finds the request finished and changes nothing.
  EXPECT_TRUE(h.scheduler().update(second, {{'S', 9, second.chunks[0].epoch}}).empty());
  EXPECT_EQ(h.scheduler().find('S')->tokens, (std::vector<int32_t>{1, 2, 3, 7}));
  EXPECT_EQ(h.kv().stats().pool.n_free, 16);

  // Two requests in 4 blocks: the plan made while A and B's decodes are in flight preempts B,
  // and B's token from the step in flight must not land (its epoch changed).
  Harness p({.max_num_batched_tokens = 64, .max_num_seqs = 8}, 4);
  p.add('A', 8, 4, 0, 1);
  p.add('B', 7, 4, 0, 50);
  const StepPlan prefill = p.scheduler().schedule();          // A:8 (2 blocks), B:7 (2 blocks)
  const StepPlan decode = p.scheduler().schedule();           // A needs a 3rd block: B preempted
  EXPECT_EQ(decode.preempted, std::vector<RequestId>{'B'});
  const Request* b = p.scheduler().find('B');
  EXPECT_EQ(b->state, RequestState::kWaiting);
  EXPECT_TRUE(p.scheduler().update(prefill, {{'A', 108, prefill.chunks[0].epoch}, {'B', 107, prefill.chunks[1].epoch}}).empty());
  EXPECT_EQ(b->n_tokens(), 7);  // dropped
  EXPECT_EQ(b->n_computed, 0);
  EXPECT_EQ(b->n_placeholders, 0);
  EXPECT_EQ(p.scheduler().find('A')->n_tokens(), 9);
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// An admission hook that takes each request once, and hands them back when told to.
class FakeStore final : public AdmissionHook {
 public:
  std::vector<RequestId> take_loaded() override { return std::exchange(ready, {}); }
  bool start_load(const Request& r, int64_t n_hit) override {
    if (r.n_prompt < 8) return false;  // short prompts have no page to load
    loading.push_back(r.id);
    return true;
  }
  void on_computed(const Request&, int64_t) override {}
  void on_finished(RequestId id) override { finished.push_back(id); }
  std::vector<RequestId> loading, ready, finished;
};

TEST(Scheduler, LoadingRequestsWaitApartAndReturnInArrivalOrder) {
  Harness h({.max_num_batched_tokens = 100, .max_num_seqs = 4}, 64);
  FakeStore store;
  h.scheduler().set_hook(&store);
  h.add('A', 8, 1, 0, 10);  // prompts of their own: no prefix hits between them
  h.add('B', 8, 1, 0, 20);
  h.add('C', 4, 1, 0, 30);
  h.add('D', 8, 1, 0, 40);
  // A and B load; C runs meanwhile (the step is not held up); D loads too.
  h.expect({{"C:4", "", "", ""}});
  EXPECT_EQ(store.loading, (std::vector<RequestId>{'A', 'B', 'D'}));
  EXPECT_EQ(h.scheduler().n_waiting(), 3u);
  store.ready = {'A', 'D', 'B'};  // loads finish in any order
  h.scheduler().cancel('D');      // and a loading request may be cancelled
  h.expect({{"A:8 B:8", "", "", ""}});
  EXPECT_EQ(h.scheduler().n_waiting(), 0u);
  EXPECT_EQ(store.finished, (std::vector<RequestId>{'C', 'D', 'A', 'B'}));
}

}  // namespace
}  // namespace deepinfer
