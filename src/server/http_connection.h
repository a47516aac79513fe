// One HTTP/1.1 connection, served start to end on its own thread: read a request (with limits
// and deadlines), route it, let the handler answer through a ResponseWriter, repeat while
// keep-alive lasts. The server shares its configuration and routes read-only.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/http.h"
#include "server/http_socket.h"

namespace deepinfer::server {

struct ServerContext {
  HttpServerConfig config;
  std::map<std::string, std::vector<Route>, std::less<>> routes_by_path;
  int wake_fd = -1;                 // readable once shutdown begins: idle connections close
  std::atomic<bool> stopping{false};
};

// Serves `socket` until it closes. Returns when the connection is done; the socket is closed.
void serve_connection(const ServerContext& context, Socket& socket, std::string remote,
                      Clock::time_point accepted_at);

// The body of a transport-level error: config.error_body's when set, else {"error":{...}}.
std::string error_body(const ServerContext& context, const HttpRequest& request, int status,
                       std::string_view message);

// The full response for a transport-level error (status line to body), with Connection: close;
// to a HEAD request, the head alone.
std::string error_response(const ServerContext& context, const HttpRequest& request, int status,
                           std::string_view message);

// How a response's body is delimited.
enum class Framing {
  kContentLength,  // complete responses
  kChunked,        // streams to HTTP/1.1 clients
  kUntilClose,     // streams to HTTP/1.0 clients, which know no chunks (RFC 9112 section 6.3)
};

// Appends a status line and headers, ending with the blank line. `content_length` counts only
// with Framing::kContentLength. `extra` holds everything else (CORS headers included).
void append_response_head(std::string& out, int status, std::string_view content_type, Framing framing,
                          size_t content_length, bool keep_alive, const Headers& extra);

// Reason phrase of a status code ("Not Found"); "Unknown" for codes the server never sends.
const char* reason_phrase(int status);

// Whether `headers` carry one of `keys` (Authorization: Bearer or x-api-key), compared in
// constant time so that the time taken does not reveal how much of a key matched.
bool authorized(const HttpRequest& request, const std::vector<std::string>& keys);

}  // namespace deepinfer::server
