// Sampling parameters of one request, with the defaults and ranges of the OpenAI API and vLLM.
//
// Order of application (vLLM's): logit_bias is added to the raw logits; min_tokens masks the
// stop tokens (EOS and stop_token_ids) until that many tokens were generated; the repetition
// penalty (prompt and output tokens), then the frequency and presence penalties (output tokens
// only); then temperature, top-k, top-p and min-p; then one draw. Logprobs report the raw model
// distribution (log-softmax of the logits before any of this), as vLLM does by default.
//
// A constraint (structured output) comes before all of that: tokens the grammar does not allow
// next get -inf first, so penalties, temperature and the filters only ever see allowed tokens.
// It outranks min_tokens: where the grammar allows only a stop, the stop is taken.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace deepinfer {

// What the generated text must be (docs/structured-output.md): a whole match of a regular
// expression, a JSON text valid against a JSON Schema, a sentence of a GBNF grammar (start rule
// `root`), or exactly one of a list of strings. Plain text here: the engine compiles it.
enum class ConstraintKind { kNone, kRegex, kJsonSchema, kGbnf, kChoice };

struct Constraint {
  ConstraintKind kind = ConstraintKind::kNone;
  std::string text;                  // the regex, the schema (JSON text) or the GBNF grammar
  std::vector<std::string> choices;  // kChoice
  // JSON Schema: no whitespace between JSON tokens (else up to a few bytes of it at each place).
  bool compact_json = false;
  // The grammar starts once the generated text holds this text ("</think>" ends a reasoning
  // model's thinking; a tool-call block's opening starts a call); before it, sampling is free.
  // Empty: from the first generated token.
  std::string start_after;
};

struct SamplingParams {
  float temperature = 1.0f;        // 0 = greedy (argmax, ties to the lowest id)
  int32_t top_k = 0;               // 0 or -1 = no limit
  float top_p = 1.0f;              // nucleus: smallest set with cumulative probability >= top_p
  float min_p = 0.0f;              // drop tokens whose probability is below min_p * max probability
  float presence_penalty = 0.0f;   // [-2, 2]: subtracted once from every token already generated
  float frequency_penalty = 0.0f;  // [-2, 2]: subtracted per occurrence in the generated tokens
  float repetition_penalty = 1.0f; // > 0: tokens of prompt or output: logit / p if > 0, else * p
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias in [-100, 100])
  std::optional<uint64_t> seed;    // same seed + same logits = same token sequence
  int64_t min_tokens = 0;          // stop tokens are impossible before this many generated
  bool ignore_eos = false;         // the tokenizer's end-of-generation ids do not stop
  int32_t logprobs = -1;           // < 0: none; 0: the sampled token's; k <= 20: plus the top k
  int32_t prompt_logprobs = -1;    // the same for each prompt position after the first
  Constraint constraint;           // kNone: unconstrained
};

}  // namespace deepinfer
