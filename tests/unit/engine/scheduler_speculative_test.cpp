// The scheduler's part of speculative decoding: a decoding request's draft rides on its decode
// chunk, and update() keeps only the rows of the tokens verification kept.
#include <gtest/gtest.h>

#include "engine/scheduler.h"

namespace deepinfer {
namespace {

constexpr RequestId kId = 1;

class DraftHarness {
 public:
  DraftHarness(int64_t max_tokens = 20, std::vector<int32_t> stops = {})
      : kv_(kv::single_group_config(/*block_size=*/4, /*n_blocks=*/64, "test-model")),
        scheduler_({.max_num_batched_tokens = 64, .max_num_seqs = 4}, kv_) {
    auto r = std::make_unique<Request>();
    r->id = kId;
    r->tokens = {1, 2, 3, 4, 5, 6};
    r->n_prompt = 6;
    r->max_tokens = max_tokens;
    r->stop_token_ids = std::move(stops);
    scheduler_.add(std::move(r));
    // The prompt's chunk samples token 7.
    const StepPlan plan = scheduler_.schedule();
    scheduler_.update(plan, {{kId, 7, 0}});
  }

  // One step with `draft`; verification keeps `kept` (the first token, then the rest).
  std::vector<RequestId> verify(std::vector<int32_t> draft, std::vector<int32_t> kept, ScheduledChunk* chunk) {
    scheduler_.set_draft(kId, draft);
    const StepPlan plan = scheduler_.schedule();
    EXPECT_EQ(plan.chunks.size(), 1u);
    *chunk = plan.chunks[0];
    SampledToken s{kId, kept[0], 0};
    s.n_draft = chunk->n_draft;
    s.n_more = static_cast<int32_t>(kept.size()) - 1;
    std::copy(kept.begin() + 1, kept.end(), s.more.begin());
    return scheduler_.update(plan, {s});
  }

  const Request& request() const { return *scheduler_.find(kId); }
  int64_t cached_tokens(std::vector<int32_t> tokens) { return kv_.peek_cached_prefix(tokens, "").n_tokens; }
  Scheduler& scheduler() { return scheduler_; }

 private:
  kv::KvCacheManager kv_;
  Scheduler scheduler_;
};

TEST(SchedulerSpeculative, AVerifyingChunkKeepsOnlyTheAcceptedRows) {
  DraftHarness h;
  ScheduledChunk c;
  // Draft 8 9 10 after token 7: the target accepts 8, then says 11 instead of 9.
  EXPECT_TRUE(h.verify({8, 9, 10}, {8, 11}, &c).empty());
  EXPECT_EQ(c.first_position, 6);
  EXPECT_EQ(c.n_tokens, 4);  // token 7 and the three drafts
  EXPECT_EQ(c.n_draft, 3);
  EXPECT_TRUE(c.samples);
  const Request& r = h.request();
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 11}));
  EXPECT_EQ(r.n_computed, 8);  // positions 0..7 (tokens up to the accepted 8); 11 is next
  EXPECT_EQ(r.n_placeholders, 0);
  EXPECT_TRUE(r.draft.empty());
  // Blocks of 4: [1 2 3 4] and [5 6 7 8] are published; the rows of 9 and 10 never are.
  EXPECT_EQ(h.cached_tokens({1, 2, 3, 4, 5, 6, 7, 8, 11, 12}), 8);
  EXPECT_EQ(h.cached_tokens({1, 2, 3, 4, 5, 6, 7, 9, 10, 12}), 4);
  // The next step computes from the last kept token.
  const StepPlan next = h.scheduler().schedule();
  ASSERT_EQ(next.chunks.size(), 1u);
  EXPECT_EQ(next.chunks[0].first_position, 8);
  EXPECT_EQ(next.chunks[0].n_tokens, 1);
  EXPECT_EQ(next.chunks[0].n_draft, 0);  // the draft was used up
}

TEST(SchedulerSpeculative, AllAcceptedKeepsEveryDraftRowAndTheBonusToken) {
  DraftHarness h;
  ScheduledChunk c;
  h.verify({8, 9}, {8, 9, 10}, &c);
  EXPECT_EQ(h.request().tokens.size(), 10u);
  EXPECT_EQ(h.request().n_computed, 9);
  EXPECT_EQ(h.cached_tokens({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}), 8);
}

TEST(SchedulerSpeculative, AStopTokenAmongTheKeptOnesFinishesThere) {
  DraftHarness h(/*max_tokens=*/20, /*stops=*/{9});
  ScheduledChunk c;
  const std::vector<RequestId> finished = h.verify({8, 9, 10}, {8, 9, 12}, &c);
  ASSERT_EQ(finished.size(), 1u);
  const Request& r = h.request();
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));  // nothing after the stop
}

TEST(SchedulerSpeculative, MaxTokensCutsTheKeptTokens) {
  DraftHarness h(/*max_tokens=*/3);  // 7 is the first of three
  ScheduledChunk c;
  const std::vector<RequestId> finished = h.verify({8, 9, 10}, {8, 9, 10, 11}, &c);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(h.request().finish, FinishReason::kLength);
  EXPECT_EQ(h.request().n_generated(), 3);
}

// A request of prompt {1, 2, 3} that has sampled 4, in a pool of n_blocks blocks of 4.
std::unique_ptr<Scheduler> decoding_request(kv::KvCacheManager& kv, int64_t budget) {
  auto s = std::make_unique<Scheduler>(SchedulerConfig{.max_num_batched_tokens = budget, .max_num_seqs = 4}, kv);
  auto r = std::make_unique<Request>();
  r->id = kId;
  r->tokens = {1, 2, 3};
  r->n_prompt = 3;
  r->max_tokens = 20;
  s->add(std::move(r));
  s->update(s->schedule(), {{kId, 4, 0}});
  return s;
}

TEST(SchedulerSpeculative, TheDraftIsCutToTheTokenBudget) {
  kv::KvCacheManager kv(kv::single_group_config(4, 16, "test-model"));
  auto s = decoding_request(kv, /*budget=*/3);
  s->set_draft(kId, std::vector<int32_t>{5, 6, 7});
  const StepPlan plan = s->schedule();
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].n_draft, 2);  // the decode token and two drafts
  EXPECT_EQ(plan.chunks[0].n_tokens, 3);
}

TEST(SchedulerSpeculative, ShortOfBlocksTheDraftGoesBeforeAnyPreemption) {
  kv::KvCacheManager kv(kv::single_group_config(4, 2, "test-model"));  // 8 positions
  auto s = decoding_request(kv, /*budget=*/64);
  s->set_draft(kId, std::vector<int32_t>{5, 6, 7, 8, 9});  // positions 3..8: 9 positions
  const StepPlan plan = s->schedule();
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_TRUE(plan.preempted.empty());
  EXPECT_EQ(plan.chunks[0].n_draft, 0);
  EXPECT_EQ(plan.chunks[0].n_tokens, 1);
}

}  // namespace
}  // namespace deepinfer
