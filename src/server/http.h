// HTTP/1.1 transport for the API server (Boost.Beast): keep-alive, complete and streamed
// (chunked, for SSE) responses, limits and timeouts, API keys, CORS, one log line per request,
// graceful shutdown. It knows nothing of the API: routes map (method, path) to handlers.
//
// A request's head is checked before any of its body is read (docs/security.md): framing
// (RFC 9112: no transfer coding but chunked, one Content-Length), the Host header on a loopback
// server (DNS rebinding), the Origin (CORS), the API key, the Content-Type and the size. A
// refused request costs its connection's fixed read buffer and no more.
//
// Threading: a handler runs on a thread of its own connection and may block for as long as its
// request lives (waiting on the engine between streamed events). Its ResponseWriter belongs to
// that thread. Slow or vanished clients cost their own connection only: everyone else is
// served meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::server {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string target;   // as sent: path and query
  std::string path;     // target without the query
  Headers headers;      // names in lower case
  std::string body;
  std::string remote;   // "address:port" of the client
  int version = 11;     // HTTP/1.x as 10 or 11

  // The first header with this (lower-case) name, or nullptr.
  const std::string* header(std::string_view lower_name) const;
};

// Where a handler writes its answer, exactly once: send(), or start_stream() + write()* +
// finish(). A handler that returns without answering gets a 500.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // A complete response with Content-Length.
  virtual void send(int status, std::string_view content_type, std::string body, const Headers& extra = {}) = 0;
  // A streamed response: chunked for HTTP/1.1; for an HTTP/1.0 client, which knows no chunks,
  // the body runs to the connection's close. Each write() goes out at once. Both return false
  // once the client is gone (or the server cuts the answer short); the handler should then stop
  // and cancel its work.
  virtual bool start_stream(int status, std::string_view content_type, const Headers& extra = {}) = 0;
  virtual bool write(std::string_view data) = 0;
  virtual void finish() = 0;
  // True once the client closed its side of the connection or a write failed, and when a
  // shutdown's grace ran out (the transport then ends the answer itself: see stream_cut_event).
  // Cheap and non-blocking, so a handler can ask it between engine events.
  virtual bool client_gone() = 0;
};

using Handler = std::function<void(const HttpRequest&, ResponseWriter&)>;

// What a route accepts as a body. kJson: a Content-Type other than application/json (with at
// most charset=utf-8) is answered 415 before the body is read; no Content-Type is accepted.
enum class BodyType { kAny, kJson };

struct Route {
  std::string method;  // "GET", "POST"
  std::string path;    // exact match
  Handler handler;
  BodyType body = BodyType::kAny;
};

// The body of an error the transport itself answers (400, 401, 403, 404, 405, 408, 413, 415,
// 431, 500, 503), in the shape the API wants for that path (OpenAI's or Anthropic's error object).
using ErrorBody = std::function<std::string(const HttpRequest& request, int status, std::string_view message)>;

// The last bytes of a stream the transport cuts short (shutdown past its grace): the error event
// of that path's protocol, so that a client tells a cut stream from a finished one.
using StreamCutEvent = std::function<std::string(const HttpRequest& request, int status, std::string_view message)>;

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;                       // 0: any free port (see HttpServer::port)
  std::vector<std::string> api_keys;          // empty: no authentication
  std::vector<std::string> public_paths = {"/health", "/metrics"};  // no key needed
  size_t max_body_bytes = size_t{32} << 20;   // 413 above
  size_t max_header_bytes = size_t{16} << 10; // 431 above
  std::chrono::milliseconds read_timeout{30000};  // a request must arrive within this (408)
  std::chrono::milliseconds idle_timeout{60000};  // keep-alive connections idle longer are closed
  int max_connections = 1024;                 // further connections get 503 and are closed
  // Origins whose pages may call the server (CORS), compared exactly ("http://host:port"), or
  // "*" for any. Empty: no Access-Control-Allow-Origin ever, and a request from another origin
  // (its Origin header names neither the server itself nor a listed origin) gets 403.
  std::vector<std::string> allowed_origins;
  // Host names accepted in the Host header besides localhost and IP addresses; "*": any. The
  // check (against DNS rebinding) runs when `host` is a loopback address, or whenever this list
  // is given; elsewhere it is off.
  std::vector<std::string> allowed_hosts;
  bool log_requests = true;                   // one line per request on stderr
  // Where request lines go instead of stderr (without the newline); called from connection
  // threads, so it must be thread-safe. Status 499 in a line: the client left before the
  // answer was complete (nothing, or only part of it, reached the client); 503 for an answer
  // the server cut short at shutdown. A line names the path, never the query, a header or the body.
  std::function<void(std::string_view line)> log_sink;
  ErrorBody error_body;                       // null: {"error":{"message":...}}
  StreamCutEvent stream_cut_event;            // null: a cut stream just ends
};

class HttpServer {
 public:
  virtual ~HttpServer() = default;
  // Binds and starts accepting. UNAVAILABLE naming the address when it cannot bind.
  static Result<std::unique_ptr<HttpServer>> start(HttpServerConfig config, std::vector<Route> routes);

  virtual uint16_t port() const = 0;
  // Stops accepting, lets requests in flight finish for up to `grace`, then cuts what is left:
  // handlers see their client gone, their streams end with stream_cut_event, and a second later
  // every connection is closed. Idempotent; safe from any thread (not from a signal handler).
  virtual void shutdown(std::chrono::milliseconds grace) = 0;
  // Blocks until shutdown() has completed.
  virtual void wait() = 0;
  virtual int64_t n_open_connections() const = 0;
};

}  // namespace deepinfer::server
