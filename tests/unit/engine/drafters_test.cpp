// The drafters and the draft-length schedule on hand-made inputs.
#include <gtest/gtest.h>

#include "engine/speculative/acceptance.h"
#include "engine/speculative/back_off.h"
#include "engine/speculative/ngram_drafter.h"
#include "engine/speculative/schedule.h"
#include "engine/speculative/suffix_trie.h"

namespace deepinfer::speculative {
namespace {

std::vector<int32_t> tokens_of(const Draft& d) { return {d.tokens.begin(), d.tokens.begin() + d.n}; }

TEST(NgramDrafter, ProposesWhatFollowedTheLatestEarlierOccurrence) {
  //                         0  1  2  3  4  5  6  7  8  9 10
  const std::vector<int32_t> c = {1, 2, 3, 4, 1, 2, 5, 6, 9, 1, 2};
  // "1 2" occurred at 0 and 4; the latest is followed by 5 6 9.
  EXPECT_EQ(tokens_of(propose_ngram(c, 3)), (std::vector<int32_t>{5, 6, 9}));
  EXPECT_EQ(tokens_of(propose_ngram(c, 10)), (std::vector<int32_t>{5, 6, 9, 1, 2}));  // up to the end
  EXPECT_EQ(tokens_of(propose_ngram(c, 0)), std::vector<int32_t>{});
}

TEST(NgramDrafter, PrefersTheLongestMatch) {
  // "7 1 2" occurred once, followed by 8; "1 2" also later, followed by 3.
  const std::vector<int32_t> c = {7, 1, 2, 8, 1, 2, 3, 7, 1, 2};
  EXPECT_EQ(tokens_of(propose_ngram(c, 2)), (std::vector<int32_t>{8, 1}));
}

TEST(NgramDrafter, NothingWithoutARepetitionOfAtLeastMinN) {
  EXPECT_EQ(propose_ngram(std::vector<int32_t>{1, 2, 3, 4, 5, 1}, 4).n, 0);  // "1" alone is below min_n
  EXPECT_EQ(propose_ngram(std::vector<int32_t>{4}, 4).n, 0);
  EXPECT_EQ(propose_ngram(std::vector<int32_t>{}, 4).n, 0);
  EXPECT_EQ(tokens_of(propose_ngram(std::vector<int32_t>{1, 2, 3, 4, 5, 1}, 4, {.min_n = 1, .max_n = 3})),
            (std::vector<int32_t>{2, 3, 4, 5}));
}

TEST(SuffixTrie, ProposesTheMostFrequentContinuationWithItsShare) {
  SuffixTrie t;
  t.insert(std::vector<int32_t>{1, 2, 3, 4});
  t.insert(std::vector<int32_t>{1, 2, 3, 4});
  t.insert(std::vector<int32_t>{1, 2, 3, 7});
  t.insert(std::vector<int32_t>{9, 2, 5});
  int32_t match = 0;
  // Context "... 1 2": "1 2" occurred 3 times, always followed by 3; then 4 twice and 7 once.
  const Draft d = t.propose(std::vector<int32_t>{8, 1, 2}, 5, &match);
  EXPECT_EQ(match, 2);
  EXPECT_EQ(tokens_of(d), (std::vector<int32_t>{3, 4}));
  EXPECT_FLOAT_EQ(d.confidence[0], 1.0f);
  EXPECT_FLOAT_EQ(d.confidence[1], 2.0f / 3.0f);
  // Context "... 2" alone: "2" was followed by 3 three times and by 5 once.
  const Draft d2 = t.propose(std::vector<int32_t>{6, 2}, 1, &match);
  EXPECT_EQ(match, 1);
  EXPECT_EQ(tokens_of(d2), (std::vector<int32_t>{3}));
  EXPECT_FLOAT_EQ(d2.confidence[0], 0.75f);
  // Nothing matches.
  EXPECT_EQ(t.propose(std::vector<int32_t>{42}, 4, &match).n, 0);
  EXPECT_EQ(match, 0);
}

TEST(SuffixTrie, ACursorContinuesAStreamAcrossInsertions) {
  SuffixTrie a, b;
  SuffixTrie::Cursor cursor;
  a.insert(cursor, std::vector<int32_t>{1, 2, 3});
  a.insert(cursor, std::vector<int32_t>{1, 2, 4, 1, 2});
  b.insert(std::vector<int32_t>{1, 2, 3, 1, 2, 4, 1, 2});
  EXPECT_EQ(a.n_nodes(), b.n_nodes());
  int32_t ma = 0, mb = 0;
  EXPECT_EQ(tokens_of(a.propose(std::vector<int32_t>{1, 2}, 3, &ma)), tokens_of(b.propose(std::vector<int32_t>{1, 2}, 3, &mb)));
  EXPECT_EQ(ma, mb);
}

TEST(SuffixTrie, RareContinuationsAreNotDrafted) {
  SuffixTrie t({.max_depth = 8, .max_match = 4, .min_token_probability = 0.5f});
  t.insert(std::vector<int32_t>{1, 2, 1, 3, 1, 4});  // after 1: 2, 3 and 4, a third each
  int32_t match = 0;
  EXPECT_EQ(t.propose(std::vector<int32_t>{1}, 4, &match).n, 0);
  EXPECT_EQ(match, 1);
}

TEST(SuffixTrie, IsBoundedByItsNodeBudget) {
  SuffixTrie t({.max_depth = 4, .max_match = 2, .min_token_probability = 0.1f, .max_nodes = 50});
  std::vector<int32_t> stream;
  for (int i = 0; i < 100; ++i) stream.push_back(i);
  t.insert(stream);
  EXPECT_TRUE(t.full());
  t.clear();
  EXPECT_EQ(t.n_nodes(), 1);
}

TEST(AcceptanceStats, FollowsTheAcceptancesPerPosition) {
  AcceptanceStats s;
  EXPECT_FLOAT_EQ(s.rate(0, 0.6f), 0.6f);  // the prior alone
  for (int i = 0; i < 40; ++i) s.record(3, 1);  // position 0 always kept, position 1 never
  EXPECT_GT(s.rate(0, 0.6f), 0.9f);
  EXPECT_LT(s.rate(1, 0.6f), 0.2f);
  EXPECT_FLOAT_EQ(s.rate(2, 0.6f), 0.6f);  // never tried: position 1 always failed first
  // Deeper positions share one estimate.
  for (int i = 0; i < 40; ++i) s.record(6, 6);
  EXPECT_GT(s.rate(2, 0.6f), 0.9f);
  EXPECT_FLOAT_EQ(s.rate(2, 0.6f), s.rate(5, 0.6f));
}

TEST(AcceptanceStats, APositionNoLongerTriedDriftsBackToThePrior) {
  AcceptanceStats s;
  for (int i = 0; i < 20; ++i) s.record(2, 0);  // position 1 never reached after early failures
  s.record(2, 1);
  for (int i = 0; i < 10; ++i) s.record(2, 1);  // position 1 tried once: rejected
  const float after = s.rate(1, 0.6f);
  for (int i = 0; i < 60; ++i) s.record(1, 1);  // only position 0 is tried from now on
  EXPECT_LT(after, 0.3f);
  EXPECT_GT(s.rate(1, 0.6f), 0.55f);
}

TEST(AcceptanceStats, ADraftLeftUnverifiedStillAgesTheEvidence) {
  AcceptanceStats s;
  for (int i = 0; i < 30; ++i) s.record(3, 0);  // a bad start: position 0 always rejected
  const float low = s.rate(0, 0.6f);
  EXPECT_LT(low, 0.15f);
  // The schedule now verifies none of this sequence's drafts (record(0, 0)): nothing is
  // learnt, but the old evidence fades until the draft is worth trying again.
  for (int i = 0; i < 40; ++i) s.record(0, 0);
  EXPECT_GT(s.rate(0, 0.6f), 0.5f);
}

TEST(StepCostModel, RecoversItsCostsAndLeansOnThePriorWithoutSpread) {
  // t = 10 ms + 1 ms per chunk + 0.25 ms per further token, over steps of 1..40 chunks with
  // 0..47 draft rows.
  StepCostModel m;
  for (int i = 0; i < 400; ++i) {
    const int chunks = 1 + i % 40, extra = (i * 7) % 48;
    m.observe(chunks, chunks + extra, 0.010 + 0.001 * chunks + 0.00025 * extra);
  }
  EXPECT_NEAR(m.costs().t0, 0.010, 0.0015);
  EXPECT_NEAR(m.costs().tc, 0.001, 0.0001);
  EXPECT_NEAR(m.costs().tt, 0.00025, 0.0001);
  EXPECT_NEAR(m.costs().seconds(32, 40), 0.010 + 0.032 + 0.002, 0.001);
  // Steps of one size only: both slopes lean on the prior, 0.1 t0 each (t0 + tc = 11 ms).
  StepCostModel flat(/*prior_per_token=*/0.1);
  for (int i = 0; i < 50; ++i) flat.observe(1, 1, 0.011);
  EXPECT_NEAR(flat.costs().tc, 0.001, 1e-4);
  EXPECT_NEAR(flat.costs().tt, 0.001, 1e-4);
  // Chunks that varied while draft rows never did: the chunk cost is fitted, the row cost is
  // the prior's.
  StepCostModel decode_only;
  for (int i = 0; i < 400; ++i) decode_only.observe(1 + i % 40, 1 + i % 40, 0.010 + 0.001 * (1 + i % 40));
  EXPECT_NEAR(decode_only.costs().tc, 0.001, 0.0002);
}

// t = 10 ms + 1 ms per token, chunks and further tokens alike.
StepCostModel linear_cost() {
  StepCostModel m;
  for (int i = 0; i < 400; ++i) {
    const int chunks = 1 + i % 64, extra = (i * 5) % 9;
    m.observe(chunks, chunks + extra, 0.010 + 0.001 * (chunks + extra));
  }
  return m;
}

TEST(DraftSchedule, AnIdleEngineVerifiesFarABusyOneOnlyItsLikeliestDrafts) {
  const StepCostModel cost = linear_cost();
  const std::vector<float> sure = {0.95f, 0.9f, 0.85f, 0.8f, 0.75f};
  const std::vector<float> weak = {0.3f, 0.09f, 0.027f};
  // Alone: tau / t(B) = 1 / 11 ms; each sure token adds most of a token for 1 ms.
  std::vector<DraftCandidate> one = {{sure}};
  EXPECT_EQ(choose_draft_lengths(one, 1, 1, 1.0, 100, cost), (std::vector<int32_t>{5}));
  // A weak draft alone: 0.3 for 1 ms pays (rate 1.3/12 > 1/11), 0.09 does not.
  std::vector<DraftCandidate> w = {{weak}};
  EXPECT_EQ(choose_draft_lengths(w, 1, 1, 1.0, 100, cost), (std::vector<int32_t>{1}));
  // 32 sequences decoding: a token must bring more than 32 ms / 42 ms of yield.
  std::vector<DraftCandidate> busy = {{sure}, {weak}};
  EXPECT_EQ(choose_draft_lengths(busy, 32, 32, 32.0, 100, cost), (std::vector<int32_t>{4, 0}));
  // The step's room bounds the total.
  EXPECT_EQ(choose_draft_lengths(one, 1, 1, 1.0, 2, cost), (std::vector<int32_t>{2}));
}

// Draft rows cheaper than a decoding sequence's row (each sequence brings its own KV reads and
// sampling): a busy engine still verifies a likely draft that a single line through tokens
// would have priced as dear as a sequence.
TEST(DraftSchedule, CheapDraftRowsAreVerifiedInABusyStep) {
  StepCostModel cost;  // 2 ms + 1 ms per chunk + 0.2 ms per further token
  for (int i = 0; i < 400; ++i) {
    const int chunks = 1 + i % 48, extra = (i * 7) % 40;
    cost.observe(chunks, chunks + extra, 0.002 + 0.001 * chunks + 0.0002 * extra);
  }
  const std::vector<float> likely = {0.6f, 0.45f, 0.3f};
  const std::vector<float> unlikely = {0.1f};
  std::vector<DraftCandidate> busy = {{likely}, {unlikely}};
  // 32 decoding: yield 32 over 34 ms. A 0.3 token for 0.2 ms pays (priced as a sequence's row,
  // 1 ms, not even 0.6 would), a 0.1 token does not.
  EXPECT_EQ(choose_draft_lengths(busy, 32, 32, 32.0, 100, cost), (std::vector<int32_t>{3, 0}));
}

// An engine's decoding steps of `step` seconds, each sequence starting `stagger` steps after
// the one before; the sequences that may propose share one pass of `pass` seconds on top, and
// every proposal keeps nothing. The steps at which the first sequence proposed, and the share
// of the time the passes took.
struct Proposals {
  std::vector<int> first_sequence_at;
  double failed_share = 0.0;
};
Proposals simulate(double step, double pass, int n_steps, int n_sequences = 1, int stagger = 0) {
  std::vector<DraftBackOff> seqs(static_cast<size_t>(n_sequences));
  FailedDraftBudget budget;
  Proposals out;
  double failed = 0.0, elapsed = 0.0;
  for (int i = 0; i < n_steps; ++i) {
    std::vector<size_t> proposing;
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (i < static_cast<int>(s) * stagger) continue;  // not decoding yet
      if (seqs[s].may_propose(budget)) proposing.push_back(s);
    }
    double t = step;
    if (!proposing.empty()) {
      if (proposing.front() == 0) out.first_sequence_at.push_back(i);
      t += pass;
      failed += pass;
      for (size_t s : proposing) seqs[s].charge(pass / static_cast<double>(proposing.size()));
      for (size_t s : proposing) budget.fail(seqs[s].missed());
    }
    budget.elapse(t);
    elapsed += t;
  }
  out.failed_share = failed / elapsed;
  return out;
}

TEST(DraftBackOff, CheapProposalsThatKeepNothingWaitOneTwoFourStepsAndOn) {
  // .. 128 steps at most.
  EXPECT_EQ(simulate(0.01, 1e-5, 400).first_sequence_at, (std::vector<int>{0, 2, 5, 10, 19, 36, 69, 134, 263, 392}));
}

TEST(DraftBackOff, DearProposalsThatKeepNothingTakeAtMostTheirShareOfTheTime) {
  // A pass of five steps: skips alone would propose at steps 0, 2, 5, 10, 19, 36, 69 (35 steps'
  // time in 96); the budget lets it propose again only once the first pass is 5% of the time.
  const std::vector<int> at = simulate(0.01, 0.05, 96).first_sequence_at;
  ASSERT_EQ(at.size(), 2u);
  EXPECT_EQ(at[0], 0);
  EXPECT_GE(at[1], 90);
  const double share = simulate(0.01, 0.05, 2000).failed_share;
  EXPECT_LE(share, FailedDraftBudget::kShare + 0.005);
  EXPECT_GT(share, FailedDraftBudget::kShare / 2);  // it still tries: a later draft may pay
}

TEST(DraftBackOff, TheBudgetIsTheEnginesWhateverTheSequencesRhythms) {
  // Eight sequences out of step: each one's time holds every pass, so the passes together must
  // stay within the share (per-sequence budgets would allow eight times as much).
  const double share = simulate(0.01, 0.05, 4000, 8, 7).failed_share;
  EXPECT_LE(share, FailedDraftBudget::kShare + 0.005);
}

TEST(DraftBackOff, AKeptDraftEndsTheBackOff) {
  FailedDraftBudget budget;
  budget.elapse(100.0);  // room for 5 s of failed passes
  DraftBackOff b;
  ASSERT_TRUE(b.may_propose(budget));
  b.charge(1.0);
  EXPECT_EQ(b.missed(), 1.0);
  EXPECT_FALSE(b.may_propose(budget));  // skips one step
  ASSERT_TRUE(b.may_propose(budget));
  b.charge(1.0);
  EXPECT_EQ(b.missed(), 1.0);
  EXPECT_FALSE(b.may_propose(budget));  // skips two
  EXPECT_FALSE(b.may_propose(budget));
  ASSERT_TRUE(b.may_propose(budget));
  b.charge(1.0);
  b.kept();
  EXPECT_TRUE(b.may_propose(budget));  // kept: the next step proposes
  EXPECT_EQ(b.missed(), 0.0);          // a kept proposal's pass is not charged to a later miss
}

TEST(DraftBackOff, TheBudgetHoldsBackOnlySequencesWhoseLastProposalMissed) {
  FailedDraftBudget spent;  // one dear miss at the start: 1 s failed in 1 s
  spent.elapse(1.0);
  spent.fail(1.0);
  ASSERT_FALSE(spent.allows_proposals());
  DraftBackOff fresh;
  EXPECT_TRUE(fresh.may_propose(spent));  // a new sequence tries once all the same
  DraftBackOff paying;
  ASSERT_TRUE(paying.may_propose(spent));
  paying.kept();
  EXPECT_TRUE(paying.may_propose(spent));  // its drafts pay: it goes on
  DraftBackOff failing;
  ASSERT_TRUE(failing.may_propose(spent));
  failing.missed();
  EXPECT_FALSE(failing.may_propose(spent));  // the skip
  EXPECT_FALSE(failing.may_propose(spent));  // then the budget
  spent.elapse(20.0);
  EXPECT_TRUE(failing.may_propose(spent));
}

}  // namespace
}  // namespace deepinfer::speculative
