#include "server/http_connection.h"

#include <algorithm>
#include <cstdio>
#include <exception>

#include <boost/beast/http.hpp>

namespace deepinfer::server {

namespace beast = boost::beast;
namespace http = boost::beast::http;

namespace {

constexpr size_t kMinReadBuffer = size_t{64} << 10;
// Logged (never sent) for a request whose client left before its answer was complete.
constexpr int kClientClosed = 499;
// How long a server-initiated close waits for the peer's unread bytes, so that closing with
// data pending does not reset the connection before the client has read our answer.
constexpr std::chrono::milliseconds kLingerMax{500};

using RequestParser = http::request_parser<http::string_body>;

std::string_view view(beast::string_view s) { return {s.data(), s.size()}; }

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Where a handler's answer goes. Tracks what was sent for the log line and for the decision to
// keep the connection open.
class ConnectionWriter final : public ResponseWriter {
 public:
  enum class State { kNone, kStreaming, kDone };

  ConnectionWriter(const ServerContext& context, Socket& socket, bool head_only, bool keep_alive)
      : context_(context), socket_(socket), head_only_(head_only), keep_alive_(keep_alive) {}

  void send(int status, std::string_view content_type, std::string body, const Headers& extra) override {
    if (state_ != State::kNone) return;  // answered already: the contract allows one answer
    state_ = State::kDone;
    status_ = status;
    keep_alive_ = keep_alive_ && !context_.stopping.load();
    std::string head;
    append_response_head(head, context_, status, content_type, body.size(), keep_alive_, extra);
    iovec iov[2] = {{head.data(), head.size()}, {body.data(), head_only_ ? 0 : body.size()}};
    if (!socket_.send_all(iov, 2, write_deadline())) gone_ = true;
    bytes_ = head_only_ ? 0 : body.size();
  }

  bool start_stream(int status, std::string_view content_type, const Headers& extra) override {
    if (state_ != State::kNone) return false;
    state_ = State::kStreaming;
    status_ = status;
    keep_alive_ = keep_alive_ && !context_.stopping.load();
    std::string head;
    append_response_head(head, context_, status, content_type, std::nullopt, keep_alive_, extra);
    if (!socket_.send_all(head.data(), head.size(), write_deadline())) gone_ = true;
    return !gone_;
  }

  bool write(std::string_view data) override {
    if (state_ != State::kStreaming || gone_) return false;
    if (head_only_ || data.empty()) return !client_gone();  // an empty chunk would end the stream
    char size_line[24];
    int n = std::snprintf(size_line, sizeof(size_line), "%zx\r\n", data.size());
    static const char kCrlf[] = "\r\n";
    iovec iov[3] = {{size_line, static_cast<size_t>(n)},
                    {const_cast<char*>(data.data()), data.size()},
                    {const_cast<char*>(kCrlf), 2}};
    if (!socket_.send_all(iov, 3, write_deadline())) {
      gone_ = true;
      return false;
    }
    bytes_ += data.size();
    return true;
  }

  void finish() override {
    if (state_ != State::kStreaming) return;
    state_ = State::kDone;
    if (head_only_ || gone_) return;
    static const char kLastChunk[] = "0\r\n\r\n";
    if (!socket_.send_all(kLastChunk, 5, write_deadline())) gone_ = true;
  }

  bool client_gone() override {
    if (!gone_ && socket_.peer_gone()) gone_ = true;
    return gone_;
  }

  State state() const { return state_; }
  int status() const { return status_; }
  size_t bytes() const { return bytes_; }
  // The connection may serve another request: answered completely, nothing failed.
  bool reusable() const { return keep_alive_ && state_ == State::kDone && !gone_; }
  // The client left (or a write failed) before the answer was complete.
  bool gone() const { return gone_; }

 private:
  Clock::time_point write_deadline() const { return Clock::now() + context_.config.idle_timeout; }

  const ServerContext& context_;
  Socket& socket_;
  bool head_only_;
  bool keep_alive_;
  State state_ = State::kNone;
  bool gone_ = false;
  int status_ = 0;
  size_t bytes_ = 0;
};

struct ReadFailure {
  int status = 0;  // 0: close without answering (the peer left, or sent nothing)
  std::string message;
};

class Connection {
 public:
  Connection(const ServerContext& context, Socket& socket, std::string remote, Clock::time_point accepted_at)
      : context_(context), socket_(socket), remote_(std::move(remote)), accepted_at_(accepted_at),
        buffer_(std::max(kMinReadBuffer, context.config.max_header_bytes + 1024), '\0') {}

