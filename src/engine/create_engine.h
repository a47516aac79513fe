// Engine creation beyond Engine::create, for callers inside the project. Internal: the public
// header exposes no tokenizer or backend types.
//
// - A caller that loaded the model's tokenizer itself (tokenizer_loading.h) hands it over: the
//   server renders prompts with it, the CLI encodes them, and the engine detokenizes with the
//   same object instead of loading a second copy. `tokenizer` must be the one load_tokenizer()
//   gives for config.model_path; null: the model carries none (events then have no text and
//   stop strings are rejected).
// - `wrap` sees the backend named by config.backend before the model loads on it: tests that
//   need a backend to fail a step, tools that wrap one to measure it.
#pragma once

#include <functional>
#include <memory>

#include "backend/backend.h"
#include "deepinfer/engine.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

using BackendWrapper = std::function<std::unique_ptr<backend::Backend>(std::unique_ptr<backend::Backend>)>;

Result<std::unique_ptr<Engine>> create_engine(const EngineConfig& config, std::shared_ptr<const Tokenizer> tokenizer,
                                              const BackendWrapper& wrap = {});
// The same with the tokenizer loaded here.
Result<std::unique_ptr<Engine>> create_engine(const EngineConfig& config, const BackendWrapper& wrap);

}  // namespace deepinfer
