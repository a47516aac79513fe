// The one way from a model path to its tokenizer: every command, the server and the engine load
// a tokenizer through load_tokenizer(). Stateless; safe to call from any thread.
//
// `path` is a model as -m names it once resolved (model/catalog.h), or a tokenizer on its own:
//   a GGUF file              its tokenizer.ggml.* metadata (the weights are mapped, not read);
//   a directory              tokenizer.json, with tokenizer_config.json and chat_template.jinja
//                            when present (a Hugging Face checkpoint, or a tokenizer alone);
//   a *.json file            that tokenizer.json; when it is named tokenizer.json and a
//                            tokenizer_config.json lies beside it, its whole directory;
//   a *.safetensors file or  the directory's tokenizer.json, as Model::load takes that
//   a config.json file       directory's config.json.
//
// A model that carries no tokenizer (a GGUF file without tokenizer.ggml.tokens, a checkpoint
// directory without tokenizer.json) is an outcome of its own, not a broken file: with
// TokenizerPresence::kOptional the result is OK and null; with kRequired it is NOT_FOUND,
// "PATH carries no tokenizer (...)". Files that exist but cannot be read or parsed are errors
// either way, naming the file.
#pragma once

#include <memory>
#include <string>

#include "deepinfer/status.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

enum class TokenizerPresence {
  kOptional,  // no tokenizer: OK, null
  kRequired,  // no tokenizer: NOT_FOUND
};

Result<std::shared_ptr<const Tokenizer>> load_tokenizer(const std::string& path, TokenizerPresence presence);

}  // namespace deepinfer
