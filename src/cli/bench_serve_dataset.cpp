#include "cli/bench_serve_dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <unordered_map>

namespace deepinfer::cli {

namespace {

// Short common words: one token each in the vocabularies of the usual BPE tokenizers, so the
// first guess at a length is close and the cut takes one correction at most.
constexpr const char* kWords[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
    "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they",
    "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more",
    "when", "will", "would", "who", "so", "no", "out", "up", "into", "do", "any", "time", "about",
    "only", "new", "some", "could", "them", "these", "may", "its", "first", "then", "two", "like",
    "other", "over", "such", "man", "our", "made", "after", "also", "did", "many", "most", "before",
    "must", "through", "years", "where", "much", "way", "well", "down", "should", "because", "each",
    "just", "those", "people", "how", "too", "little", "state", "good", "very", "make", "world",
    "still", "own", "see", "work", "long", "get", "here", "between", "both", "life", "being", "under",
    "never", "day", "same", "another", "know", "while", "last", "might", "us", "great", "old", "year",
    "off", "come", "since", "against", "go", "came", "right", "used", "take", "three", "water", "light",
    "house", "small", "city", "road", "river", "music", "paper", "table", "green", "stone", "winter"};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

std::string random_words(size_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, kNumWords - 1);
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out.push_back(' ');
    out += kWords[pick(rng)];
  }
  return out;
}

class WordCounter final : public TokenCounter {
 public:
  WordCounter() {
    for (size_t i = 0; i < kNumWords; ++i) index_[kWords[i]] = static_cast<int32_t>(i);
  }
  Result<std::vector<int32_t>> tokenize(const std::string& text) override {
    std::vector<int32_t> ids;
    std::istringstream in(text);
    std::string word;
    while (in >> word) {
      auto it = index_.find(word);
      ids.push_back(it == index_.end() ? -1 : it->second);
    }
    return ids;
  }
  Result<std::string> detokenize(const std::vector<int32_t>& ids) override {
    std::string out;
    for (int32_t id : ids) {
      if (id < 0 || static_cast<size_t>(id) >= kNumWords) return invalid_argument("not a word id");
      if (!out.empty()) out.push_back(' ');
      out += kWords[id];
    }
    return out;
  }
  bool exact() const override { return false; }

 private:
  std::unordered_map<std::string, int32_t> index_;
};

// Uniform in [floor(n (1 - r)), ceil(n (1 + r))], at least `floor_at` (vLLM's random lengths).
int64_t ranged_length(int64_t n, double ratio, std::mt19937_64& rng, int64_t floor_at = 1) {
  const int64_t lo = std::max<int64_t>(floor_at, static_cast<int64_t>(std::floor(static_cast<double>(n) * (1.0 - ratio))));
  const int64_t hi = std::max<int64_t>(lo, static_cast<int64_t>(std::ceil(static_cast<double>(n) * (1.0 + ratio))));
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

std::string joined(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + " " + b;
}

Result<std::vector<Job>> random_dataset(const DatasetOptions& o, PromptMaker& maker) {
  std::vector<Job> jobs;
  Prompt prefix;
  if (o.random_prefix_len > 0) {
    DI_ASSIGN_OR_RETURN(prefix, maker.make(o.random_prefix_len));
  }
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    const int64_t in_len = ranged_length(o.random_input_len, o.random_range_ratio, maker.rng());
    const int64_t out_len = ranged_length(o.random_output_len, o.random_range_ratio, maker.rng());
    DI_ASSIGN_OR_RETURN(Prompt p, maker.make(in_len));
    RequestSpec r;
    std::string text = joined(prefix.text, p.text);
    r.prompt_len = o.random_prefix_len > 0 ? prefix.n_tokens + p.n_tokens : p.n_tokens;
    r.turns = {{"user", std::move(text)}};
    r.output_len = out_len;
    jobs.push_back({-1.0, false, {std::move(r)}});
  }
  return jobs;
}

Result<std::vector<Job>> prefix_repetition_dataset(const DatasetOptions& o, PromptMaker& maker) {
  if (o.num_prefixes < 1) return invalid_argument("--prefix-repetition-num-prefixes must be >= 1");
  std::vector<Job> jobs;
  const int64_t per_prefix = (o.num_prompts + o.num_prefixes - 1) / o.num_prefixes;
  for (int64_t k = 0; k < o.num_prefixes && static_cast<int64_t>(jobs.size()) < o.num_prompts; ++k) {
    DI_ASSIGN_OR_RETURN(Prompt prefix, maker.make(o.prefix_len));
    for (int64_t j = 0; j < per_prefix && static_cast<int64_t>(jobs.size()) < o.num_prompts; ++j) {
      DI_ASSIGN_OR_RETURN(Prompt suffix, maker.make(o.suffix_len));
      RequestSpec r;
      std::string text = joined(prefix.text, suffix.text);
      r.prompt_len = prefix.n_tokens + suffix.n_tokens;
      r.turns = {{"user", std::move(text)}};
      r.output_len = o.prefix_output_len;
      jobs.push_back({-1.0, false, {std::move(r)}});
    }
  }
  std::shuffle(jobs.begin(), jobs.end(), maker.rng());
  return jobs;
}

