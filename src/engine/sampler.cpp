#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace deepinfer {

Result<Sampler> Sampler::create(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return invalid_argument("temperature must be a finite number >= 0, got " + std::to_string(p.temperature));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return invalid_argument("top_p must be in (0, 1], got " + std::to_string(p.top_p));
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return invalid_argument("min_p must be in [0, 1], got " + std::to_string(p.min_p));
  }
  return Sampler(p);
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed ? *params.seed : std::random_device{}()) {}

int32_t Sampler::argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  return best;
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (params_.temperature == 0.0f || params_.top_k == 1) return argmax(logits);

  // Softmax of logits / temperature over all tokens, sorted by probability (descending; ties
  // by id so the order, and with a seed the draw, is reproducible).
  const float inv_t = 1.0f / params_.temperature;
  float max_logit = -INFINITY;
  for (float l : logits) max_logit = std::max(max_logit, l);
  candidates_.resize(logits.size());

  for (size_t i = 0; i < logits.size(); ++i) {
    const float p = std::exp((logits[i] - max_logit) * inv_t);
    candidates_[i] = {p, static_cast<int32_t>(i)};

  }
  size_t keep = candidates_.size();
  const auto by_prob = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = static_cast<size_t>(params_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(keep), candidates_.end(), by_prob);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_prob);
  }
  // top-p and min-p are defined on the distribution after top-k, as vLLM applies them.
  double kept_sum = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_sum += candidates_[i].first;
  if (params_.top_p < 1.0f) {
    double cumulative = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      cumulative += candidates_[i].first / kept_sum;
      if (cumulative >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    const float threshold = params_.min_p * candidates_[0].first;
    size_t n = 1;
    while (n < keep && candidates_[n].first >= threshold) ++n;
    keep = n;
  }
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) total += candidates_[i].first;
  std::uniform_real_distribution<double> uniform(0.0, total);
  const double r = uniform(rng_);
  double cumulative = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += candidates_[i].first;
    if (r < cumulative) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;
}

}  // namespace deepinfer
