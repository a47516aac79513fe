// Error bodies of the API server in each protocol's shape. OpenAI paths answer
// {"error":{"message","type","param","code"}}; Anthropic paths (/v1/messages...) answer
// {"type":"error","error":{"type","message"}}. The HTTP status picks the error type, so the
// transport's own errors (401, 404, 413, ...) and the endpoints' errors look alike.
#pragma once

#include <string>
#include <string_view>

#include "deepinfer/status.h"

namespace deepinfer::server {

enum class ApiFlavor { kOpenAi, kAnthropic };

// Anthropic's shape for /v1/messages and below, OpenAI's everywhere else.
ApiFlavor flavor_of_path(std::string_view path);

struct ApiError {
  int status = 400;
  std::string message;
  std::string code;   // OpenAI "code" (empty: the type's default); ignored by Anthropic
  std::string param;  // OpenAI "param" (empty: null)
};

std::string error_json(ApiFlavor flavor, const ApiError& error);

// A Status from the recipe or the engine as the error a client gets: INVALID_ARGUMENT and
// OUT_OF_RANGE are the client's (400), RESOURCE_EXHAUSTED is overload (429), the rest 500.
ApiError api_error_from(const Status& status);

}  // namespace deepinfer::server
