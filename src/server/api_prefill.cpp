// Prefill/decode roles: a prefill request (the router's, marked by x-deepinfer-prefill-only)
// runs its prompt with one output token, waits until the store has the prompt's pages and
// answers with what it computed; the decode worker then finds those pages in the shared store
// and computes only the prompt's tail (and, for a sliding-window model, replays the window).
// The body is the client's request as it is, so both workers render the same prompt.
#include <nlohmann/json.hpp>

#include "server/api_common.h"
#include "server/api_server.h"

namespace deepinfer::server {

std::shared_ptr<RequestHandle> ApiServer::submit(const HttpRequest& request, GenerationRequest generation,
                                                 ApiFlavor flavor, ResponseWriter& out) {
  const bool prefill = request.header(kPrefillOnlyHeader) != nullptr;
  if (prefill && config_.role == WorkerRole::kDecode) {
    send_error(out, flavor, {400, "this server is a decode worker (--role decode): prefill requests go to a prefill worker", "", ""});
    return nullptr;
  }
  if (!prefill && config_.role == WorkerRole::kPrefill) {
    send_error(out, flavor,
               {400, "this server is a prefill worker (--role prefill): send requests to the router or a decode worker", "", ""});
    return nullptr;
  }
  if (prefill) {
    prefill_only(std::move(generation), flavor, out);
    return nullptr;
  }
  return submit_or_answer(engine_, std::move(generation), flavor, out);
}

void ApiServer::prefill_only(GenerationRequest generation, ApiFlavor flavor, ResponseWriter& out) {
  if (config_.engine.kv_store_dir.empty()) {
    send_error(out, flavor, {400, "a prefill request needs a server with --kv-store (the store carries its KV pages)", "", ""});
    return;
  }
  // One token: the prompt's last position is computed with it, so every whole page is done.
  generation.max_tokens = 1;
  generation.n = 1;
  generation.stop.clear();
  generation.sampling.logprobs = -1;
  auto handle = submit_or_answer(engine_, std::move(generation), flavor, out);
  if (!handle) return;
  int64_t prompt_tokens = 0, cached_tokens = 0;
  TokenEvent event;
  for (;;) {
    if (out.client_gone()) {
      handle->cancel();
      return;
    }
    const WaitStatus status = handle->next_for(config_.poll_interval, &event);
    if (status == WaitStatus::kEnd) break;
    if (status == WaitStatus::kTimeout) continue;
    if (event.finish == FinishReason::kError) {
      send_error(out, flavor, {500, "prefill failed: " + event.error, "", ""});
      return;
    }
    if (event.n_prompt_tokens > 0) {
      prompt_tokens = event.n_prompt_tokens;
      cached_tokens = event.n_cached_prompt_tokens;
    }
  }
  engine_.flush_kv_store();
  nlohmann::json body = {{"object", "prefill"}, {"prompt_tokens", prompt_tokens}, {"cached_tokens", cached_tokens}};
  out.send(200, "application/json", body.dump());
}

}  // namespace deepinfer::server
