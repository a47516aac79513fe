// Model and tokenizer loading shared by the commands.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "deepinfer/engine.h"
#include "deepinfer/status.h"
#include "engine/kv_cache_dtype.h"
#include "backend/backend.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {

struct LoadedModel {
  std::string path;
  std::unique_ptr<ThreadPool> pool;           // the backend's threads
  std::unique_ptr<backend::Backend> backend;  // the model's weights live here
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the model carries no tokenizer
  double load_ms = 0.0;
};

// `model_arg` is a path or a known model name; none means the default model. Loaded on the CPU
// backend with `threads` threads.
Result<LoadedModel> load_model(const std::optional<std::string>& model_arg, int threads);

// The value of --kv-cache-dtype ("f16" or "f32"; none: f16).
Result<KvCacheDtype> parse_kv_cache_dtype(const std::optional<std::string>& value);

}  // namespace deepinfer::cli
