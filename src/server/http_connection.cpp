#include "server/http_connection.h"

#include <algorithm>
#include <optional>
#include <cstdio>
#include <exception>
#include <limits>

#include <boost/beast/http.hpp>

#include "server/http_policy.h"
#include "server/http_writer.h"

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
constexpr const char* kCutMessage = "the server is shutting down: this answer was cut short";

using RequestParser = http::request_parser<http::string_body>;

std::string_view view(beast::string_view s) { return {s.data(), s.size()}; }

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

enum class ReadGoal { kHead, kWholeMessage };

struct ReadFailure {
  int status = 0;  // 0: close without answering (the peer left, or sent nothing)
  std::string message;
};

// A request's head as admitted: refused (answered, and maybe closing), or to be read and served.
struct Admission {
  std::optional<Refusal> refusal;
  Headers extra;              // with a refusal: headers of its answer (WWW-Authenticate)
  bool must_close = false;    // with a refusal: the rest of the stream cannot be trusted
  OriginCheck origin;
};

class Connection {
 public:
  Connection(const ServerContext& context, Socket& socket, std::string remote, Clock::time_point accepted_at)
      : context_(context), socket_(socket), remote_(std::move(remote)), accepted_at_(accepted_at),
        buffer_(std::max(kMinReadBuffer, context.config.max_header_bytes + 1024), '\0') {}

  void run() {
    bool first = true;
    while (serve_next(first)) first = false;
    socket_.linger_close(kLingerMax);
  }

 private:
  // Reads, checks and serves one request. True when the connection may serve another.
  bool serve_next(bool first) {
    RequestParser parser;
    parser.header_limit(static_cast<uint32_t>(std::min<size_t>(context_.config.max_header_bytes, UINT32_MAX)));
    // No body limit yet: a Content-Length over it is a 413 only once the head is admitted (a
    // client without a key learns nothing but 401), and admit() checks it itself. The largest
    // value, not boost::none: Beast 1.74 compares a length against an unset limit as exceeded.
    parser.body_limit(std::numeric_limits<uint64_t>::max());
    parser.eager(false);  // stop after the head, before any body byte is parsed
    ReadFailure failure;
    if (!read_head(parser, first, failure)) return answer_read_failure(parser, failure);
    HttpRequest request = make_request(parser.get());
    Admission admission = admit(request, parser);
    if (admission.refusal) return refuse(request, parser, admission);

    parser.body_limit(static_cast<uint64_t>(context_.config.max_body_bytes));
    parser.eager(true);
    // curl and others wait for "100 Continue" before sending a large body: only now, admitted.
    if (!parser.is_done() && expects_continue(request) && !send_continue()) return false;
    if (!read_until(parser, ReadGoal::kWholeMessage, request_deadline_, failure)) {
      return answer_read_failure(parser, failure);
    }
    request.body = std::move(parser.get().body());
    return serve(request, parser.get().keep_alive(), admission.origin);
  }

  // Waits for the start of a request, then reads its head into `parser`. False with `failure`
  // set when there is none to serve.
  bool read_head(RequestParser& parser, bool first, ReadFailure& failure) {
    const auto& config = context_.config;
    // The first request must arrive within read_timeout of the accept (a client that connects
    // and sends nothing holds a thread); later ones may wait idle_timeout before starting.
    request_deadline_ = accepted_at_ + config.read_timeout;
    if (begin_ == end_) {
      Clock::time_point idle_deadline = first ? request_deadline_ : Clock::now() + config.idle_timeout;
      if (context_.stopping.load() || !read_more(idle_deadline, context_.wake_fd, failure)) {
        failure.status = 0;  // idle: close quietly whatever ended the wait
        return false;
      }
    }
    request_started_ = Clock::now();
    if (!first) request_deadline_ = request_started_ + config.read_timeout;
    return read_until(parser, ReadGoal::kHead, request_deadline_, failure);
  }