  void run() {
    bool first = true;
    while (true) {
      RequestParser parser;
      parser.header_limit(static_cast<uint32_t>(std::min<size_t>(context_.config.max_header_bytes, UINT32_MAX)));
      parser.body_limit(static_cast<uint64_t>(context_.config.max_body_bytes));
      parser.eager(true);
      ReadFailure failure;
      if (!read_request(parser, first, failure)) {
        if (failure.status != 0) answer_read_failure(parser, failure, request_started_);
        socket_.linger_close(kLingerMax);
        return;
      }
      first = false;
      if (!serve(parser.get(), request_started_)) {
        socket_.linger_close(kLingerMax);
        return;
      }
    }
  }

 private:
  // Reads one request into `parser`. False with `failure` set when there is none to serve.
  bool read_request(RequestParser& parser, bool first, ReadFailure& failure) {
    const auto& config = context_.config;
    // The first request must arrive within read_timeout of the accept (a client that connects
    // and sends nothing holds a thread); later ones may wait idle_timeout before starting.
    Clock::time_point request_deadline = accepted_at_ + config.read_timeout;
    if (begin_ == end_) {
      Clock::time_point idle_deadline = first ? request_deadline : Clock::now() + config.idle_timeout;
      if (context_.stopping.load() || !read_more(idle_deadline, context_.wake_fd, failure)) {
        failure.status = 0;  // idle: close quietly whatever ended the wait
        return false;
      }
    }
    request_started_ = Clock::now();
    if (!first) request_deadline = request_started_ + config.read_timeout;

    bool sent_continue = false;
    while (true) {
      if (begin_ < end_) {
        beast::error_code ec;
        size_t n = parser.put(boost::asio::buffer(buffer_.data() + begin_, end_ - begin_), ec);
        begin_ += n;
        if (ec && ec != http::error::need_more) {
          failure = failure_for(ec);
          return false;
        }
        if (parser.is_done()) return true;
        if (!ec && n > 0 && begin_ < end_) continue;
      }
      if (!sent_continue && parser.is_header_done()) {
        sent_continue = true;
        if (!send_continue_if_expected(parser)) return false;
      }
      if (!read_more(request_deadline, -1, failure)) return false;
    }
  }

  // Appends what arrives before `deadline` to the buffer. False with `failure` set otherwise.
  bool read_more(Clock::time_point deadline, int wake_fd, ReadFailure& failure) {
    if (begin_ > 0) {
      std::copy(buffer_.begin() + static_cast<ptrdiff_t>(begin_), buffer_.begin() + static_cast<ptrdiff_t>(end_),
                buffer_.begin());
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ == buffer_.size()) {  // the parser needs a whole header at once and it does not fit
      failure = {431, "request headers are larger than the limit"};
      return false;
    }
    ReadResult r = socket_.read_some(buffer_.data() + end_, buffer_.size() - end_, deadline, wake_fd);
    switch (r.outcome) {
      case ReadOutcome::kData:
        end_ += r.n;
        return true;
      case ReadOutcome::kTimeout:
        failure = {408, "the request did not arrive within " +
                            std::to_string(context_.config.read_timeout.count()) + " ms"};
        return false;
      case ReadOutcome::kEof:
      case ReadOutcome::kWoken:
      case ReadOutcome::kError:
        failure = {};
        return false;
    }
    return false;
  }

  ReadFailure failure_for(const beast::error_code& ec) {
    if (ec == http::error::header_limit) {
      return {431, "request headers are larger than " + std::to_string(context_.config.max_header_bytes) + " bytes"};
    }
    if (ec == http::error::body_limit) {
      return {413, "request body is larger than " + std::to_string(context_.config.max_body_bytes) + " bytes"};
    }
    return {400, "malformed HTTP request: " + ec.message()};
  }

  // curl and others wait for "100 Continue" before sending a large body.
  bool send_continue_if_expected(RequestParser& parser) {
    auto it = parser.get().find(http::field::expect);
    if (it == parser.get().end() || to_lower(view(it->value())) != "100-continue" || parser.is_done()) return true;
    static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    return socket_.send_all(kContinue, sizeof(kContinue) - 1, Clock::now() + context_.config.idle_timeout);
  }

  HttpRequest make_request(http::request<http::string_body>& message, bool with_body) {
    HttpRequest request;
    request.method = std::string(view(message.method_string()));
    request.target = std::string(view(message.target()));
    request.path = request.target.substr(0, request.target.find('?'));
    for (const auto& field : message) {
      request.headers.emplace_back(to_lower(view(field.name_string())), std::string(view(field.value())));
    }
    if (with_body) request.body = std::move(message.body());
    request.remote = remote_;
    return request;
  }

  void answer_read_failure(RequestParser& parser, const ReadFailure& failure, Clock::time_point started) {
    HttpRequest request;
    if (parser.is_header_done()) request = make_request(parser.get(), /*with_body=*/false);
    request.remote = remote_;
    std::string response = error_response(context_, request, failure.status, failure.message);
    socket_.send_all(response.data(), response.size(), Clock::now() + context_.config.idle_timeout);
    log(request, failure.status, response.size(), started);
  }

