// At temperature > 0, speculative decoding must leave the output distribution exactly as plain
// sampling's. Two checks with a two-sample chi-square test:
//  - verify_draft (the engine's verification) on a small synthetic model, against plain
//    sampling with the same Sampler; a deliberately broken acceptance rule (keep a draft token
//    whenever the target gives it at least 20%, without drawing) fails the same test, so the
//    test can tell;
//  - the engine itself on a tiny real model (vocabulary of 256), unseeded arms, suffix drafts
//    learnt from earlier outputs, so that drafts are accepted often.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "deepinfer/engine.h"
#include "engine/sampler.h"
#include "engine/speculative/verify.h"
#include "test_models.h"

namespace deepinfer {
namespace {

using Counts = std::map<std::vector<int32_t>, int64_t>;

// Pearson's two-sample statistic over the cells of both samples, cells expected below 5 pooled
// into one; its degrees of freedom in *df.
double chi_square(const Counts& a, const Counts& b, int* df) {
  double na = 0, nb = 0;
  for (const auto& [k, n] : a) na += static_cast<double>(n);
  for (const auto& [k, n] : b) nb += static_cast<double>(n);
  std::map<std::vector<int32_t>, std::pair<double, double>> cells;
  for (const auto& [k, n] : a) cells[k].first += static_cast<double>(n);
  for (const auto& [k, n] : b) cells[k].second += static_cast<double>(n);
  std::vector<std::pair<double, double>> kept;
  std::pair<double, double> pooled{0, 0};
  for (const auto& [k, c] : cells) {
    const double total = c.first + c.second;
    if (std::min(total * na, total * nb) / (na + nb) < 5.0) {
      pooled.first += c.first;
      pooled.second += c.second;
    } else {
      kept.push_back(c);
    }
  }
  if (pooled.first + pooled.second > 0) kept.push_back(pooled);
  double stat = 0;
  for (const auto& [oa, ob] : kept) {
    const double total = oa + ob;
    const double ea = total * na / (na + nb), eb = total * nb / (na + nb);
    stat += (oa - ea) * (oa - ea) / ea + (ob - eb) * (ob - eb) / eb;
  }
  *df = static_cast<int>(kept.size()) - 1;
  return stat;
}

// The chi-square quantile at 1 - 1e-4 (Wilson-Hilferty).
double critical_value(int df) {
  const double z = 3.719;
  const double k = df;
  return k * std::pow(1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k)), 3.0);
}

// ---- A synthetic model: logits of the next token depend on the previous one ----

constexpr int32_t kVocab = 6;
constexpr int kLength = 4;  // tokens per sequence

std::vector<float> logits_after(int32_t previous) {
  std::vector<float> l(kVocab);
  for (int32_t v = 0; v < kVocab; ++v) l[static_cast<size_t>(v)] = std::sin(1.7f * static_cast<float>(previous * kVocab + v));
  l[static_cast<size_t>((previous + 1) % kVocab)] += 1.5f;  // the likely successor
  return l;
}

// The drafter: always the likely successor (one token with certainty, as n-gram drafts are).
std::vector<int32_t> draft_after(int32_t previous, int n) {
  std::vector<int32_t> d;
  for (int i = 0; i < n; ++i) d.push_back(previous = (previous + 1) % kVocab);
  return d;
}

Sampler make_sampler(uint64_t seed) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = seed;
  return std::move(Sampler::create(p, kVocab, {})).value();
}

std::vector<int32_t> plain_sequence(Sampler& s) {
  std::vector<int32_t> out;
  int32_t previous = 0;
  while (static_cast<int>(out.size()) < kLength) out.push_back(previous = s.sample(logits_after(previous)));
  return out;
}

// Rounds of (draft of 3, verification) until kLength tokens, with `verify` deciding.
template <typename Verify>
std::vector<int32_t> speculative_sequence(Sampler& s, Verify&& verify) {
  std::vector<int32_t> out;
  int32_t previous = 0;
  while (static_cast<int>(out.size()) < kLength) {
    const int room = kLength - static_cast<int>(out.size());
    const std::vector<int32_t> draft = draft_after(previous, std::min(3, room - 1));
    std::vector<int32_t> kept(draft.size() + 1);
    const int32_t n = verify(s, draft, previous, kept);
    out.insert(out.end(), kept.begin(), kept.begin() + n);
    previous = out.back();
  }
  return out;
}