// Log-normal lengths with medians and spreads in the range of ShareGPT's conversations after
// vLLM's filter (prompt 4..1024 tokens, prompt + reply at most 2048).
Result<std::vector<Job>> sharegpt_dataset(const DatasetOptions& o, PromptMaker& maker) {
  std::lognormal_distribution<double> prompt_len(std::log(160.0), 0.9), reply_len(std::log(180.0), 0.8);
  std::uniform_int_distribution<int> exchanges(0, 2);
  std::vector<Job> jobs;
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    const int64_t in_len = std::clamp<int64_t>(std::llround(prompt_len(maker.rng())), 4, 1024);
    int64_t out_len = o.sharegpt_output_len > 0 ? o.sharegpt_output_len
                                                : std::clamp<int64_t>(std::llround(reply_len(maker.rng())), 4, 1024);
    out_len = std::min(out_len, 2048 - in_len);
    // Earlier exchanges share the prompt's length: 2e + 1 messages of about in_len / (2e + 1).
    const int e = exchanges(maker.rng());
    const int64_t n_messages = 2 * e + 1;
    RequestSpec r;
    for (int64_t m = 0; m < n_messages; ++m) {
      const int64_t len = std::max<int64_t>(1, in_len / n_messages + (m == n_messages - 1 ? in_len % n_messages : 0));
      DI_ASSIGN_OR_RETURN(Prompt p, maker.make(len));
      r.prompt_len += p.n_tokens;
      r.turns.push_back({m % 2 == 0 ? "user" : "assistant", std::move(p.text)});
    }
    r.output_len = out_len;
    jobs.push_back({-1.0, false, {std::move(r)}});
  }
  return jobs;
}

Result<std::vector<Job>> multi_turn_dataset(const DatasetOptions& o, PromptMaker& maker) {
  if (o.num_turns < 1) return invalid_argument("--multi-turn-num-turns must be >= 1");
  std::vector<Job> jobs;
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    Job job{-1.0, true, {}};
    for (int64_t t = 0; t < o.num_turns; ++t) {
      DI_ASSIGN_OR_RETURN(Prompt p, maker.make(ranged_length(o.random_input_len, o.random_range_ratio, maker.rng())));
      RequestSpec r;
      r.prompt_len = p.n_tokens;  // the new turn's; the runner adds the conversation before it
      r.turns = {{"user", std::move(p.text)}};
      r.output_len = ranged_length(o.random_output_len, o.random_range_ratio, maker.rng());
      job.requests.push_back(std::move(r));
    }
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Result<std::vector<Job>> mooncake_dataset(const DatasetOptions& o, PromptMaker& maker) {
  if (o.dataset_path.empty()) return invalid_argument("--dataset-name mooncake needs --dataset-path TRACE.jsonl");
  if (o.trace_block_tokens < 1) return invalid_argument("--trace-block-tokens must be >= 1");
  std::ifstream in(o.dataset_path);
  if (!in) return not_found("--dataset-path: cannot read '" + o.dataset_path + "'");
  const double scale = static_cast<double>(o.trace_block_tokens) / 512.0;
  std::map<std::pair<int64_t, int64_t>, Prompt> blocks;  // (hash id, tokens) -> its text
  std::vector<Job> jobs;
  std::string line;
  double t0 = -1.0;
  for (int64_t line_no = 1; static_cast<int64_t>(jobs.size()) < o.num_prompts && std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto entry = server::bench::parse_trace_line(line);
    if (!entry.ok()) return invalid_argument(o.dataset_path + ":" + std::to_string(line_no) + ": " + entry.status().message());
    const int64_t in_len = std::max<int64_t>(1, std::llround(static_cast<double>(entry->input_length) * scale));
    const int64_t out_len = std::max<int64_t>(1, std::llround(static_cast<double>(entry->output_length) * scale));
    const int64_t b = o.trace_block_tokens;
    std::string text;
    int64_t left = in_len;
    for (size_t k = 0; k < entry->hash_ids.size() && left > 0; ++k) {
      const int64_t len = k + 1 == entry->hash_ids.size() ? left : std::min(left, b);
      auto key = std::make_pair(entry->hash_ids[k], len);
      auto it = blocks.find(key);
      if (it == blocks.end()) {
        DI_ASSIGN_OR_RETURN(Prompt p, maker.make_keyed(len, o.seed * 1000003u + static_cast<uint64_t>(entry->hash_ids[k])));
        it = blocks.emplace(key, std::move(p)).first;
      }
      text = joined(text, it->second.text);
      left -= len;
    }
    if (left > 0) {  // no hash ids, or fewer than the length needs: unshared text for the rest
      DI_ASSIGN_OR_RETURN(Prompt p, maker.make(left));
      text = joined(text, p.text);
    }
    if (t0 < 0) t0 = entry->timestamp_ms;
    RequestSpec r;
    DI_ASSIGN_OR_RETURN(r.prompt_len, maker.count(text));
    r.turns = {{"user", std::move(text)}};
    r.output_len = out_len;
    jobs.push_back({(entry->timestamp_ms - t0) / 1000.0, false, {std::move(r)}});
  }
  if (jobs.empty()) return invalid_argument("--dataset-path: '" + o.dataset_path + "' has no requests");
  std::stable_sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.arrival < b.arrival; });
  return jobs;
}

}  // namespace

