// The recipe on its own over HTTP, for the web UI's visualiser (web/recipe.html) and for anyone
// who wants to see what the server would do with a request without generating:
//   POST /v1/render  a protocol request -> the prompt the model would receive, cut into text and
//                    control-token spans, and its token ids with their bytes;
//   POST /v1/parse   raw model output -> the protocol's complete response and its SSE events.
// Both run the code the generating endpoints run (the adapters, PromptBuilder's steps,
// recipe::respond); docs/server.md describes the bodies. A request the recipe refuses is not an
// error of these endpoints: the answer is 200 with {"rejected": {"status", "message"}}, what
// the generating endpoint would have answered.
//
// Thread-safe: everything is immutable but the DeepSeek tokenizer, which a server of another
// model loads from the model cache on the first DeepSeek render that asks for ids.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "recipe/protocol.h"
#include "server/api_prompt.h"
#include "server/http.h"

namespace deepinfer::server {

class RecipeApi {
 public:
  // `served` is what the generating endpoints use: the served model's prompts and options.
  RecipeApi(const PromptBuilder& prompts, recipe::ConversionOptions served);

  void render(const HttpRequest& request, ResponseWriter& out) const;
  void parse(const HttpRequest& request, ResponseWriter& out) const;

 private:
  // The tokenizer of a DeepSeek V4 vocabulary: the served one, else the model cache's
  // deepseek-v4-tokenizer; null (with the reason in *why) when there is none.
  std::shared_ptr<const Tokenizer> deepseek_tokenizer(std::string* why) const;

  const PromptBuilder& prompts_;
  recipe::ConversionOptions served_;
  mutable std::mutex mutex_;  // guards the two below
  mutable bool tried_cache_ = false;
  mutable std::shared_ptr<const Tokenizer> cached_deepseek_;
  mutable std::string cache_error_;
};

}  // namespace deepinfer::server