  // Routes and answers one request. True when the connection may serve another.
  bool serve(http::request<http::string_body>& message, Clock::time_point started) {
    HttpRequest request = make_request(message, /*with_body=*/true);
    bool keep_alive = message.keep_alive() && !context_.stopping.load();
    ConnectionWriter writer(context_, socket_, request.method == "HEAD", keep_alive);
    dispatch(request, writer);
    // A handler returns without answering when its client left first (it cancelled its work):
    // that is no server error, and there is no one to send a 500 to.
    if (writer.state() == ConnectionWriter::State::kNone && !writer.client_gone()) {
      writer.send(500, "application/json", error_body(context_, request, 500, "the handler sent no response"), {});
    }
    // nginx's 499 "client closed request": the log tells a vanished client from a failure.
    log(request, writer.gone() ? kClientClosed : writer.status(), writer.bytes(), started);
    return writer.reusable() && !context_.stopping.load();
  }

  void dispatch(const HttpRequest& request, ConnectionWriter& writer) {
    const auto& config = context_.config;
    auto route_list = context_.routes_by_path.find(request.path);
    bool known_path = route_list != context_.routes_by_path.end();
    if (request.method == "OPTIONS" && !config.cors_allow_origin.empty()) {
      if (!known_path) return send_error(request, writer, 404, "no route for " + request.path);
      return send_preflight(request, writer);
    }
    bool is_public = std::find(config.public_paths.begin(), config.public_paths.end(), request.path) !=
                     config.public_paths.end();
    if (!config.api_keys.empty() && !is_public && !authorized(request, config.api_keys)) {
      return send_error(request, writer, 401, "missing or invalid API key", {{"WWW-Authenticate", "Bearer"}});
    }
    if (!known_path) return send_error(request, writer, 404, "no route for " + request.path);

    for (const Route& route : route_list->second) {
      if (route.method == request.method) return run_handler(route, request, writer);
    }
    // HEAD runs the GET handler; the writer drops the body.
    for (const Route& route : route_list->second) {
      if (request.method == "HEAD" && route.method == "GET") return run_handler(route, request, writer);
    }
    std::string allow;
    for (const Route& route : route_list->second) {
      allow += allow.empty() ? "" : ", ";
      allow += route.method;
      if (route.method == "GET") allow += ", HEAD";
    }
    if (!config.cors_allow_origin.empty()) allow += ", OPTIONS";
    send_error(request, writer, 405, request.method + " is not allowed on " + request.path, {{"Allow", allow}});
  }

  void run_handler(const Route& route, const HttpRequest& request, ConnectionWriter& writer) {
    try {
      route.handler(request, writer);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "http: handler for %s %s threw: %s\n", request.method.c_str(), request.path.c_str(),
                   e.what());
      if (writer.state() == ConnectionWriter::State::kNone) send_error(request, writer, 500, "internal error");
    } catch (...) {
      std::fprintf(stderr, "http: handler for %s %s threw\n", request.method.c_str(), request.path.c_str());
      if (writer.state() == ConnectionWriter::State::kNone) send_error(request, writer, 500, "internal error");
    }
  }

  void send_error(const HttpRequest& request, ConnectionWriter& writer, int status, const std::string& message,
                  const Headers& extra = {}) {
    writer.send(status, "application/json", error_body(context_, request, status, message), extra);
  }

  void send_preflight(const HttpRequest& request, ConnectionWriter& writer) {
    const std::string* asked = request.header("access-control-request-headers");
    Headers extra = {
        {"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
        {"Access-Control-Allow-Headers",
         asked != nullptr ? *asked : "authorization, x-api-key, content-type, anthropic-version"},
        {"Access-Control-Max-Age", "86400"},
    };
    writer.send(204, "", "", extra);
  }

  void log(const HttpRequest& request, int status, size_t bytes, Clock::time_point started) {
    if (!context_.config.log_requests) return;
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
    char line[512];
    // Remote and path are cut to fit; one line per request whatever they hold.
    std::snprintf(line, sizeof(line), "http: %.64s %.16s %.256s %d %zuB %.1fms", request.remote.c_str(),
                  request.method.empty() ? "-" : request.method.c_str(),
                  request.path.empty() ? "-" : request.path.c_str(), status, bytes, ms);
    if (context_.config.log_sink) {
      context_.config.log_sink(line);
    } else {
      std::fprintf(stderr, "%s\n", line);
    }
  }

  const ServerContext& context_;
  Socket& socket_;
  std::string remote_;
  Clock::time_point accepted_at_;
  Clock::time_point request_started_;  // first byte of the current request, for the log line
  std::string buffer_;  // bytes received and not yet parsed: [begin_, end_)
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace

void serve_connection(const ServerContext& context, Socket& socket, std::string remote,
                      Clock::time_point accepted_at) {
  Connection(context, socket, std::move(remote), accepted_at).run();
}

}  // namespace deepinfer::server
