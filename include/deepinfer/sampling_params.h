// Sampling parameters of one request, with the defaults of the OpenAI API and vLLM.
#pragma once

#include <cstdint>
#include <optional>

namespace deepinfer {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy (argmax)
  int32_t top_k = 0;         // 0 or negative = no limit
  float top_p = 1.0f;        // nucleus: smallest set with cumulative probability >= top_p
  float min_p = 0.0f;        // drop tokens whose probability is below min_p * max probability
  std::optional<uint64_t> seed;  // same seed + same logits = same token sequence
};

}  // namespace deepinfer
