// The datasets of `deepinfer bench serve`: prompts of given token lengths, made of random
// English words and cut to length with the server's own tokenizer (its /tokenize and
// /detokenize), so that a 1024-token prompt is 1024 tokens for the model under test; the
// arrival times of the requests (Poisson, gamma with a burstiness factor, or a trace's).
//
//   random             input and output lengths uniform in [L (1 - r), L (1 + r)] (vLLM's
//                      --random-range-ratio r), after an optional shared prefix
//   prefix-repetition  --prefix-repetition-num-prefixes prefixes of a given length, each the start
//                      of an equal share of the prompts, then a unique suffix; shuffled
//   sharegpt           synthetic conversations shaped like ShareGPT's: log-normal prompt and reply
//                      lengths, zero to two earlier exchanges before the last user message
//   multi-turn         sessions of --multi-turn-num-turns user turns, each sent after the last
//                      reply came back, with the whole conversation so far (the context grows)
//   mooncake           a Mooncake FAST'25 trace (--dataset-path): its timestamps, lengths and
//                      512-token prefix blocks (equal hash ids, equal text)
//
// Not thread-safe: datasets are made before the run starts.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "server/bench_protocol.h"

namespace deepinfer::cli {

using Turn = server::bench::Turn;

// Counts and cuts tokens the way the server does. exact() is false for the estimate used when a
// server has no /tokenize (one token per word).
class TokenCounter {
 public:
  virtual ~TokenCounter() = default;
  virtual Result<std::vector<int32_t>> tokenize(const std::string& text) = 0;
  virtual Result<std::string> detokenize(const std::vector<int32_t>& ids) = 0;
  virtual bool exact() const = 0;
};

// The estimate: every word of the generator's vocabulary is one token.
std::unique_ptr<TokenCounter> make_word_counter();

struct Prompt {
  std::string text;
  int64_t n_tokens = 0;  // as counted by the TokenCounter
};

// Random-word text cut to an exact token count.
class PromptMaker {
 public:
  PromptMaker(TokenCounter& counter, uint64_t seed) : counter_(counter), rng_(seed) {}
  // Text of n tokens: random words, tokenized, cut to n ids, detokenized, checked (a cut can
  // merge at the boundary; up to four corrections). The count is the one measured last.
  Result<Prompt> make(int64_t n_tokens);
  // make() with a generator of its own seeded by `key`: the same key, the same text.
  Result<Prompt> make_keyed(int64_t n_tokens, uint64_t key);
  Result<int64_t> count(const std::string& text);
  std::mt19937_64& rng() { return rng_; }

 private:
  Result<Prompt> make_with(int64_t n_tokens, std::mt19937_64& rng);

  TokenCounter& counter_;
  std::mt19937_64 rng_;
};

// One request of a job. For a chained job (multi-turn) `turns` is the new user turn only: the
// runner sends the conversation so far before it.
struct RequestSpec {
  std::vector<Turn> turns;
  int64_t prompt_len = 0;
  int64_t output_len = 0;
};

// What one arrival starts: one request, or a session of requests sent one after another.
struct Job {
  double arrival = -1.0;  // seconds from the start as a trace gives it; -1: from the arrival process
  bool chained = false;
  std::vector<RequestSpec> requests;
};

struct DatasetOptions {
  std::string name = "random";
  int64_t num_prompts = 1000;
  uint64_t seed = 0;
  int64_t random_input_len = 1024, random_output_len = 128, random_prefix_len = 0;
  double random_range_ratio = 0.0;
  int64_t prefix_len = 256, suffix_len = 256, num_prefixes = 10, prefix_output_len = 128;
  int64_t sharegpt_output_len = 0;  // 0: from the length distribution
  int64_t num_turns = 4;            // multi-turn: user turns per session (random lengths per turn)
  std::string dataset_path;
  int64_t trace_block_tokens = 512;  // mooncake: tokens per hash id; lengths scale by this / 512
};

// The jobs, in arrival order for a trace and in dataset order otherwise. `num_prompts` counts
// jobs (sessions for multi-turn).
Result<std::vector<Job>> make_dataset(const DatasetOptions& options, TokenCounter& counter);

// Send times, in seconds from the start, of n arrivals at `rate` per second: gamma-distributed
// gaps of shape `burstiness` and mean 1/rate (burstiness 1: a Poisson process), rescaled so that
// the last arrival is at n / rate, as vLLM does. rate infinite: all at 0.
std::vector<double> arrival_times(size_t n, double rate, double burstiness, uint64_t seed);

}  // namespace deepinfer::cli
