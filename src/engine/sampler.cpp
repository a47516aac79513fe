#include "engine/sampler.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "core/check.h"

namespace deepinfer {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int32_t kMaxLogprobs = 20;
constexpr float kMaxPenalty = 2.0f;
constexpr float kMaxBias = 100.0f;
// Below this temperature sampling is greedy, as in vLLM: 1 / temperature would overflow the
// weights into NaN long before a draw could differ from the argmax.
constexpr float kGreedyBelow = 1e-5f;

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

Status out_of_range_param(const char* name, const char* range, double got) {
  return invalid_argument(std::string(name) + " must be " + range + ", got " + number(got));
}

// Best first: the higher logit, and between equal logits the lower id, so every ordering the
// sampler and the logprobs produce is total and reproducible.
bool better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// e^x for x <= 0, including -inf (0). Branch-free so that loops over a whole vocabulary
// vectorise, which std::exp does not: the softmax weights are the sampler's largest cost.
// Cody-Waite reduction x = n ln2 + r with |r| <= ln2 / 2, then the degree-7 Taylor polynomial
// of e^r (truncation below 1e-8 relative), times 2^n built in the exponent bits. Below -87 the
// result would be subnormal: 0, which changes no draw (weights are relative to the best, 1).
inline float exp_nonpositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 split so that n * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  constexpr float kRound = 12582912.0f;         // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kMin = -87.0f;
  const float xc = std::max(x, kMin);
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float two_n = std::bit_cast<float>(static_cast<int32_t>(n + 127.0f) << 23);
  return x < kMin ? 0.0f : p * two_n;
}

// Sum of f(x[i]) over a row: float lanes within blocks of 1024 (a loop that vectorises and
// loses nothing that matters: 64 terms per lane), blocks added in double. f is the identity or
// the softmax weight.
template <typename F>
double sum_of(std::span<const float> x, F f) {
  constexpr size_t kLanes = 16;
  constexpr size_t kBlock = 1024;
  double total = 0.0;
  const size_t n_full = x.size() - x.size() % kLanes;
  for (size_t i = 0; i < n_full;) {
    std::array<float, kLanes> lanes{};
    const size_t end = std::min(n_full, i + kBlock);
    for (; i < end; i += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) lanes[j] += f(x[i + j]);
    }
    for (float l : lanes) total += l;
  }
  for (size_t i = n_full; i < x.size(); ++i) total += f(x[i]);
  return total;
}

// Whether any of x[0, kBlockSkip) exceeds `floor`: a vectorised test that lets the selection
// loops skip 16 tokens at a time once their threshold is high (the usual case after a few
// hundred tokens).
constexpr size_t kBlockSkip = 16;
bool any_above(const float* x, float floor) {
  bool any = false;
  for (size_t j = 0; j < kBlockSkip; ++j) any |= x[j] > floor;
  return any;
}

// Independent lanes so that the comparisons do not wait on each other (GCC does not vectorise
// a float max reduction without -ffast-math, because of NaN).
float max_of(std::span<const float> x) {
  constexpr size_t kLanes = 16;
  std::array<float, kLanes> lanes;
  lanes.fill(kNegInf);
  const size_t n_full = x.size() - x.size() % kLanes;
  for (size_t i = 0; i < n_full; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lanes[j] = x[i + j] > lanes[j] ? x[i + j] : lanes[j];
  }
  float m = kNegInf;
  for (size_t i = n_full; i < x.size(); ++i) m = x[i] > m ? x[i] : m;
  for (float l : lanes) m = l > m ? l : m;
  return m;
}

}  // namespace

