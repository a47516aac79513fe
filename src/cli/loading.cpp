#include "cli/loading.h"

#include <chrono>

#include "model/catalog.h"

namespace deepinfer::cli {

Result<LoadedModel> load_model(const std::optional<std::string>& model_arg, int threads) {
  const auto start = std::chrono::steady_clock::now();
  LoadedModel out;
  DI_ASSIGN_OR_RETURN(out.path, resolve_model_path(model_arg ? *model_arg : std::string(kDefaultModelName)));
  out.pool = std::make_unique<ThreadPool>(threads);
  DI_ASSIGN_OR_RETURN(out.backend, backend::create_backend("cpu", backend::BackendOptions{out.pool.get()}));
  DI_ASSIGN_OR_RETURN(out.model, Model::load(out.path, *out.backend));
  const Metadata& md = out.model->source().metadata();
  if (md.has("tokenizer.ggml.tokens")) {
    auto tok = Tokenizer::from_metadata(md);
    if (!tok.ok()) return Status(tok.status().code(), out.path + ": " + tok.status().message());
    out.tokenizer = std::move(tok).value();
  }
  out.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return out;
}

Result<KvCacheDtype> parse_kv_cache_dtype(const std::optional<std::string>& value) {
  if (!value || *value == "f16") return KvCacheDtype::kF16;
  if (*value == "f32") return KvCacheDtype::kF32;
  return invalid_argument("--kv-cache-dtype must be f16 or f32, got '" + *value + "'");
}

}  // namespace deepinfer::cli
