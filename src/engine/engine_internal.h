// Engine creation with a hook on its backend, for tests that need to see a backend fail (a
// wrapper that fails chosen steps, say) and for tools that wrap a backend to measure it.
// Internal: the public header exposes no backend types.
#pragma once

#include <functional>
#include <memory>

#include "backend/backend.h"
#include "deepinfer/engine.h"

namespace deepinfer {

using BackendWrapper = std::function<std::unique_ptr<backend::Backend>(std::unique_ptr<backend::Backend>)>;

// Engine::create, with the backend named by config.backend passed through `wrap` before the
// model loads on it.
Result<std::unique_ptr<Engine>> create_engine(const EngineConfig& config, const BackendWrapper& wrap);

}  // namespace deepinfer
