// Token sampler for one sequence: temperature, top-k, top-p, min-p, seeded randomness.
//
// Filters apply in vLLM's order: temperature scales the logits, then top-k, top-p and min-p
// each remove tokens from the softmax distribution, and one token is drawn from what remains
// (renormalised). Temperature 0 is greedy: the argmax, ties to the lowest id. Scratch is
// reused between calls, so sampling does not allocate after the first token.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "deepinfer/status.h"

namespace deepinfer {

class Sampler {
 public:
  // INVALID_ARGUMENT for out-of-range parameters (negative temperature, top_p outside (0, 1],
  // min_p outside [0, 1]).
  static Result<Sampler> create(const SamplingParams& params);

  int32_t sample(std::span<const float> logits);

  static int32_t argmax(std::span<const float> logits);

 private:
  explicit Sampler(const SamplingParams& params);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // (probability, token id)
};

}  // namespace deepinfer
