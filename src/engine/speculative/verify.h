// Verification of one sequence's draft against the target model's rows.
//
// Row i of a verifying chunk holds the target's logits after draft token i - 1 (row 0: after
// the last known token). draw(i, &ends) samples the target's token from row i exactly as plain
// decoding would (the sampler with its penalties and filters, the grammar's mask) and says
// whether the sequence ends with it (a stop token, the grammar's end). The draft token is
// accepted when the draw equals it; the first draw that differs is kept as the target's own
// token and ends the chunk, as does a token that ends the sequence; after a fully accepted
// draft the last row gives one more token.
//
// Why this is lossless: every drafter here proposes a token with certainty (q one-hot), and
// for such a draft the rejection rule "accept with probability min(1, p(d) / q(d)), else draw
// from norm(max(p - q, 0))" keeps d with probability p(d) and otherwise draws from p without
// d, renormalised, which is exactly what one draw from p compared with d does. So each kept
// token has the plain distribution; and since a kept token costs the sampler one draw on the
// same logits, seeded output equals plain seeded output token for token. A drafter with a
// distribution of its own (a draft model sampling at temperature > 0) would need the general
// rule.
#pragma once

#include <cstdint>
#include <span>

namespace deepinfer::speculative {

struct Verified {
  int32_t n_tokens = 0;    // written to out: the accepted draft prefix, then the target's own
  int32_t n_accepted = 0;  // draft tokens kept
};

// `out` holds draft.size() + 1 tokens.
template <typename Draw>
Verified verify_draft(std::span<const int32_t> draft, std::span<int32_t> out, Draw&& draw) {
  Verified v;
  const auto n_draft = static_cast<int32_t>(draft.size());
  for (int32_t i = 0; i <= n_draft; ++i) {
    bool ends = false;
    const int32_t token = draw(i, &ends);
    out[static_cast<size_t>(v.n_tokens++)] = token;
    const bool accepted = i < n_draft && token == draft[static_cast<size_t>(i)];
    if (accepted) ++v.n_accepted;
    if (!accepted || ends) break;
  }
  return v;
}

}  // namespace deepinfer::speculative
