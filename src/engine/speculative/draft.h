// What a drafter proposes for one sequence: the tokens it expects next, with an estimate for
// each of the probability that the target model accepts it given that it accepted those before
// (a conditional acceptance, as DSpark's confidence head estimates it).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "deepinfer/engine.h"

namespace deepinfer::speculative {

struct Draft {
  std::array<int32_t, kMaxSpeculativeTokens> tokens{};
  std::array<float, kMaxSpeculativeTokens> confidence{};
  int32_t n = 0;

  std::span<const int32_t> view() const { return {tokens.data(), static_cast<size_t>(n)}; }
  void push(int32_t token, float c) {
    tokens[static_cast<size_t>(n)] = token;
    confidence[static_cast<size_t>(n)] = c;
    ++n;
  }
};

}  // namespace deepinfer::speculative
