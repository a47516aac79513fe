#include "cli/sampling_flags.h"

#include <limits>

#include "engine/sampler.h"

namespace deepinfer::cli {

const char* const kSamplingFlagsUsage = R"(sampling options:
  -n, --max-tokens N     tokens to generate at most (default 256)
  --temp T               temperature, 0 = greedy (default 0.8)
  --top-k K              (default 40)    --top-p P (default 0.95)    --min-p P (default 0.05)
  --seed S               random seed
  --ignore-eos           keep generating past end-of-generation tokens
)";

void add_sampling_flags(FlagSpec& spec) {
  spec.with_value.insert({"--max-tokens", "--temp", "--top-k", "--top-p", "--min-p", "--seed"});
  spec.switches.insert("--ignore-eos");
  spec.aliases.insert({{"-n", "--max-tokens"}, {"--temperature", "--temp"}});
}

Result<SamplingFlags> parse_sampling_flags(const Args& args) {
  SamplingFlags out;
  DI_ASSIGN_OR_RETURN(out.max_tokens, args.get_int("--max-tokens", out.max_tokens));
  DI_ASSIGN_OR_RETURN(const double temp, args.get_float("--temp", 0.8));
  DI_ASSIGN_OR_RETURN(const int64_t top_k, args.get_int("--top-k", 40));
  DI_ASSIGN_OR_RETURN(const double top_p, args.get_float("--top-p", 0.95));
  DI_ASSIGN_OR_RETURN(const double min_p, args.get_float("--min-p", 0.05));
  DI_ASSIGN_OR_RETURN(const int64_t seed, args.get_int("--seed", -1));
  if (out.max_tokens < 1) return invalid_argument("-n must be at least 1, got " + std::to_string(out.max_tokens));
  if (top_k < -1 || top_k > std::numeric_limits<int32_t>::max()) {
    return invalid_argument("--top-k must be -1, 0 or a positive count, got " + std::to_string(top_k));
  }
  SamplingParams& p = out.params;
  p.temperature = static_cast<float>(temp);
  p.top_k = static_cast<int32_t>(top_k);
  p.top_p = static_cast<float>(top_p);
  p.min_p = static_cast<float>(min_p);
  if (seed >= 0) p.seed = static_cast<uint64_t>(seed);
  p.ignore_eos = args.has("--ignore-eos");
  // No logit_bias here, so the vocabulary size does not matter: checked before the model loads.
  DI_RETURN_IF_ERROR(Sampler::validate(p, std::numeric_limits<int32_t>::max()));
  return out;
}

}  // namespace deepinfer::cli
