#pragma once

#include <string_view>

namespace deepinfer::server {

// What a server does in a prefill/decode split (docs/deployment.md, "Prefill and decode"):
// kPrefill answers only the router's prefill requests (x-deepinfer-prefill-only), which
// compute a prompt, write its KV pages to the shared store and answer once they are written;
// kDecode answers only ordinary requests, taking the prompt's pages from the store; kBoth does
// either.
enum class WorkerRole { kBoth, kPrefill, kDecode };
inline constexpr std::string_view kPrefillOnlyHeader = "x-deepinfer-prefill-only";

}  // namespace deepinfer::server