Status Sampler::validate(const SamplingParams& p, int64_t n_vocab) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return out_of_range_param("temperature", "a finite number >= 0", p.temperature);
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return out_of_range_param("top_p", "in (0, 1]", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return out_of_range_param("min_p", "in [0, 1]", p.min_p);
  if (p.top_k < -1) return out_of_range_param("top_k", "-1 or 0 (no limit) or a positive count", p.top_k);
  if (!(std::fabs(p.presence_penalty) <= kMaxPenalty)) {
    return out_of_range_param("presence_penalty", "in [-2, 2]", p.presence_penalty);
  }
  if (!(std::fabs(p.frequency_penalty) <= kMaxPenalty)) {
    return out_of_range_param("frequency_penalty", "in [-2, 2]", p.frequency_penalty);
  }
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return out_of_range_param("repetition_penalty", "a finite number > 0", p.repetition_penalty);
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= n_vocab) {
      return invalid_argument("logit_bias token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(n_vocab) + ")");
    }
    if (!(std::fabs(bias) <= kMaxBias)) {
      return invalid_argument("logit_bias for token " + std::to_string(id) + " must be in [-100, 100], got " +
                              number(bias));
    }
  }
  if (p.min_tokens < 0) return out_of_range_param("min_tokens", ">= 0", static_cast<double>(p.min_tokens));
  if (p.logprobs > kMaxLogprobs) return out_of_range_param("logprobs", "at most 20", p.logprobs);
  if (p.prompt_logprobs > kMaxLogprobs) return out_of_range_param("prompt_logprobs", "at most 20", p.prompt_logprobs);
  return Status::ok_status();
}

Result<Sampler> Sampler::create(const SamplingParams& params, int64_t n_vocab, std::vector<int32_t> stop_ids) {
  if (n_vocab < 1 || n_vocab > std::numeric_limits<int32_t>::max()) {
    return invalid_argument("sampler vocabulary size must be in [1, 2^31), got " + std::to_string(n_vocab));
  }
  DI_RETURN_IF_ERROR(validate(params, n_vocab));
  for (int32_t id : stop_ids) {
    if (id < 0 || id >= n_vocab) {
      return invalid_argument("stop token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(n_vocab) + ")");
    }
  }
  return Sampler(params, n_vocab, std::move(stop_ids));
}

Sampler::Sampler(const SamplingParams& params, int64_t n_vocab, std::vector<int32_t> stop_ids)
    : params_(params), n_vocab_(n_vocab), stop_ids_(std::move(stop_ids)) {
  if (params.seed) {
    rng_.seed(*params.seed);
  } else {
    std::random_device device;
    rng_.seed((static_cast<uint64_t>(device()) << 32) ^ device());
  }
  scratch_.resize(static_cast<size_t>(n_vocab));
  if (has_penalties()) {
    output_counts_.assign(static_cast<size_t>(n_vocab), 0);
    in_prompt_.assign(static_cast<size_t>(n_vocab), 0);
    penalized_.reserve(static_cast<size_t>(n_vocab));  // every id at most once: never grows past this
  }
}

bool Sampler::has_penalties() const {
  return params_.repetition_penalty != 1.0f || params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f;
}

void Sampler::set_prompt(std::span<const int32_t> prompt) {
  if (!has_penalties()) return;
  for (int32_t id : prompt) {
    DI_ICHECK(id >= 0 && id < n_vocab_);
    const auto i = static_cast<size_t>(id);
    if (in_prompt_[i] == 0 && output_counts_[i] == 0) penalized_.push_back(id);
    in_prompt_[i] = 1;
  }
}

int32_t Sampler::argmax(std::span<const float> logits) {
  // Two passes, each of which vectorises, beat one pass that carries an index.
  const float best = max_of(logits);
  const auto it = std::find(logits.begin(), logits.end(), best);
  return it == logits.end() ? 0 : static_cast<int32_t>(it - logits.begin());
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const uint64_t> allowed) {
  DI_ICHECK(static_cast<int64_t>(logits.size()) == n_vocab_);
  DI_ICHECK(allowed.empty() || static_cast<int64_t>(allowed.size()) * 64 >= n_vocab_);
  const bool greedy = params_.temperature < kGreedyBelow;
  int32_t token = greedy ? greedy_as_is(logits, allowed) : -1;
  if (token < 0) {
    process(logits, allowed);
    token = greedy ? argmax(scratch_) : draw();
  }
  record(token);
  return token;
}

bool Sampler::takes_raw_argmax() const {
  return params_.temperature < kGreedyBelow && params_.logit_bias.empty() && !has_penalties() &&
         (n_generated_ >= params_.min_tokens || stop_ids_.empty());
}

int32_t Sampler::sample_argmax(int32_t token) {
  DI_ICHECK(takes_raw_argmax() && token >= 0 && token < n_vocab_);
  record(token);
  return token;
}

