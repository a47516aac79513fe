// A small blocking HTTP/1.1 client for `deepinfer bench serve`: one request per connection,
// every wait bounded by the caller's deadline, the response body handed over piece by piece as
// it arrives (chunked or Content-Length framing decoded by Beast), so that a streamed answer
// can be timed event by event. No TLS: the benchmark talks to servers over plain HTTP.
//
// Threading: an HttpClient holds no connection between calls; any number of threads may call
// one client at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "deepinfer/status.h"
#include "server/http.h"
#include "server/http_socket.h"  // Clock

namespace deepinfer::server {

struct HttpUrl {
  std::string host;       // "127.0.0.1", "localhost", "[::1]" without the brackets
  uint16_t port = 80;
  std::string base_path;  // "" or "/prefix" (no trailing slash): prepended to every path
};

// "http://host[:port][/prefix]" -> HttpUrl; INVALID_ARGUMENT naming what is wrong (https is
// refused: no TLS here).
Result<HttpUrl> parse_http_url(std::string_view url);

// Gets each piece of the body; returning false stops reading (the connection is closed).
using BodySink = std::function<bool(std::string_view piece)>;

struct HttpHead {
  int status = 0;
  std::string content_type;  // the response's Content-Type ("" when it sent none)
};

class HttpClient {
 public:
  explicit HttpClient(HttpUrl url, Headers extra_headers = {}) : url_(std::move(url)), extra_(std::move(extra_headers)) {}

  // Sends one request and streams the response body into `sink` (called after the head is in,
  // with the status in `head`). UNAVAILABLE when the server cannot be reached or closes early,
  // OUT_OF_RANGE ("timed out ...") when the deadline passes first.
  Status request(std::string_view method, std::string_view path, std::string_view json_body,
                 Clock::time_point deadline, HttpHead& head, const BodySink& sink) const;

  // The whole body at once, for short answers (/tokenize, /v1/models, error bodies).
  struct Response {
    int status = 0;
    std::string body;
  };
  Result<Response> post(std::string_view path, std::string_view json_body, Clock::time_point deadline) const;
  Result<Response> get(std::string_view path, Clock::time_point deadline) const;

  const HttpUrl& url() const { return url_; }

 private:
  HttpUrl url_;
  Headers extra_;
};

}  // namespace deepinfer::server
