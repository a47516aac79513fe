// The ResponseWriter of one request on a connection: writes the head and the body (whole,
// chunked, or to the close for HTTP/1.0), tracks what was sent for the log line and for the
// decision to keep the connection open, and ends answers the server cuts short.
#pragma once

#include <string>
#include <string_view>

#include "server/http.h"
#include "server/http_connection.h"
#include "server/http_socket.h"

namespace deepinfer::server {

class ConnectionWriter final : public ResponseWriter {
 public:
  enum class State { kNone, kStreaming, kDone };

  struct Options {
    bool head_only = false;   // HEAD: the head of the answer, no body
    bool keep_alive = true;   // what the client asked for; the server may still close
    int version = 11;         // the request's HTTP version: 10 streams to the close
    Headers cors;             // carried by every answer (http_policy.h, OriginCheck)
  };

  ConnectionWriter(const ServerContext& context, Socket& socket, Options options);

  void send(int status, std::string_view content_type, std::string body, const Headers& extra) override;
  bool start_stream(int status, std::string_view content_type, const Headers& extra) override;
  bool write(std::string_view data) override;
  void finish() override;
  bool client_gone() override;

  // Once the handler has returned from a cut (Socket::cut): ends what it left unfinished. A
  // stream gets `last_event` and its end; an unanswered request gets `status` with `body`.
  // True when something was unfinished, that is when the server cut the answer short.
  bool end_cut(int status, std::string_view last_event, std::string body);

  State state() const { return state_; }
  int status() const { return status_; }
  size_t bytes() const { return bytes_; }
  // The connection may serve another request: answered completely, nothing failed.
  bool reusable() const { return keep_alive_ && state_ == State::kDone && !gone_; }
  // The client left (or a write failed) before the answer was complete.
  bool gone() const { return gone_; }

 private:
  Clock::time_point write_deadline() const { return Clock::now() + context_.config.idle_timeout; }
  Headers with_cors(const Headers& extra) const;
  // One piece of a stream's body, framed as the stream is.
  bool send_piece(std::string_view data);

  const ServerContext& context_;
  Socket& socket_;
  Options options_;
  bool keep_alive_;
  Framing stream_framing_ = Framing::kChunked;
  State state_ = State::kNone;
  bool gone_ = false;
  int status_ = 0;
  size_t bytes_ = 0;
};

}  // namespace deepinfer::server
