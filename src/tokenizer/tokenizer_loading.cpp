#include "tokenizer/tokenizer_loading.h"

#include <filesystem>
#include <system_error>

#include "model/loader/gguf.h"

namespace deepinfer {

namespace {

namespace fs = std::filesystem;

using Loaded = std::shared_ptr<const Tokenizer>;

Result<Loaded> shared(Result<std::unique_ptr<Tokenizer>> tokenizer) {
  if (!tokenizer.ok()) return tokenizer.status();
  return Loaded(std::move(tokenizer).value());
}

// The directory a file lies in ("." for a bare file name).
fs::path dir_of(const fs::path& file) { return file.has_parent_path() ? file.parent_path() : fs::path("."); }

// A directory's tokenizer.json and its companions; `path` is what the caller named.
Result<Loaded> from_directory(const fs::path& dir, const std::string& path, TokenizerPresence presence) {
  std::error_code ec;
  if (fs::exists(dir / "tokenizer.json", ec)) return shared(Tokenizer::from_hf_dir(dir.string()));
  if (presence == TokenizerPresence::kOptional) return Loaded();
  return not_found(path + " carries no tokenizer (no tokenizer.json in " + dir.string() + ")");
}

}  // namespace

Result<Loaded> load_tokenizer(const std::string& path, TokenizerPresence presence) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) return from_directory(p, path, presence);
  const std::string ext = p.extension().string();
  if (ext == ".safetensors" || p.filename() == "config.json") {
    return from_directory(dir_of(p), path, presence);
  }
  if (ext == ".json") {
    if (p.filename() == "tokenizer.json" && fs::exists(dir_of(p) / "tokenizer_config.json", ec)) {
      return shared(Tokenizer::from_hf_dir(dir_of(p).string()));
    }
    return shared(Tokenizer::from_tokenizer_json(path));
  }
  DI_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> source, open_gguf(path));
  if (!source->metadata().has("tokenizer.ggml.tokens")) {
    if (presence == TokenizerPresence::kOptional) return Loaded();
    return not_found(path + " carries no tokenizer (no tokenizer.ggml.tokens in its metadata)");
  }
  auto tokenizer = Tokenizer::from_metadata(source->metadata());
  if (!tokenizer.ok()) return Status(tokenizer.status().code(), path + ": " + tokenizer.status().message());
  return Loaded(std::move(tokenizer).value());
}

}  // namespace deepinfer