int32_t Sampler::greedy_as_is(std::span<const float> logits, std::span<const uint64_t> allowed) const {
  if (!allowed.empty() || !params_.logit_bias.empty() || has_penalties()) return -1;
  const int32_t token = argmax(logits);
  // min_tokens sets the stop ids to -inf: that changes the first maximum only where one of them
  // is it (a stop id tied with it at a lower id would have been the first maximum itself).
  const bool held_back = n_generated_ < params_.min_tokens &&
                         std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end();
  return held_back ? -1 : token;
}

void Sampler::process(std::span<const float> logits, std::span<const uint64_t> allowed) {
  std::copy(logits.begin(), logits.end(), scratch_.begin());
  if (!allowed.empty()) apply_mask(allowed);
  for (const auto& [id, bias] : params_.logit_bias) scratch_[static_cast<size_t>(id)] += bias;
  if (n_generated_ < params_.min_tokens && (allowed.empty() || allows_a_non_stop(allowed))) {
    for (int32_t id : stop_ids_) scratch_[static_cast<size_t>(id)] = kNegInf;
  }
  if (!has_penalties()) return;
  const float repetition = params_.repetition_penalty;
  const float frequency = params_.frequency_penalty;
  const float presence = params_.presence_penalty;
  for (int32_t id : penalized_) {
    const auto i = static_cast<size_t>(id);
    const int32_t count = output_counts_[i];
    float x = scratch_[i];
    if (repetition != 1.0f) x = x > 0.0f ? x / repetition : x * repetition;
    if (count > 0) x -= frequency * static_cast<float>(count) + presence;
    scratch_[i] = x;
  }
}

void Sampler::apply_mask(std::span<const uint64_t> allowed) {
  const auto n = static_cast<size_t>(n_vocab_);
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = allowed[w];
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(n, w * 64 + 64);
    for (size_t i = w * 64; i < end; ++i) {
      if (((bits >> (i - w * 64)) & 1) == 0) scratch_[i] = kNegInf;
    }
  }
}

bool Sampler::allows_a_non_stop(std::span<const uint64_t> allowed) const {
  const auto n = static_cast<size_t>(n_vocab_);
  int64_t n_allowed = 0;
  for (size_t w = 0; w * 64 < n; ++w) {
    const size_t tail = std::min<size_t>(64, n - w * 64);  // bits past n_vocab do not count
    n_allowed += std::popcount(tail == 64 ? allowed[w] : allowed[w] & ((uint64_t{1} << tail) - 1));
  }
  for (size_t k = 0; k < stop_ids_.size(); ++k) {
    const int32_t id = stop_ids_[k];
    const bool first = std::find(stop_ids_.begin(), stop_ids_.begin() + static_cast<ptrdiff_t>(k), id) ==
                       stop_ids_.begin() + static_cast<ptrdiff_t>(k);  // a stop listed twice counts once
    if (first) n_allowed -= static_cast<int64_t>((allowed[static_cast<size_t>(id) / 64] >> (id % 64)) & 1);
  }
  return n_allowed > 0;
}

void Sampler::record(int32_t token) {
  ++n_generated_;
  if (!has_penalties()) return;
  const auto i = static_cast<size_t>(token);
  if (in_prompt_[i] == 0 && output_counts_[i] == 0) penalized_.push_back(token);
  ++output_counts_[i];
}

