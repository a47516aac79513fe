// The sampling flags of the commands that generate for one user at a time (run, chat): how
// many tokens, temperature, top-k, top-p, min-p, seed and ignore-eos, with llama.cpp's defaults
// (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05) rather than the API's.
#pragma once

#include <cstdint>

#include "cli/args.h"
#include "deepinfer/sampling_params.h"
#include "deepinfer/status.h"

namespace deepinfer::cli {

struct SamplingFlags {
  SamplingParams params;
  int64_t max_tokens = 256;
};

void add_sampling_flags(FlagSpec& spec);

extern const char* const kSamplingFlagsUsage;

// INVALID_ARGUMENT naming the flag or the parameter (the engine's own ranges).
Result<SamplingFlags> parse_sampling_flags(const Args& args);

}  // namespace deepinfer::cli
