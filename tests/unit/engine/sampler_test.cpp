#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

// Counts this thread's allocations, so a test can show that sampling does not allocate after
// the first token. Every non-aligned form is replaced, all on malloc and free, so that each
// allocation and its release meet the same allocator (AddressSanitizer checks the pairing, and
// std::stable_sort's nothrow buffer would otherwise cross over); the aligned forms keep theirs.
thread_local int64_t g_allocations = 0;

namespace {
void* counted_malloc(size_t size) noexcept {
  ++g_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void* counted_malloc_or_throw(size_t size) {
  if (void* p = counted_malloc(size)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(size_t size) { return counted_malloc_or_throw(size); }
void* operator new[](size_t size) { return counted_malloc_or_throw(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept { return counted_malloc(size); }
void* operator new[](size_t size, const std::nothrow_t&) noexcept { return counted_malloc(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace deepinfer {
namespace {

SamplingParams params(float temp, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f, uint64_t seed = 7) {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

Sampler make(const SamplingParams& p, int64_t n_vocab, std::vector<int32_t> stop_ids = {}) {
  auto s = Sampler::create(p, n_vocab, std::move(stop_ids));
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

std::vector<int32_t> draws(Sampler& s, const std::vector<float>& logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(logits));
  return out;
}

std::vector<int64_t> counts(const std::vector<int32_t>& tokens, size_t n_vocab) {
  std::vector<int64_t> c(n_vocab, 0);
  for (int32_t t : tokens) ++c[static_cast<size_t>(t)];
  return c;
}

// ---------------------------------------------------------------------------------------------
// The expected distribution, written as plainly as possible in double precision: a full sort
// (best first, ties to the lower id), top-k keeping ties with the k-th logit, top-p over the
// renormalised top-k set, min-p against the best token, renormalise.
std::vector<double> expected_distribution(const std::vector<float>& logits, const SamplingParams& p) {
  const size_t n = logits.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const double best = logits[order[0]];
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = std::exp((logits[i] - best) / p.temperature);
  size_t keep = n;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    keep = static_cast<size_t>(p.top_k);
    while (keep < n && logits[order[keep]] == logits[order[keep - 1]]) ++keep;
  }
  if (p.top_p < 1.0f) {
    double mass = 0.0;
    for (size_t i = 0; i < keep; ++i) mass += w[order[i]];
    double before = 0.0;
    size_t i = 0;
    while (i < keep && before < p.top_p * mass) before += w[order[i++]];
    keep = i;
  }
  std::vector<double> out(n, 0.0);
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    const size_t id = order[i];
    if (w[id] >= p.min_p) {
      out[id] = w[id];
      total += w[id];
    }
  }
  for (double& x : out) x /= total;
  return out;
}

// Pearson's statistic; a token observed where the expectation is zero makes it infinite.
double chi_square(const std::vector<int64_t>& observed, const std::vector<double>& expected, int64_t n) {
  double chi2 = 0.0;
  for (size_t i = 0; i < observed.size(); ++i) {
    const double e = expected[i] * static_cast<double>(n);
    if (e == 0.0) {
      if (observed[i] > 0) return INFINITY;
      continue;
    }
    const double d = static_cast<double>(observed[i]) - e;
    chi2 += d * d / e;
  }
  return chi2;
}

// The 99.9% quantile of chi-square with `df` degrees of freedom (Wilson-Hilferty): a correct
// sampler exceeds it one run in a thousand, and the seeds are fixed, so the test is stable.
double chi_square_bound(size_t df) {
  const double d = static_cast<double>(df);
  const double z = 3.090;
  const double c = 1.0 - 2.0 / (9.0 * d) + z * std::sqrt(2.0 / (9.0 * d));
  return d * c * c * c;
}

size_t support(const std::vector<double>& p) {
  return static_cast<size_t>(std::count_if(p.begin(), p.end(), [](double x) { return x > 0.0; }));
}

// Draws 20000 tokens and checks their histogram against the exact distribution, and that the
// same histogram is far outside the bound against `wrong`, a plausible mistake: the test has
// the power to fail.
void check_fit(const std::vector<float>& logits, const SamplingParams& p, const std::vector<double>& wrong) {
  constexpr int kDraws = 20000;
  Sampler s = make(p, static_cast<int64_t>(logits.size()));
  const auto observed = counts(draws(s, logits, kDraws), logits.size());
  const auto expected = expected_distribution(logits, p);
  ASSERT_GE(support(expected), 2u);
  const double bound = chi_square_bound(support(expected) - 1);
  EXPECT_LT(chi_square(observed, expected, kDraws), bound);
  EXPECT_GT(chi_square(observed, wrong, kDraws), 3.0 * bound);
}

const std::vector<float> kLogits = {2.0f, 1.5f, 1.2f, 0.9f, 0.5f, 0.0f, -0.5f, -1.0f};

SamplingParams with_temperature(SamplingParams p, float t) {
  p.temperature = t;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Validation

TEST(SamplerValidate, AcceptsDefaultsAndEdges) {
  EXPECT_TRUE(Sampler::validate(SamplingParams{}, 10).ok());
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_k = -1;
  p.top_p = 1.0f;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.repetition_penalty = 0.5f;
  p.logit_bias = {{0, -100.0f}, {9, 100.0f}};
  p.logprobs = 20;
  p.prompt_logprobs = 20;
  EXPECT_TRUE(Sampler::validate(p, 10).ok());
}

TEST(SamplerValidate, NamesTheParameterAndTheValue) {
  struct Case {
    void (*edit)(SamplingParams&);
    std::string message;
  };
  const Case cases[] = {
      {[](SamplingParams& p) { p.temperature = -0.5f; }, "temperature must be a finite number >= 0, got -0.5"},
      {[](SamplingParams& p) { p.temperature = INFINITY; }, "temperature must be a finite number >= 0, got inf"},
      {[](SamplingParams& p) { p.temperature = NAN; }, "temperature must be a finite number >= 0"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p must be in (0, 1], got 0"},
      {[](SamplingParams& p) { p.top_p = 1.5f; }, "top_p must be in (0, 1], got 1.5"},
      {[](SamplingParams& p) { p.min_p = -0.25f; }, "min_p must be in [0, 1], got -0.25"},
      {[](SamplingParams& p) { p.min_p = 2.0f; }, "min_p must be in [0, 1], got 2"},
      {[](SamplingParams& p) { p.top_k = -2; }, "top_k must be -1 or 0 (no limit) or a positive count, got -2"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty must be in [-2, 2], got 2.5"},
      {[](SamplingParams& p) { p.frequency_penalty = -3.0f; }, "frequency_penalty must be in [-2, 2], got -3"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty must be a finite number > 0, got 0"},
      {[](SamplingParams& p) { p.logit_bias = {{10, 1.0f}}; }, "logit_bias token id 10 is outside the vocabulary [0, 10)"},
      {[](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias token id -1 is outside the vocabulary [0, 10)"},
      {[](SamplingParams& p) { p.logit_bias = {{3, 100.5f}}; }, "logit_bias for token 3 must be in [-100, 100], got 100.5"},
      {[](SamplingParams& p) { p.min_tokens = -1; }, "min_tokens must be >= 0, got -1"},
      {[](SamplingParams& p) { p.logprobs = 21; }, "logprobs must be at most 20, got 21"},
      {[](SamplingParams& p) { p.prompt_logprobs = 25; }, "prompt_logprobs must be at most 20, got 25"},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.edit(p);
    const Status s = Sampler::validate(p, 10);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.message;
    EXPECT_EQ(s.message().substr(0, c.message.size()), c.message);
    // create() validates too, so the engine cannot construct a sampler from bad parameters.
    EXPECT_FALSE(Sampler::create(p, 10, {}).ok()) << c.message;
  }
}

TEST(SamplerValidate, CreateRejectsStopIdsOutsideTheVocabulary) {
  auto s = Sampler::create(SamplingParams{}, 10, {3, 10});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "stop token id 10 is outside the vocabulary [0, 10)");
  EXPECT_FALSE(Sampler::create(SamplingParams{}, 0, {}).ok());
}

// ---------------------------------------------------------------------------------------------
// Greedy and the logit processors, each on hand-made logits

TEST(Sampler, GreedyTakesArgmaxLowestIdOnTies) {
  Sampler s = make(params(0.0f, 1, 0.5f, 0.5f), 4);
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 3.0f, -1.0f, 3.0f}), 1);
  EXPECT_EQ(Sampler::argmax(std::vector<float>{-INFINITY, -INFINITY}), 0);
  EXPECT_EQ(Sampler::argmax(std::vector<float>{-1.0f, 2.0f, 2.0f, 1.0f}), 1);
}

// argmax is the first maximum wherever ties fall in long rows (at either end, in the middle,
// around 1024-element boundaries) and NaN never wins: what the forward pass's matmul_argmax
// must agree with (backend ops_test).
TEST(Sampler, ArgmaxOverLongRowsIsTheFirstMaximum) {
  const auto first_max = [](const std::vector<float>& x) {
    return static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
  };
  std::mt19937 gen(5);
  for (size_t n : {1023u, 1024u, 1025u, 4097u, 262144u}) {
    std::vector<float> x(n);
    std::uniform_int_distribution<int> small(-50, 50);  // few distinct values: many ties
    for (float& v : x) v = static_cast<float>(small(gen));
    EXPECT_EQ(Sampler::argmax(x), first_max(x)) << n;
    for (size_t at : {size_t{0}, size_t{1023}, size_t{1024}, n - 1, n / 2}) {
      if (at >= n) continue;
      std::vector<float> y = x;
      y[at] = 100.0f;
      y[n - 1] = 100.0f;  // a later tie
      if (at + 1 < n) y[at + 1] = std::numeric_limits<float>::quiet_NaN();
      EXPECT_EQ(Sampler::argmax(y), static_cast<int32_t>(at)) << n << " " << at;
    }
  }
  std::vector<float> masked(3000, -INFINITY);
  masked[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(Sampler::argmax(masked), 1);  // the first -inf, as when every token is masked
}

TEST(Sampler, TinyTemperaturesAreGreedy) {
  for (float t : {1e-6f, 1e-30f, 1e-42f}) {
    Sampler s = make(params(t), 3);
    EXPECT_EQ(draws(s, {0.5f, 2.0f, 2.0f}, 20), std::vector<int32_t>(20, 1)) << t;
  }
}

TEST(Sampler, LogitBiasIsAddedBeforeGreedy) {
  SamplingParams p = params(0.0f);
  p.logit_bias = {{2, 1.5f}, {0, -0.5f}};
  Sampler s = make(p, 3);
  EXPECT_EQ(s.sample(std::vector<float>{1.0f, 0.0f, -0.4f}), 2);  // -0.4 + 1.5 = 1.1 > 1.0 - 0.5
  p.logit_bias = {{2, 1.3f}};
  Sampler t = make(p, 3);
  EXPECT_EQ(t.sample(std::vector<float>{1.0f, 0.0f, -0.4f}), 0);  // 0.9 < 1.0
}

TEST(Sampler, LogitBiasOfMinus100RemovesATokenFromSampling) {
  SamplingParams p = params(1.0f);
  p.logit_bias = {{1, -100.0f}};
  Sampler s = make(p, 3);
  const auto c = counts(draws(s, {0.0f, 5.0f, 0.0f}, 2000), 3);
  EXPECT_EQ(c[1], 0);
  EXPECT_GT(c[0], 800);
  EXPECT_GT(c[2], 800);
}

TEST(Sampler, MinTokensMasksStopIdsUntilEnoughWereGenerated) {
  SamplingParams p = params(0.0f);
  p.min_tokens = 2;
  Sampler s = make(p, 4, {3, 1});
  const std::vector<float> logits = {0.0f, 4.0f, 1.0f, 5.0f};  // the stop ids are the two best
  EXPECT_EQ(s.sample(logits), 2);
  EXPECT_EQ(s.sample(logits), 2);
  EXPECT_EQ(s.sample(logits), 3);

  // Sampling too: a stop token holding almost all the mass never comes before min_tokens.
  SamplingParams q = params(1.0f);
  q.min_tokens = 50;
  Sampler r = make(q, 3, {0});
  const auto first = draws(r, {10.0f, 0.0f, 0.0f}, 50);
  EXPECT_EQ(std::count(first.begin(), first.end(), 0), 0);
  const auto later = draws(r, {10.0f, 0.0f, 0.0f}, 50);
  EXPECT_GT(std::count(later.begin(), later.end(), 0), 45);
}

// Greedy picks straight from the logits where nothing would change them (no copy): the pick must
// be the processed logits' first maximum, ties and stop ids held back by min_tokens included.
TEST(Sampler, GreedyPickIsTheFirstMaximumOfTheProcessedLogits) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> level(0, 5);  // few distinct values: many ties
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = 16;
    std::vector<float> logits(static_cast<size_t>(n));
    for (float& x : logits) x = static_cast<float>(level(rng));
    const std::vector<int32_t> stops = {static_cast<int32_t>(rng() % n), static_cast<int32_t>(rng() % n)};
    SamplingParams p = params(0.0f);
    p.min_tokens = trial % 2 == 0 ? 1 : 0;
    Sampler s = make(p, n, stops);
    std::vector<float> processed = logits;
    if (p.min_tokens > 0) {
      for (int32_t id : stops) processed[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
    }
    const auto first_max = std::max_element(processed.begin(), processed.end()) - processed.begin();
    ASSERT_EQ(s.sample(logits), first_max) << "trial " << trial;
  }
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p = params(0.0f);
  p.repetition_penalty = 1.5f;
  {
    Sampler s = make(p, 2);
    s.set_prompt(std::vector<int32_t>{0});
    EXPECT_EQ(s.sample(std::vector<float>{2.0f, 1.5f}), 1);  // 2 / 1.5 = 1.33 < 1.5
  }
  {
    Sampler s = make(p, 2);
    s.set_prompt(std::vector<int32_t>{1});
    EXPECT_EQ(s.sample(std::vector<float>{-1.2f, -1.0f}), 0);  // -1 * 1.5 = -1.5 < -1.2
  }
  {
    p.repetition_penalty = 1.2f;
    Sampler s = make(p, 2);
    s.set_prompt(std::vector<int32_t>{0});
    EXPECT_EQ(s.sample(std::vector<float>{2.0f, 1.5f}), 0);  // 2 / 1.2 = 1.67 > 1.5: not a subtraction
  }
  {
    // Generated tokens count as well: after 0 is generated it is penalised, once (not per count).
    p.repetition_penalty = 1.5f;
    Sampler s = make(p, 2);
    const std::vector<float> logits = {2.0f, 1.4f};
    // 0: 2.0; 1: 2 / 1.5 = 1.33 < 1.4; 0: 1.33 > 1.4 / 1.5; 0: still 1.33, one division for any count
    EXPECT_EQ(draws(s, logits, 4), (std::vector<int32_t>{0, 1, 0, 0}));
  }
}

TEST(Sampler, FrequencyPenaltyCountsGeneratedTokensOnly) {
  SamplingParams p = params(0.0f);
  p.frequency_penalty = 0.6f;
  Sampler s = make(p, 3);
  s.set_prompt(std::vector<int32_t>{0, 0, 0, 0});  // the prompt does not count
  const std::vector<float> logits = {3.0f, 2.0f, 0.0f};
  // 0: 3.0; 0: 2.4 > 2.0; 1: 1.8 < 2.0; 0: 1.8 > 1.4; 1: 1.2 < 1.4
  EXPECT_EQ(draws(s, logits, 5), (std::vector<int32_t>{0, 0, 1, 0, 1}));
}

TEST(Sampler, PresencePenaltyIsSubtractedOnce) {
  SamplingParams p = params(0.0f);
  p.presence_penalty = 0.6f;
  Sampler s = make(p, 2);
  s.set_prompt(std::vector<int32_t>{0});
  const std::vector<float> logits = {3.0f, 2.5f};
  // 0: 3.0; 1: 2.4 < 2.5; 0: 2.4 > 1.9; 0: still 2.4 (a frequency penalty would give 1.8)
  EXPECT_EQ(draws(s, logits, 4), (std::vector<int32_t>{0, 1, 0, 0}));
}

TEST(Sampler, NegativePenaltiesFavourRepeats) {
  SamplingParams p = params(0.0f);
  p.presence_penalty = -1.0f;
  Sampler s = make(p, 2);
  EXPECT_EQ(draws(s, {1.0f, 0.5f}, 1), (std::vector<int32_t>{0}));
  EXPECT_EQ(s.sample(std::vector<float>{0.0f, 0.5f}), 0);  // 0 + 1 > 0.5
}

TEST(Sampler, PenaltiesApplyAfterTheMinTokensMaskAndBias) {
  SamplingParams p = params(0.0f);
  p.logit_bias = {{1, -2.0f}};
  p.repetition_penalty = 2.0f;
  Sampler s = make(p, 2);
  s.set_prompt(std::vector<int32_t>{1});
  // bias first: 1.5 - 2 = -0.5, then the penalty multiplies: -1.0 < -0.8
  EXPECT_EQ(s.sample(std::vector<float>{-0.8f, 1.5f}), 0);
}

// ---------------------------------------------------------------------------------------------
// Distributions: chi-square goodness of fit against the exact expected distribution

TEST(SamplerFit, Temperature) {
  const SamplingParams p = params(0.8f);
  check_fit(kLogits, p, expected_distribution(kLogits, with_temperature(p, 1.0f)));
}

TEST(SamplerFit, TemperatureAboveOne) {
  const SamplingParams p = params(1.7f, 0, 1.0f, 0.0f, 11);
  check_fit(kLogits, p, expected_distribution(kLogits, with_temperature(p, 1.3f)));
}

TEST(SamplerFit, TopKKeepsTiesWithTheKthLogit) {
  const std::vector<float> logits = {1.0f, 2.0f, 1.0f, 1.0f, 0.0f, 1.0f};
  const SamplingParams p = params(1.0f, 2);
  const auto expected = expected_distribution(logits, p);
  EXPECT_EQ(support(expected), 5u);  // 1, then 0, 2, 3 and 5 tied for second
  // The mistake: exactly k tokens, ties broken by id.
  std::vector<double> wrong = expected;
  wrong[2] = wrong[3] = wrong[5] = 0.0;
  const double total = wrong[0] + wrong[1];
  for (double& x : wrong) x /= total;
  check_fit(logits, p, wrong);
}

TEST(SamplerFit, TopK) {
  const SamplingParams p = params(0.9f, 3, 1.0f, 0.0f, 3);
  check_fit(kLogits, p, expected_distribution(kLogits, with_temperature(p, 1.5f)));
}

TEST(SamplerFit, TopP) {
  const SamplingParams p = params(0.8f, 0, 0.7f, 0.0f, 5);
  const auto expected = expected_distribution(kLogits, p);
  EXPECT_EQ(support(expected), 3u);
  // The nucleus measured at temperature 1 instead of the tempered distribution.
  check_fit(kLogits, p, expected_distribution(kLogits, with_temperature(p, 1.0f)));
}

TEST(SamplerFit, TopPAfterTopKRenormalises) {
  // Inside the top-3 set, top_p 0.7 keeps two tokens; measured on the whole distribution it
  // would keep three.
  const SamplingParams p = params(1.0f, 3, 0.7f, 0.0f, 9);
  const auto expected = expected_distribution(kLogits, p);
  EXPECT_EQ(support(expected), 2u);
  SamplingParams whole = p;
  whole.top_k = 0;
  const auto wrong = expected_distribution(kLogits, whole);
  EXPECT_NE(support(wrong), support(expected));
  check_fit(kLogits, p, wrong);
}

TEST(SamplerFit, MinP) {
  const SamplingParams p = params(0.8f, 0, 1.0f, 0.2f, 13);
  const auto expected = expected_distribution(kLogits, p);
  EXPECT_EQ(support(expected), 4u);
  SamplingParams no_min_p = p;
  no_min_p.min_p = 0.0f;
  check_fit(kLogits, p, expected_distribution(kLogits, no_min_p));
}

TEST(SamplerFit, AllFiltersTogether) {
  const std::vector<float> logits = {0.3f, 1.9f, -0.2f, 2.2f, 1.1f, 0.8f, 1.9f, -3.0f, 0.6f, 1.4f};
  const SamplingParams p = params(1.2f, 7, 0.9f, 0.35f, 17);  // min-p drops the sixth
  const auto expected = expected_distribution(logits, p);
  EXPECT_GE(support(expected), 4u);
  check_fit(logits, p, expected_distribution(logits, with_temperature(p, 1.0f)));
}

TEST(SamplerFit, LargeVocabularyNucleus) {
  // DeepSeek's vocabulary size: a peaked distribution over noise, sampled through top-p without
  // top-k, the path that must not sort the whole vocabulary.
  constexpr int64_t kVocab = 129280;
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = noise(rng);
  for (int i = 0; i < 12; ++i) logits[static_cast<size_t>(1000 * i + 17)] = 14.0f + 0.25f * static_cast<float>(i);
  const SamplingParams p = params(1.0f, 0, 0.9f, 0.0f, 21);
  const auto expected = expected_distribution(logits, p);
  ASSERT_GE(support(expected), 5u);
  ASSERT_LE(support(expected), 12u);
  Sampler s = make(p, kVocab);
  constexpr int kDraws = 5000;
  const auto observed = counts(draws(s, logits, kDraws), logits.size());
  EXPECT_LT(chi_square(observed, expected, kDraws), chi_square_bound(support(expected) - 1));
}

TEST(SamplerFit, FlatLargeVocabularyKeepsTheLowerHalf) {
  // All logits equal: the nucleus is ordered by id, so top_p 0.5 keeps exactly ids below V / 2.
  constexpr int64_t kVocab = 129280;
  const std::vector<float> logits(kVocab, 0.25f);
  Sampler s = make(params(1.0f, 0, 0.5f, 0.0f, 23), kVocab);
  const auto tokens = draws(s, logits, 200);
  EXPECT_LT(*std::max_element(tokens.begin(), tokens.end()), kVocab / 2);
  EXPECT_GT(*std::max_element(tokens.begin(), tokens.end()), kVocab / 4);  // spread, not stuck low
}

TEST(SamplerFit, StatisticIsLargeForAWrongExpectation) {
  // The check itself: a uniform expectation fails on the tempered softmax.
  const SamplingParams p = params(0.8f);
  Sampler s = make(p, static_cast<int64_t>(kLogits.size()));
  const auto observed = counts(draws(s, kLogits, 20000), kLogits.size());
  const std::vector<double> uniform(kLogits.size(), 1.0 / static_cast<double>(kLogits.size()));
  EXPECT_GT(chi_square(observed, uniform, 20000), 100.0 * chi_square_bound(kLogits.size() - 1));
}

// ---------------------------------------------------------------------------------------------
// Allocation

TEST(Sampler, DoesNotAllocateAfterTheFirstSample) {
  constexpr int64_t kVocab = 4096;
  std::mt19937 rng(1);
  std::normal_distribution<float> noise(0.0f, 2.0f);
  std::vector<std::vector<float>> rows(8, std::vector<float>(kVocab));
  for (auto& row : rows) {
    for (float& x : row) x = noise(rng);
  }
  std::vector<int32_t> prompt(300);
  for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % kVocab);
  const std::vector<float> flat(kVocab, 0.0f);
  for (const SamplingParams& base : {params(1.0f), params(0.7f, 50, 0.9f, 0.02f), params(1.0f, 0, 0.95f),
                                     params(0.0f), params(1.3f, 0, 1.0f, 0.1f)}) {
    SamplingParams p = base;
    p.repetition_penalty = 1.1f;
    p.frequency_penalty = 0.3f;
    p.presence_penalty = 0.2f;
    p.logit_bias = {{5, 3.0f}, {6, -3.0f}};
    p.min_tokens = 5;
    const int64_t at_start = g_allocations;
    Sampler s = make(p, kVocab, {0, 1});
    ASSERT_GT(g_allocations, at_start);  // the counter sees the sampler's own scratch
    s.set_prompt(prompt);
    s.sample(rows[0]);
    const int64_t before = g_allocations;
    for (int i = 0; i < 400; ++i) s.sample(i % 50 == 0 ? flat : rows[static_cast<size_t>(i) % rows.size()]);
    EXPECT_EQ(g_allocations, before) << "temperature " << p.temperature << " top_k " << p.top_k;
  }
}

// ---------------------------------------------------------------------------------------------
// Seeds

TEST(Sampler, SameSeedSameSequenceOtherSeedOtherSequence) {
  const std::vector<float> logits(50, 0.0f);
  for (const SamplingParams& base : {params(1.0f), params(1.0f, 20, 0.9f, 0.01f)}) {
    SamplingParams p = base;
    p.seed = 42;
    Sampler a = make(p, 50);
    Sampler b = make(p, 50);
    p.seed = 43;
    Sampler c = make(p, 50);
    const auto sa = draws(a, logits, 100);
    EXPECT_EQ(sa, draws(b, logits, 100));
    EXPECT_NE(sa, draws(c, logits, 100));
    EXPECT_GT(std::set<int32_t>(sa.begin(), sa.end()).size(), 10u);
  }
}

TEST(Sampler, UnseededSamplersDiffer) {
  SamplingParams p = params(1.0f);
  p.seed.reset();
  const std::vector<float> logits(1000, 0.0f);
  Sampler a = make(p, 1000);
  Sampler b = make(p, 1000);
  EXPECT_NE(draws(a, logits, 20), draws(b, logits, 20));
}

// ---------------------------------------------------------------------------------------------
// Logprobs against a scalar double-precision reference

TEST(ComputeLogprob, MatchesADoublePrecisionReference) {
  constexpr size_t kVocab = 5000;
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = noise(rng);
  logits[10] = logits[20] = logits[4000] = 12.5f;  // a three-way tie for the best
  logits[30] = -INFINITY;                          // a masked token

  double max_logit = -INFINITY;
  for (float x : logits) max_logit = std::max(max_logit, static_cast<double>(x));
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max_logit);
  const double log_sum = max_logit + std::log(sum);
  std::vector<int32_t> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });

  std::vector<std::pair<float, int32_t>> scratch;
  for (int32_t token : {10, 20, 4000, 0, 31, 4999, static_cast<int32_t>(order[100])}) {
    const TokenLogprob lp = compute_logprob(logits, token, 20, scratch);
    EXPECT_EQ(lp.token, token);
    EXPECT_NEAR(lp.logprob, static_cast<double>(logits[static_cast<size_t>(token)]) - log_sum, 1e-5);
    EXPECT_EQ(lp.rank, std::find(order.begin(), order.end(), token) - order.begin() + 1) << token;
    ASSERT_EQ(lp.top.size(), 20u);
    for (size_t i = 0; i < 20; ++i) {
      EXPECT_EQ(lp.top[i].token, order[i]) << i;
      EXPECT_NEAR(lp.top[i].logprob, static_cast<double>(logits[static_cast<size_t>(order[i])]) - log_sum, 1e-5);
    }
  }
  const TokenLogprob masked = compute_logprob(logits, 30, 0, scratch);
  EXPECT_EQ(masked.logprob, -INFINITY);
  EXPECT_EQ(masked.rank, static_cast<int32_t>(kVocab));
  EXPECT_TRUE(masked.top.empty());
}

TEST(ComputeLogprob, TiesGoToTheLowerIdAndKIsClamped) {
  const std::vector<float> logits = {1.0f, 3.0f, 1.0f, 3.0f};
  std::vector<std::pair<float, int32_t>> scratch;
  const TokenLogprob lp = compute_logprob(logits, 3, 20, scratch);
  EXPECT_EQ(lp.rank, 2);
  ASSERT_EQ(lp.top.size(), 4u);
  EXPECT_EQ(lp.top[0].token, 1);
  EXPECT_EQ(lp.top[1].token, 3);
  EXPECT_EQ(lp.top[2].token, 0);
  EXPECT_EQ(lp.top[3].token, 2);
  const double log_sum = std::log(2.0 * std::exp(1.0) + 2.0 * std::exp(3.0));
  EXPECT_NEAR(lp.logprob, 3.0 - log_sum, 1e-6);
  EXPECT_NEAR(lp.top[3].logprob, 1.0 - log_sum, 1e-6);
}

TEST(ComputeLogprob, LargeLogitsDoNotOverflow) {
  const std::vector<float> logits = {1000.0f, 999.0f, -1000.0f};
  std::vector<std::pair<float, int32_t>> scratch;
  const TokenLogprob lp = compute_logprob(logits, 1, 1, scratch);
  EXPECT_NEAR(lp.logprob, -1.0 - std::log1p(std::exp(-1.0)), 1e-5);
  EXPECT_EQ(lp.top[0].token, 0);
}

// A constraint's mask: the tokens it leaves out get -inf before bias, penalties and the
// filters, so no boost brings them back and every draw is an allowed token.
TEST(SamplerMask, OnlyAllowedTokensAreDrawn) {
  SamplingParams p;
  p.seed = 3;
  p.logit_bias = {{5, 100.0f}};   // a disallowed token made the favourite
  p.presence_penalty = -2.0f;     // and every generated token boosted
  p.top_k = 50;
  Sampler s = make(p, 130);
  std::vector<float> logits(130, 0.0f);
  std::vector<uint64_t> mask(3, 0);
  for (int32_t id : {7, 64, 129}) mask[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) seen.insert(s.sample(logits, mask));
  EXPECT_EQ(seen, (std::set<int32_t>{7, 64, 129}));
  p.temperature = 0.0f;
  Sampler greedy = make(p, 130);
  EXPECT_EQ(greedy.sample(logits, mask), 7);
}

// min_tokens holds stops back only where the grammar allows something else: where it allows
// only a stop, the grammar has ended and the stop is taken.
TEST(SamplerMask, MinTokensYieldsWhereOnlyAStopIsAllowed) {
  SamplingParams p;
  p.seed = 1;
  p.min_tokens = 10;
  std::vector<float> logits(70, 0.0f);
  logits[66] = 5.0f;
  std::vector<uint64_t> stop_only(2, 0);
  stop_only[1] = uint64_t{1} << 2;  // id 66, a stop
  Sampler s = make(p, 70, {66, 66});
  EXPECT_EQ(s.sample(logits, stop_only), 66);
  std::vector<uint64_t> stop_or_other = stop_only;
  stop_or_other[0] = uint64_t{1} << 9;
  for (int i = 1; i < 10; ++i) EXPECT_EQ(s.sample(logits, stop_or_other), 9);  // tokens 2..10: held back
}

TEST(SamplerMask, MaskedSamplingDoesNotAllocate) {
  SamplingParams p;
  p.seed = 2;
  p.top_p = 0.9f;
  p.frequency_penalty = 0.5f;
  Sampler s = make(p, 1000);
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 17) * 0.1f;
  std::vector<uint64_t> mask(16, 0x5555555555555555ull);
  s.sample(logits, mask);
  const int64_t before = g_allocations;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(logits, mask) % 2, 0);
  EXPECT_EQ(g_allocations, before);
}

}  // namespace
}  // namespace deepinfer
