#include "server/api_errors.h"

#include <nlohmann/json.hpp>

namespace deepinfer::server {

namespace {

const char* openai_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

const char* anthropic_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

}  // namespace

ApiFlavor flavor_of_path(std::string_view path) {
  return path.starts_with("/v1/messages") ? ApiFlavor::kAnthropic : ApiFlavor::kOpenAi;
}

std::string error_json(ApiFlavor flavor, const ApiError& error) {
  using Json = nlohmann::ordered_json;
  Json j;
  if (flavor == ApiFlavor::kAnthropic) {
    j["type"] = "error";
    j["error"] = {{"type", anthropic_type(error.status)}, {"message", error.message}};
  } else {
    const char* type = openai_type(error.status);
    j["error"] = {{"message", error.message},
                  {"type", type},
                  {"param", error.param.empty() ? Json() : Json(error.param)},
                  {"code", error.code.empty() ? Json(type) : Json(error.code)}};
  }
  // Messages may quote client bytes that are not UTF-8; replace rather than throw.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

ApiError api_error_from(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      return {400, status.message(), "", ""};
    case StatusCode::kOutOfRange:
      return {400, status.message(), "context_length_exceeded", "messages"};
    case StatusCode::kResourceExhausted:
      return {429, status.message(), "", ""};
    case StatusCode::kUnavailable:
      return {503, status.message(), "", ""};
    default:
      return {500, status.message(), "", ""};
  }
}

}  // namespace deepinfer::server