double Sampler::uniform() {
  // 53 random bits: the same draw on every standard library (std::uniform_real_distribution's
  // algorithm is implementation-defined, which would break seeded reproducibility).
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

int32_t Sampler::draw() {
  const float max_logit = max_of(scratch_);
  if (!(max_logit > kNegInf)) return argmax(scratch_);  // every token masked: nothing to draw from
  // From here on scratch_ holds softmax weights exp((logit - max) / temperature), in [0, 1].
  // Filters order tokens by weight (vLLM orders logits / temperature: the same order); ties go
  // to the lower id.
  const float inv_t = 1.0f / params_.temperature;  // a multiply: vector division is slow
  for (float& x : scratch_) x = exp_nonpositive((x - max_logit) * inv_t);
  double mass = sum_of(scratch_, [](float w) { return w; });

  const bool use_top_k = params_.top_k > 0 && params_.top_k < n_vocab_;
  const bool use_top_p = params_.top_p < 1.0f;
  const bool use_min_p = params_.min_p > 0.0f;
  if (!use_top_k && !use_top_p && !use_min_p) {
    // The plain softmax needs no ordering: draw in id order over the weights, skipping whole
    // blocks by their (vectorised) sums and walking token by token only inside the last one.
    const double target = uniform() * mass;
    constexpr size_t kWalkBlock = 1024;
    const std::span<const float> w(scratch_);
    double cumulative = 0.0;
    size_t begin = 0;
    for (; begin + kWalkBlock < w.size(); begin += kWalkBlock) {
      const double block = sum_of(w.subspan(begin, kWalkBlock), [](float x) { return x; });
      if (target < cumulative + block) break;
      cumulative += block;
    }
    int32_t last = -1;
    for (size_t i = begin; i < w.size(); ++i) {
      if (w[i] <= 0.0f) continue;
      cumulative += w[i];
      last = static_cast<int32_t>(i);
      if (target < cumulative) return last;
    }
    // Rounding can leave the target a hair beyond the last block's walk: the last positive
    // weight then wins, as it would with exact arithmetic.
    if (last >= 0) return last;
    return static_cast<int32_t>(std::find_if(w.rbegin(), w.rend(), [](float x) { return x > 0.0f; }).base() -
                                w.begin()) - 1;
  }

  if (candidates_.size() != scratch_.size()) candidates_.resize(scratch_.size());  // first draw only
  size_t n = use_top_k ? collect_top_k() : collect_candidates(mass);
  if (use_top_k) {
    mass = 0.0;  // top-p measures against the top-k set
    for (size_t i = 0; i < n; ++i) mass += candidates_[i].first;
  }
  if (use_top_p) n = nucleus(n, mass);
  if (use_min_p) {
    const float cut = params_.min_p;  // the best weight is 1, and it survives every filter
    n = static_cast<size_t>(std::partition(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(n),
                                           [cut](const auto& c) { return c.first >= cut; }) -
                            candidates_.begin());
  }
  DI_ICHECK(n > 0);

  double kept = 0.0;
  for (size_t i = 0; i < n; ++i) kept += candidates_[i].first;
  const double target = uniform() * kept;
  double cumulative = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cumulative += candidates_[i].first;
    if (target < cumulative) return candidates_[i].second;
  }
  return candidates_[n - 1].second;
}

// Without top-k, every filter keeps a prefix of the best-first order, and so does
// "weight >= c" for any c. Trying c = 2^-8, 2^-16, ... finds a prefix that provably holds the
// nucleus (at least top_p of the mass) in one pass for a peaked distribution; only those
// tokens are ordered, so a 129K-token vocabulary sorts a few dozen, with exactly the result of
// sorting everything. A flat distribution costs a few more passes.
size_t Sampler::collect_candidates(double mass) {
  const bool use_top_p = params_.top_p < 1.0f;
  const float min_p_cut = params_.min_p;  // min-p comes last, so its cut can come first
  // The margin covers the different summation orders of `mass` and of nucleus().
  const double target = static_cast<double>(params_.top_p) * mass * (1.0 + 1e-6);
  constexpr float kStep = 0x1p-8f;
  constexpr float kLast = std::numeric_limits<float>::denorm_min();  // every positive weight
  for (float floor = use_top_p ? kStep : kLast;; floor = std::max(floor * kStep, kLast)) {
    const float cut = std::max(floor, min_p_cut);
    size_t n = 0;
    double kept = 0.0;
    for (size_t i = 0; i < scratch_.size(); ++i) {
      if (scratch_[i] >= cut) {
        candidates_[n++] = {scratch_[i], static_cast<int32_t>(i)};
        kept += scratch_[i];
      }
    }
    if (!use_top_p || kept >= target || floor <= min_p_cut || floor == kLast) return n;
  }
}

// The k best weights and every weight tied with the k-th (vLLM keeps ties at the edge): a
// min-heap of the k best so far finds the k-th weight in one pass, in which almost every token
// loses its only comparison, then a second pass collects.
size_t Sampler::collect_top_k() {
  const auto k = static_cast<size_t>(params_.top_k);
  // The heap lives in the candidates' storage, which the collecting pass then overwrites.
  const auto worse_on_top = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first;
  };
  const auto heap = candidates_.begin();
  ptrdiff_t size = 0;
  const auto offer = [&](float w) {
    if (static_cast<size_t>(size) < k) {
      heap[size++].first = w;
      std::push_heap(heap, heap + size, worse_on_top);
    } else if (w > heap->first) {
      std::pop_heap(heap, heap + size, worse_on_top);
      heap[size - 1].first = w;
      std::push_heap(heap, heap + size, worse_on_top);
    }
  };
  const float* w = scratch_.data();
  const size_t n_all = scratch_.size();
  size_t i = 0;
  for (; i + kBlockSkip <= n_all; i += kBlockSkip) {
    if (static_cast<size_t>(size) == k && !any_above(w + i, heap->first)) continue;
    for (size_t j = 0; j < kBlockSkip; ++j) offer(w[i + j]);
  }
  for (; i < n_all; ++i) offer(w[i]);
  const float kth = std::max(heap->first, std::numeric_limits<float>::denorm_min());
  size_t n = 0;
  for (size_t i = 0; i < scratch_.size(); ++i) {
    if (scratch_[i] >= kth) candidates_[n++] = {scratch_[i], static_cast<int32_t>(i)};
  }
  return n;
}