// The engine's rule: each row's logits follow the draft tokens before it.
int32_t engine_rule(Sampler& s, const std::vector<int32_t>& draft, int32_t previous, std::vector<int32_t>& kept) {
  return speculative::verify_draft(draft, kept, [&](int32_t i, bool* ends) {
           *ends = false;
           return s.sample(logits_after(i == 0 ? previous : draft[static_cast<size_t>(i - 1)]));
         }).n_tokens;
}

// Broken on purpose: a draft token the target gives at least 20% is kept without a draw.
int32_t broken_rule(Sampler& s, const std::vector<int32_t>& draft, int32_t previous, std::vector<int32_t>& kept) {
  int32_t n = 0;
  for (size_t i = 0; i <= draft.size(); ++i) {
    const int32_t before = i == 0 ? previous : draft[i - 1];
    const std::vector<float> l = logits_after(before);
    if (i < draft.size()) {
      double z = 0;
      for (float x : l) z += std::exp(x);
      if (std::exp(l[static_cast<size_t>(draft[i])]) / z >= 0.2) {
        kept[static_cast<size_t>(n++)] = draft[i];
        continue;
      }
    }
    kept[static_cast<size_t>(n++)] = s.sample(l);
    break;
  }
  return n;
}

template <typename Make>
Counts sample_counts(int n, uint64_t seed, Make&& make) {
  Counts c;
  Sampler s = make_sampler(seed);
  for (int i = 0; i < n; ++i) ++c[make(s)];
  return c;
}

TEST(SpeculativeDistribution, VerificationKeepsThePlainDistributionAndABrokenRuleIsCaught) {
  constexpr int kN = 40000;
  const Counts plain = sample_counts(kN, 1, [](Sampler& s) { return plain_sequence(s); });
  const Counts engine = sample_counts(kN, 2, [](Sampler& s) { return speculative_sequence(s, engine_rule); });
  const Counts broken = sample_counts(kN, 3, [](Sampler& s) { return speculative_sequence(s, broken_rule); });
  int df = 0;
  const double good = chi_square(plain, engine, &df);
  EXPECT_LT(good, critical_value(df)) << "df " << df;
  const double bad = chi_square(plain, broken, &df);
  EXPECT_GT(bad, critical_value(df)) << "df " << df << ": the test cannot tell a broken acceptance rule";
}

// ---- The engine on a tiny model ----

Counts engine_counts(SpeculativeMethod method, uint64_t seed_base, EngineStats* stats) {
  EngineConfig cfg;
  cfg.model_path = testing::tiny_model("llama_gqa_tied");
  cfg.threads = 1;
  cfg.speculative.method = method;
  cfg.speculative.schedule = SpeculativeSchedule::kFixed;
  auto engine = std::move(Engine::create(cfg)).value();
  Counts counts;
  // Rounds: the suffix trie learns from the outputs of the rounds before.
  for (int round = 0; round < 24; ++round) {
    GenerationRequest r;
    r.prompt = {5, 9, 14, 5, 9, 14, 5, 9};
    r.max_tokens = 4;
    r.n = 128;
    r.sampling.temperature = 1.0f;
    r.sampling.top_k = 3;
    r.sampling.seed = seed_base + static_cast<uint64_t>(round) * 1000;
    r.sampling.ignore_eos = true;
    r.detokenize = false;
    auto h = std::move(engine->submit(r)).value();
    std::vector<std::vector<int32_t>> seqs(128);
    while (auto e = h->next()) {
      auto& s = seqs[static_cast<size_t>(e->index)];
      s.insert(s.end(), e->tokens.begin(), e->tokens.end());
    }
    for (auto& s : seqs) ++counts[std::vector<int32_t>(s.begin() + 1, s.end())];  // the tokens drafts can cover
  }
  *stats = engine->stats();
  return counts;
}

TEST(SpeculativeDistribution, TheEnginesSampledDistributionMatchesPlainSampling) {
  EngineStats plain_stats, spec_stats;
  const Counts plain = engine_counts(SpeculativeMethod::kNone, 1, &plain_stats);
  const Counts spec = engine_counts(SpeculativeMethod::kSuffix, 500000, &spec_stats);
  ASSERT_EQ(spec_stats.speculative.methods.size(), 6u);  // ngram, suffix, grammar, draft, mtp, dspark
  EXPECT_GT(spec_stats.speculative.methods[1].accepted_tokens, 1000) << "suffix drafts were seldom accepted";
  int df = 0;
  const double stat = chi_square(plain, spec, &df);
  EXPECT_LT(stat, critical_value(df)) << "df " << df;
}

}  // namespace
}  // namespace deepinfer