std::unique_ptr<TokenCounter> make_word_counter() { return std::make_unique<WordCounter>(); }

Result<Prompt> PromptMaker::make(int64_t n_tokens) { return make_with(n_tokens, rng_); }

Result<Prompt> PromptMaker::make_keyed(int64_t n_tokens, uint64_t key) {
  std::mt19937_64 rng(key);
  return make_with(n_tokens, rng);
}

Result<int64_t> PromptMaker::count(const std::string& text) {
  DI_ASSIGN_OR_RETURN(std::vector<int32_t> ids, counter_.tokenize(text));
  return static_cast<int64_t>(ids.size());
}

Result<Prompt> PromptMaker::make_with(int64_t n_tokens, std::mt19937_64& rng) {
  if (n_tokens < 1) return invalid_argument("a prompt needs at least one token");
  const size_t target = static_cast<size_t>(n_tokens);
  std::string text = random_words(target + target / 4 + 8, rng);
  std::vector<int32_t> ids;
  for (int tries = 0;; ++tries) {
    DI_ASSIGN_OR_RETURN(ids, counter_.tokenize(text));
    if (ids.size() >= target) break;
    if (tries == 8) return internal_error("the tokenizer gives too few tokens for random words");
    text.push_back(' ');
    text += random_words(target - ids.size() + 8, rng);
  }
  Prompt best;
  size_t cut = target;
  for (int fix = 0; fix < 5; ++fix) {
    std::vector<int32_t> head(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(cut));
    DI_ASSIGN_OR_RETURN(std::string candidate, counter_.detokenize(head));
    DI_ASSIGN_OR_RETURN(int64_t got, count(candidate));
    if (best.text.empty() || std::llabs(got - n_tokens) < std::llabs(best.n_tokens - n_tokens)) best = {candidate, got};
    if (got == n_tokens) break;
    // The round trip merged or split tokens at the cut: move the cut by the difference.
    const int64_t next = static_cast<int64_t>(cut) + (n_tokens - got);
    if (next < 1 || next > static_cast<int64_t>(ids.size())) break;
    cut = static_cast<size_t>(next);
  }
  return best;
}

Result<std::vector<Job>> make_dataset(const DatasetOptions& options, TokenCounter& counter) {
  if (options.num_prompts < 1) return invalid_argument("--num-prompts must be >= 1");
  PromptMaker maker(counter, options.seed);
  const std::string& name = options.name;
  if (name == "random") return random_dataset(options, maker);
  if (name == "prefix-repetition") return prefix_repetition_dataset(options, maker);
  if (name == "sharegpt") return sharegpt_dataset(options, maker);
  if (name == "multi-turn") return multi_turn_dataset(options, maker);
  if (name == "mooncake") return mooncake_dataset(options, maker);
  return invalid_argument("--dataset-name: unknown dataset '" + name +
                          "' (random, prefix-repetition, sharegpt, multi-turn, mooncake)");
}

std::vector<double> arrival_times(size_t n, double rate, double burstiness, uint64_t seed) {
  std::vector<double> at(n, 0.0);
  if (n == 0 || !std::isfinite(rate)) return at;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  double t = 0.0;
  for (size_t i = 0; i < n; ++i) {
    t += std::isfinite(burstiness) ? gap(rng) : 1.0 / rate;
    at[i] = t;
  }
  // vLLM rescales so that the n-th arrival is at n / rate: runs of different seeds then take the
  // same time, and their throughputs compare.
  const double factor = (static_cast<double>(n) / rate) / at.back();
  for (double& v : at) v *= factor;
  return at;
}

}  // namespace deepinfer::cli