// Orders candidates_[0, n) best first only as far as the nucleus reaches, in growing chunks.
size_t Sampler::nucleus(size_t n, double mass) {
  const double target = static_cast<double>(params_.top_p) * mass;
  const auto first = candidates_.begin();
  double better_mass = 0.0;
  size_t sorted = 0;
  for (size_t chunk = 64;; chunk *= 8) {
    const size_t end = std::min(n, sorted + chunk);
    if (end == n) {
      std::sort(first + static_cast<ptrdiff_t>(sorted), first + static_cast<ptrdiff_t>(n), better);
    } else {
      std::partial_sort(first + static_cast<ptrdiff_t>(sorted), first + static_cast<ptrdiff_t>(end),
                        first + static_cast<ptrdiff_t>(n), better);
    }
    // A token stays while the tokens before it hold less than top_p of the mass: the smallest
    // prefix whose mass reaches top_p, as vLLM's cumulative-sum mask keeps it.
    for (size_t i = sorted; i < end; ++i) {
      if (better_mass >= target) return i;
      better_mass += candidates_[i].first;
    }
    sorted = end;
    if (sorted == n) return n;
  }
}

TokenLogprob compute_logprob(std::span<const float> logits, int32_t token, int32_t k,
                             std::vector<std::pair<float, int32_t>>& scratch) {
  DI_ICHECK(token >= 0 && static_cast<size_t>(token) < logits.size());
  const float max_logit = max_of(logits);
  const float own = logits[static_cast<size_t>(token)];
  const double total = sum_of(logits, [max_logit](float x) { return exp_nonpositive(x - max_logit); });
  const double log_sum = static_cast<double>(max_logit) + std::log(total);

  // Rank = position in the best-first order with ties to the lower id, the order of `top`.
  int32_t rank = 1;
  for (size_t v = 0; v < logits.size(); ++v) rank += logits[v] > own ? 1 : 0;
  for (size_t v = 0; v < static_cast<size_t>(token); ++v) rank += logits[v] == own ? 1 : 0;

  TokenLogprob out;
  out.token = token;
  out.logprob = static_cast<float>(static_cast<double>(own) - log_sum);
  out.rank = rank;
  const size_t n_top = std::min(static_cast<size_t>(std::max(k, 0)), logits.size());
  if (n_top == 0) return out;
  // The k best by insertion into a sorted run: k <= 20, and after the first few hundred tokens
  // almost every block of logits fails the comparison with the current worst.
  scratch.clear();
  scratch.reserve(n_top + 1);
  const auto offer = [&](size_t v) {
    const std::pair<float, int32_t> c{logits[v], static_cast<int32_t>(v)};
    if (scratch.size() == n_top && !better(c, scratch.back())) return;
    scratch.insert(std::upper_bound(scratch.begin(), scratch.end(), c, better), c);
    if (scratch.size() > n_top) scratch.pop_back();
  };
  size_t v = 0;
  // Ids only grow, so once the run is full a token must beat the worst logit strictly.
  for (; v + kBlockSkip <= logits.size(); v += kBlockSkip) {
    if (scratch.size() == n_top && !any_above(logits.data() + v, scratch.back().first)) continue;
    for (size_t j = 0; j < kBlockSkip; ++j) offer(v + j);
  }
  for (; v < logits.size(); ++v) offer(v);
  out.top.reserve(n_top);
  for (const auto& [logit, id] : scratch) {
    out.top.push_back({id, static_cast<float>(static_cast<double>(logit) - log_sum)});
  }
  return out;
}

}  // namespace deepinfer