  // Feeds the buffer to `parser` and reads more until the head (or the whole message) is in.
  bool read_until(RequestParser& parser, ReadGoal goal, Clock::time_point deadline, ReadFailure& failure) {
    auto done = [&] { return goal == ReadGoal::kWholeMessage ? parser.is_done() : parser.is_header_done(); };
    while (true) {
      if (begin_ < end_ && !parser.is_done()) {
        beast::error_code ec;
        size_t n = parser.put(boost::asio::buffer(buffer_.data() + begin_, end_ - begin_), ec);
        begin_ += n;
        if (ec && ec != http::error::need_more) {
          failure = failure_for(ec);
          return false;
        }
        if (done()) return true;
        if (!ec && n > 0 && begin_ < end_) continue;
      }
      if (done()) return true;
      if (!read_more(deadline, -1, failure)) return false;
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
    if (ec == http::error::bad_transfer_encoding) {
      return {400, "malformed HTTP request: Transfer-Encoding repeated or given with Content-Length"};
    }
    if (ec == http::error::bad_content_length) {
      return {400, "malformed HTTP request: Content-Length is not one decimal number, or comes with Transfer-Encoding"};
    }
    return {400, "malformed HTTP request: " + ec.message()};
  }

  // The checks on the head, in the order that leaks least: framing first (nothing after it can
  // be trusted otherwise), then who is asking (Host, Origin, key), then what is asked.
  Admission admit(const HttpRequest& request, RequestParser& parser) {
    const auto& config = context_.config;
    Admission a;
    if ((a.refusal = check_framing(request))) {
      a.must_close = true;
      return a;
    }
    if ((a.refusal = check_host(request, config))) return a;
    a.origin = check_origin(request, config.allowed_origins);
    if (a.origin.verdict == OriginVerdict::kRefused) {
      a.refusal = Refusal{403, "cross-origin request from " + request.header("origin")->substr(0, 100) +
                                   " refused: start the server with --allowed-origins ORIGIN to let that page call it"};
      return a;
    }
    // Browsers send no credentials in a preflight: it is answered without a key.
    if (is_preflight(request) && a.origin.verdict == OriginVerdict::kAllowed) return a;
    bool is_public = std::find(config.public_paths.begin(), config.public_paths.end(), request.path) !=
                     config.public_paths.end();
    if (!config.api_keys.empty() && !is_public && !authorized(request, config.api_keys)) {
      a.refusal = Refusal{401, "missing or invalid API key"};
      a.extra = {{"WWW-Authenticate", "Bearer"}};
      return a;
    }
    const std::string* content_type = request.header("content-type");
    const Route* route = find_route(request);
    if (content_type != nullptr && route != nullptr && route->body == BodyType::kJson &&
        (a.refusal = check_json_content_type(*content_type))) {
      return a;
    }
    if (parser.content_length() && *parser.content_length() > config.max_body_bytes) {
      a.refusal = Refusal{413, "request body is larger than " + std::to_string(config.max_body_bytes) + " bytes"};
    }
    return a;
  }

  // Answers a refused head. Its body, unread, must not be taken for the next request: unless
  // there is none, the connection closes (linger_close drains it without keeping it).
  bool refuse(const HttpRequest& request, RequestParser& parser, const Admission& admission) {
    const bool body_pending = !parser.is_done();
    ConnectionWriter::Options options;
    options.head_only = request.method == "HEAD";
    options.keep_alive = parser.get().keep_alive() && !body_pending && !admission.must_close;
    options.version = request.version;
    options.cors = admission.origin.response_headers;
    ConnectionWriter writer(context_, socket_, std::move(options));
    const Refusal& refusal = *admission.refusal;
    writer.send(refusal.status, "application/json", error_body(context_, request, refusal.status, refusal.message),
                admission.extra);
    log(request, writer.gone() ? kClientClosed : refusal.status, writer.bytes(), request_started_);
    return writer.reusable() && !context_.stopping.load();
  }

  const Route* find_route(const HttpRequest& request) const {
    auto route_list = context_.routes_by_path.find(request.path);
    if (route_list == context_.routes_by_path.end()) return nullptr;
    for (const Route& route : route_list->second) {
      if (route.method == request.method) return &route;
    }
    // HEAD runs the GET handler; the writer drops the body.
    for (const Route& route : route_list->second) {
      if (request.method == "HEAD" && route.method == "GET") return &route;
    }
    return nullptr;
  }

  // RFC 9110 section 10.1.1: never to an HTTP/1.0 client, which would not understand it.
  static bool expects_continue(const HttpRequest& request) {
    if (request.version < 11) return false;
    const std::string* expect = request.header("expect");
    return expect != nullptr && to_lower(*expect) == "100-continue";
  }

  bool send_continue() {
    static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    return socket_.send_all(kContinue, sizeof(kContinue) - 1, Clock::now() + context_.config.idle_timeout);
  }

  HttpRequest make_request(const http::request<http::string_body>& message) {
    HttpRequest request;
    request.method = std::string(view(message.method_string()));
    request.target = std::string(view(message.target()));
    request.path = request.target.substr(0, request.target.find('?'));
    request.version = message.version() >= 11 ? 11 : 10;
    for (const auto& field : message) {
      request.headers.emplace_back(to_lower(view(field.name_string())), std::string(view(field.value())));
    }
    request.remote = remote_;
    return request;
  }

  // Answers what the read ended with, if anything is to be answered. Always false: the
  // connection closes after a read failure.
  bool answer_read_failure(RequestParser& parser, const ReadFailure& failure) {
    if (failure.status == 0) return false;
    HttpRequest request;
    if (parser.is_header_done()) request = make_request(parser.get());
    request.remote = remote_;
    std::string response = error_response(context_, request, failure.status, failure.message);
    socket_.send_all(response.data(), response.size(), Clock::now() + context_.config.idle_timeout);
    log(request, failure.status, response.size(), request_started_);
    return false;
  }

  // Routes and answers one request. True when the connection may serve another.
  bool serve(const HttpRequest& request, bool client_keep_alive, const OriginCheck& origin) {
    ConnectionWriter::Options options;
    options.head_only = request.method == "HEAD";
    options.keep_alive = client_keep_alive && !context_.stopping.load();
    options.version = request.version;
    options.cors = origin.response_headers;
    ConnectionWriter writer(context_, socket_, std::move(options));
    dispatch(request, origin, writer);
    // Past a shutdown's grace the handler stopped because the server asked it to: the answer
    // ends here, with the protocol's error event for a stream.
    const bool cut = socket_.is_cut() &&
                     writer.end_cut(503, cut_event(request), error_body(context_, request, 503, kCutMessage));
    // A handler returns without answering when its client left first (it cancelled its work):
    // that is no server error, and there is no one to send a 500 to.
    if (!cut && writer.state() == ConnectionWriter::State::kNone && !writer.client_gone()) {
      writer.send(500, "application/json", error_body(context_, request, 500, "the handler sent no response"), {});
    }
    // nginx's 499 "client closed request": the log tells a vanished client from a failure, and
    // an answer the server cut from either.
    log(request, cut ? 503 : writer.gone() ? kClientClosed : writer.status(), writer.bytes(), request_started_);
    return writer.reusable() && !context_.stopping.load();
  }

  std::string cut_event(const HttpRequest& request) const {
    const auto& hook = context_.config.stream_cut_event;
    return hook ? hook(request, 503, kCutMessage) : std::string();
  }

  void dispatch(const HttpRequest& request, const OriginCheck& origin, ConnectionWriter& writer) {
    const auto& config = context_.config;
    auto route_list = context_.routes_by_path.find(request.path);
    bool known_path = route_list != context_.routes_by_path.end();
    if (is_preflight(request) && origin.verdict == OriginVerdict::kAllowed) {
      if (!known_path) return send_error(request, writer, 404, "no route for " + request.path);
      return send_preflight(request, writer);
    }
    if (!known_path) return send_error(request, writer, 404, "no route for " + request.path);
    if (const Route* route = find_route(request)) return run_handler(*route, request, writer);
    std::string allow;
    for (const Route& route : route_list->second) {
      allow += allow.empty() ? "" : ", ";
      allow += route.method;
      if (route.method == "GET") allow += ", HEAD";
    }
    if (!config.allowed_origins.empty()) allow += ", OPTIONS";
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
    // Remote and path are cut to fit; one line per request whatever they hold. Never the
    // query, a header or the body: no prompt and no key reaches the log.
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
  Clock::time_point request_started_;   // first byte of the current request, for the log line
  Clock::time_point request_deadline_;  // the whole current request must have arrived by then
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
