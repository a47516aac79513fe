// What the commands that run a model share: the tokenizer loaded once (tokenizer_loading.h) and
// handed to the engine, the load time, and the engine's settings as a user reads them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "deepinfer/engine.h"
#include "deepinfer/status.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {

struct LoadedEngine {
  std::shared_ptr<const Tokenizer> tokenizer;  // null when the model carries none
  std::unique_ptr<Engine> engine;
  double load_ms = 0.0;                        // tokenizer and engine (the model's weights)
};

// `config.model_path` is resolved (engine_flags.h's resolve_model_flag).
Result<LoadedEngine> load_engine(const EngineConfig& config);

// The threads the engine runs on: config.threads, or all cores for 0.
int32_t engine_threads(const EngineConfig& config);

// Exit code for a status from Engine::submit: 2 for what the user asked (INVALID_ARGUMENT,
// OUT_OF_RANGE), else 1.
int submit_exit_code(const Status& status);

}  // namespace deepinfer::cli
