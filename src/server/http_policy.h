// Checks on a request's head, made before any of its body is read: framing (RFC 9112), the
// Host header (DNS rebinding), the Origin (CORS) and the Content-Type. Pure functions of the
// head and the configuration; the connection decides what to answer (http_connection.cpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http.h"

namespace deepinfer::server {

// Why a request is answered without being served: its status and a message a user can act on.
struct Refusal {
  int status = 400;
  std::string message;
};

// RFC 9112 section 6: a request body's length must be unambiguous. Refused (400, and the
// connection must then close, since where the next request starts is unknown): any transfer
// coding but exactly "chunked" (gzip, identity, "chunked, identity", ...), Transfer-Encoding on
// HTTP/1.0, Transfer-Encoding with Content-Length, more than one Content-Length (even equal ones
// or a list), a Content-Length that is not digits.
std::optional<Refusal> check_framing(const HttpRequest& head);

// Whether `bind_host` (the address the server listens on) is loopback: localhost, 127.0.0.0/8, ::1.
bool is_loopback_host(std::string_view bind_host);

// The Host header against DNS rebinding, where the configuration asks for it (http.h,
// allowed_hosts): a page of an attacker's name that resolves to 127.0.0.1 sends that name, so
// only localhost, IP literals and the listed names pass (403 otherwise). HTTP/1.1 without
// exactly one Host is a 400 (RFC 9112 section 3.2) whatever the configuration.
std::optional<Refusal> check_host(const HttpRequest& head, const HttpServerConfig& config);

// What the Origin header of a request makes of it.
enum class OriginVerdict {
  kNone,        // no Origin: not a browser's cross-origin request
  kSameOrigin,  // the server's own pages (Origin is http:// plus the Host header)
  kAllowed,     // listed in allowed_origins (or "*"): answered with Access-Control-Allow-Origin
  kRefused,     // another origin: 403
};

struct OriginCheck {
  OriginVerdict verdict = OriginVerdict::kNone;
  Headers response_headers;  // the CORS headers every answer to this request carries
};

OriginCheck check_origin(const HttpRequest& head, const std::vector<std::string>& allowed_origins);

// A CORS preflight: OPTIONS with Origin and Access-Control-Request-Method.
bool is_preflight(const HttpRequest& head);

// A Content-Type value for a JSON body: application/json, case-insensitive, with parameters
// parsed as RFC 9110 section 8.3.1 writes them; a charset must be utf-8 (JSON is UTF-8, RFC
// 8259), other parameters are ignored. A 415 naming what was sent otherwise.
std::optional<Refusal> check_json_content_type(std::string_view value);

}  // namespace deepinfer::server
