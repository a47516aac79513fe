// Engine::create for a caller that loaded the model's tokenizer itself (tokenizer_loading.h):
// the server renders prompts with it, the CLI encodes them, and the engine detokenizes with the
// same object instead of loading a second copy. `tokenizer` must be the one load_tokenizer()
// gives for config.model_path; null: the model carries none (events then have no text and stop
// strings are rejected). Engine::create(config) is this with that tokenizer loaded for it.
#pragma once

#include <memory>

#include "deepinfer/engine.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

Result<std::unique_ptr<Engine>> create_engine(const EngineConfig& config, std::shared_ptr<const Tokenizer> tokenizer);

}  // namespace deepinfer
