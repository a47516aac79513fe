// deepinfer score: teacher-forced log-probabilities of given token ids, as JSON.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/loading.h"

namespace deepinfer::cli {

namespace {

const char* kScoreUsage = R"(usage: deepinfer score [-m MODEL] --tokens 1,2,3 [--top K] [--logits-last] --json
  Prints, for every position p, the log-probability of token p+1 under the model's next-token
  distribution at p, the argmax token id, and the top-K (id, logprob) pairs.
  --top K          pairs per position (default 5, at most the vocabulary size)
  --logits-last    add the full logit vector of the last position
  --threads N      CPU threads (default: all cores)
)";

// log_softmax of `logits` into `out` (double accumulation for the normaliser).
void log_softmax(std::span<const float> logits, std::vector<float>& out) {
  float m = -INFINITY;
  for (float l : logits) m = std::max(m, l);
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - m));
  const float log_z = m + static_cast<float>(std::log(sum));
  out.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - log_z;
}

}  // namespace

int score_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.with_value = {"--model", "--tokens", "--top", "--threads"};
  spec.switches = {"--json", "--logits-last", "--help"};
  spec.aliases = {{"-m", "--model"}, {"-t", "--threads"}, {"-h", "--help"}};
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kScoreUsage, 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(kScoreUsage, stdout);
    return 0;
  }
  if (!args.has("--tokens")) return fail(std::string("--tokens is required\n") + kScoreUsage, 2);
  if (!args.has("--json")) return fail("score writes JSON only; pass --json", 2);
  auto tokens = parse_token_list(*args.get("--tokens"), "--tokens");
  if (!tokens.ok()) return fail(tokens.status().message(), 2);
  auto top = args.get_int("--top", 5);
  auto threads = args.get_int("--threads", ThreadPool::default_threads());
  if (!top.ok()) return fail(top.status().message(), 2);
  if (!threads.ok()) return fail(threads.status().message(), 2);
  if (*top < 0) return fail("--top must be >= 0", 2);
  if (*threads < 1 || *threads > 1024) return fail("--threads must be between 1 and 1024", 2);

  auto loaded = load_model(args.get("--model"), static_cast<int>(*threads));
  if (!loaded.ok()) return fail(loaded.status().message());
  const Model& model = *loaded->model;
  const int64_t n_vocab = model.config().n_vocab;
  const int64_t k = std::min<int64_t>(*top, n_vocab);
  const auto& ids = *tokens;
  auto context = model.new_context(static_cast<int64_t>(ids.size()));
  if (!context.ok()) return fail(context.status().message());
  Status st = (*context)->eval(ids, LogitsMode::kAll);
  if (!st.ok()) return fail(st.message(), st.code() == StatusCode::kInvalidArgument ? 2 : 1);

  nlohmann::json positions = nlohmann::json::array();
  std::vector<float> lp;
  std::vector<int32_t> order(static_cast<size_t>(n_vocab));
  for (size_t p = 0; p < ids.size(); ++p) {
    log_softmax((*context)->logits(static_cast<int64_t>(p)), lp);
    for (int32_t i = 0; i < n_vocab; ++i) order[static_cast<size_t>(i)] = i;
    std::partial_sort(order.begin(), order.begin() + std::max<int64_t>(k, 1), order.end(),
                      [&](int32_t a, int32_t b) { return lp[a] > lp[b] || (lp[a] == lp[b] && a < b); });
    nlohmann::json entry;
    entry["position"] = p;
    entry["token"] = ids[p];
    if (p + 1 < ids.size()) {
      entry["next_token"] = ids[p + 1];
      entry["next_logprob"] = lp[static_cast<size_t>(ids[p + 1])];
    } else {
      entry["next_token"] = nullptr;
      entry["next_logprob"] = nullptr;
    }
    entry["argmax"] = order[0];
    nlohmann::json top_pairs = nlohmann::json::array();
    for (int64_t i = 0; i < k; ++i) top_pairs.push_back({order[i], lp[order[i]]});
    entry["top"] = std::move(top_pairs);
    positions.push_back(std::move(entry));
  }
  nlohmann::json out;
  out["model"] = loaded->path;
  out["n_vocab"] = n_vocab;
  out["positions"] = std::move(positions);
  if (args.has("--logits-last")) {
    auto last = (*context)->logits(static_cast<int64_t>(ids.size()) - 1);
    out["logits_last"] = std::vector<float>(last.begin(), last.end());
  }
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace deepinfer::cli
