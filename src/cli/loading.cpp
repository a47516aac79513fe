#include "cli/loading.h"

#include <chrono>

#include "core/thread_pool.h"
#include "engine/create_engine.h"
#include "tokenizer/tokenizer_loading.h"

namespace deepinfer::cli {

Result<LoadedEngine> load_engine(const EngineConfig& config) {
  const auto start = std::chrono::steady_clock::now();
  LoadedEngine out;
  DI_ASSIGN_OR_RETURN(out.tokenizer, load_tokenizer(config.model_path, TokenizerPresence::kOptional));
  DI_ASSIGN_OR_RETURN(out.engine, create_engine(config, out.tokenizer));
  out.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

int32_t engine_threads(const EngineConfig& config) {
  return config.threads > 0 ? config.threads : ThreadPool::default_threads();
}

int submit_exit_code(const Status& status) {
  return status.code() == StatusCode::kInvalidArgument || status.code() == StatusCode::kOutOfRange ? 2 : 1;
}

}  // namespace deepinfer::cli
