// Token sampler for one sequence: the full OpenAI/vLLM parameter set (see sampling_params.h
// for the order in which the parameters apply), seeded randomness, and logprobs.
//
// A Sampler belongs to one sequence and remembers what it needs across steps: the prompt's
// token set (repetition penalty), the generated tokens' counts (frequency and presence
// penalties), how many tokens were generated (min_tokens) and its random generator. Scratch is
// reused between calls: after the first token, sampling does not allocate.
//
// Choices where vLLM leaves room: a temperature below 1e-5 is greedy (as vLLM treats it); top-k
// keeps every token tied with the k-th (as vLLM's mask does); top-p keeps the smallest best-first
// prefix whose mass reaches top_p; orderings break ties by the lower id; a seeded sampler draws
// the same tokens on every standard library (53-bit uniforms straight from mt19937_64).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "deepinfer/engine.h"
#include "deepinfer/sampling_params.h"
#include "deepinfer/status.h"

namespace deepinfer {

class Sampler {
 public:
  // INVALID_ARGUMENT naming the parameter for anything out of range: temperature < 0 or not
  // finite, top_p outside (0, 1], min_p outside [0, 1], top_k < -1, penalties outside [-2, 2],
  // repetition_penalty <= 0, logit_bias ids outside [0, n_vocab) or biases outside [-100, 100],
  // min_tokens < 0, logprobs or prompt_logprobs above 20.
  static Status validate(const SamplingParams& params, int64_t n_vocab);

  // `stop_ids`: the ids min_tokens keeps impossible (EOS unless ignore_eos, and stop_token_ids).
  static Result<Sampler> create(const SamplingParams& params, int64_t n_vocab, std::vector<int32_t> stop_ids);

  // The prompt's tokens, for the repetition penalty. Call before the first sample().
  void set_prompt(std::span<const int32_t> prompt);

  // Picks the next token from one row of raw logits ([n_vocab]) and records it as generated.
  // `allowed` (a constraint's mask: bit id % 64 of word id / 64, at least n_vocab bits; empty:
  // every token) sets the other tokens to -inf before anything else applies. Where it allows
  // only stop tokens, min_tokens does not hold them back (the grammar has ended).
  int32_t sample(std::span<const float> logits, std::span<const uint64_t> allowed = {});

  // Whether the next sample() without a mask is the first maximum of the raw logits whatever they
  // are (greedy, no bias or penalty, and min_tokens holds back no stop id): the forward pass may
  // then choose the token itself (LogitsMode::kLastArgmax), and sample_argmax() records it.
  bool takes_raw_argmax() const;
  // The token the raw logits' first maximum names, recorded as generated; only where
  // takes_raw_argmax(): the same token sample() would have picked from those logits.
  int32_t sample_argmax(int32_t token);

  const SamplingParams& params() const { return params_; }

  static int32_t argmax(std::span<const float> logits);

 private:
  Sampler(const SamplingParams& params, int64_t n_vocab, std::vector<int32_t> stop_ids);

  bool has_penalties() const;
  // Greedy straight from the logits, with no copy, where processing them could not change the
  // first maximum (no mask, bias or penalty, and no stop id held back by min_tokens won); else -1.
  int32_t greedy_as_is(std::span<const float> logits, std::span<const uint64_t> allowed) const;
  // logits -> scratch_ (mask, bias, min_tokens, penalties)
  void process(std::span<const float> logits, std::span<const uint64_t> allowed);
  void apply_mask(std::span<const uint64_t> allowed);
  bool allows_a_non_stop(std::span<const uint64_t> allowed) const;
  int32_t draw();                               // scratch_ -> temperature, filters, one draw
  size_t collect_candidates(double mass);
  size_t collect_top_k();
  size_t nucleus(size_t n, double mass);
  double uniform();
  void record(int32_t token);

  SamplingParams params_;
  int64_t n_vocab_ = 0;
  std::vector<int32_t> stop_ids_;
  std::mt19937_64 rng_;
  // Penalty state, dense and reserved up front so that recording a token never allocates; all
  // three stay empty when no penalty is set (most requests), so a sampler costs its scratch.
  std::vector<int32_t> output_counts_;                // [n_vocab] times generated
  std::vector<uint8_t> in_prompt_;                    // [n_vocab] 1 where the prompt has the id
  std::vector<int32_t> penalized_;                    // ids in the prompt or output, each once
  int64_t n_generated_ = 0;
  std::vector<float> scratch_;                        // [n_vocab] processed logits, then weights
  std::vector<std::pair<float, int32_t>> candidates_; // (weight, token id), [n_vocab] once filtering
};

// The raw-distribution logprob of `token` in `logits` (log-softmax), its rank (1 = best; equal
// logits rank by id, the order of `top`) and the `k` most probable tokens, best first (ties:
// lower id first). `scratch` is reused.
TokenLogprob compute_logprob(std::span<const float> logits, int32_t token, int32_t k,
                             std::vector<std::pair<float, int32_t>>& scratch);

}  // namespace deepinfer
