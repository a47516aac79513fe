// libFuzzer target of the HTTP/1.1 transport (src/server/http_connection.h): the input after
// its first byte is what one client sends on one connection, served by serve_connection (the
// server's own code from the first read to the close) over a Unix socket pair of type
// SOCK_SEQPACKET, so that each read the server makes returns exactly one piece the client
// wrote. The first byte picks the configuration (bit 0: an API key; bit 1: no public paths;
// bit 2: small header and body limits; bit 3: an error_body callback) and, in bits 4-7, how
// the bytes are cut. CORS and the other settings keep their defaults. Each input is served twice, in one piece
// and in pieces, and must give:
//   - the same requests at the handlers, the same request log lines and the same responses
//     (less "100 Continue", which only a body still to come asks for), in the same order: how
//     TCP happens to cut a stream must not change what the server does with it. Beast allows
//     one difference: it parses a request line as soon as the first read holds one, and
//     otherwise only once the whole head is there, so a malformed head that never ends (the
//     client stops sending) is a 400 in one serving and unanswered in the other, and its
//     header limit counts the fields alone in the first case and the request line with them
//     in the second (a head up to the limit plus its request line is a 431 or served). The
//     servings may therefore part where one of them rejects a head (400 or 431) and closes;
//     everything before must be the same;
//   - a reply that parses as one complete HTTP/1.1 response per log line, in order, with the
//     logged status and only header fields the server writes (a client's bytes never become a
//     header line of ours), and nothing after the last one;
//   - no 5xx and no 499 (the client reads everything), only statuses the transport may send;
//   - with an API key, no handler run for a request that did not present it (public paths
//     aside), and never a handler run with a body over the body limit.
// Built and run by scripts/fuzz.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/beast/http.hpp>

#include "server/http_connection.h"
#include "server/http_socket.h"

namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using namespace deepinfer::server;

constexpr std::string_view kKey = "fuzz-key-1";
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
constexpr size_t kSmallHeaderLimit = 256;
constexpr size_t kSmallBodyLimit = 64;
constexpr std::array<size_t, 16> kPieceSizes = {1, 2, 3, 4, 5, 7, 8, 11, 16, 17, 31, 64, 100, 128, 511, 1024};

[[noreturn]] void fail(const char* what, std::string_view detail) {
  std::fprintf(stderr, "http_fuzz: %s\n%.*s\n", what, static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// What one serving of the input left behind.
struct Exchange {
  std::vector<std::string> log;  // request log lines, without their duration
  // The log lines and, before each, what a handler got (method, target and body), in order.
  std::vector<std::string> events;
  std::string reply;  // every byte the server sent
};

Exchange* current = nullptr;  // the serving in progress (one at a time, on the fuzzing thread)

bool presents_key(const HttpRequest& request) {
  for (const char* name : {"authorization", "x-api-key"}) {
    const std::string* value = request.header(name);
    if (value != nullptr && value->find(kKey) != std::string::npos) return true;
  }
  return false;
}

// Wraps a handler with the checks every handled request must pass.
Handler checked(const HttpServerConfig& config, Handler handler) {
  return [&config, handler = std::move(handler)](const HttpRequest& request, ResponseWriter& writer) {
    const bool is_public = std::find(config.public_paths.begin(), config.public_paths.end(), request.path) !=
                           config.public_paths.end();
    if (!config.api_keys.empty() && !is_public && !presents_key(request)) {
      fail("a handler ran for a request without the API key", request.method + " " + request.target);
    }
    if (request.body.size() > config.max_body_bytes) fail("a handler got a body over the limit", request.target);
    current->events.push_back("handled " + request.method + " " + request.target + "\n" + request.body);
    handler(request, writer);
  };
}

std::vector<Route> routes(const HttpServerConfig& config) {
  auto ok = [](std::string body) {
    return [body](const HttpRequest&, ResponseWriter& w) { w.send(200, "application/json", body); };
  };
  // Pieces are never empty: an empty write() asks whether the client is gone, and the answer
  // to that depends on timing (the client half-closes once it has sent everything).
  auto stream = [](const HttpRequest& request, ResponseWriter& w) {
    if (!w.start_stream(200, "text/event-stream")) return;
    const std::string& body = request.body;
    const size_t half = body.size() / 2;
    if (half > 0) w.write(std::string_view(body).substr(0, half));
    if (body.size() > half) w.write(std::string_view(body).substr(half));
    w.finish();
  };
  auto echo = [](const HttpRequest& request, ResponseWriter& w) {
    w.send(200, "application/octet-stream", request.body);
  };
  return {{"GET", "/health", checked(config, ok("{\"status\":\"ok\"}"))},
          {"GET", "/v1/models", checked(config, ok("{\"data\":[]}"))},
          {"POST", "/v1/echo", checked(config, echo)},
          {"POST", "/v1/stream", checked(config, stream)}};
}

std::unique_ptr<ServerContext> make_context(unsigned options) {
  auto context = std::make_unique<ServerContext>();
  HttpServerConfig& config = context->config;
  if (options & 1) config.api_keys = {std::string(kKey), "other-key"};
  if (options & 2) config.public_paths.clear();
  if (options & 4) {
    config.max_header_bytes = kSmallHeaderLimit;
    config.max_body_bytes = kSmallBodyLimit;
  }
  if (options & 8) {
    config.error_body = [](const HttpRequest& request, int status, std::string_view message) {
      return "{\"type\":\"error\",\"path\":\"" + std::to_string(request.path.size()) + "\",\"status\":" +
             std::to_string(status) + ",\"message\":" + std::to_string(message.size()) + "}";
    };
  }
  config.log_sink = [](std::string_view line) {
    current->log.emplace_back(line.substr(0, line.rfind(' ')));  // the duration varies
    current->events.push_back(current->log.back());
  };
  for (Route& route : routes(config)) context->routes_by_path[route.path].push_back(std::move(route));
  return context;
}

// Serves `bytes`, written in pieces of `piece` bytes, on one connection.
Exchange serve(const ServerContext& context, std::string_view bytes, size_t piece) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) fail("socketpair failed", "");
  Exchange exchange;
  current = &exchange;
  // The client writes and reads on threads of its own, so that neither side ever waits for
  // the other to drain a full socket buffer.
  std::thread writer([&] {
    for (size_t at = 0; at < bytes.size(); at += piece) {
      const size_t n = std::min(piece, bytes.size() - at);
      if (::send(fds[0], bytes.data() + at, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) break;  // server closed
    }
    ::shutdown(fds[0], SHUT_WR);
  });
  std::thread reader([&] {
    std::vector<char> buffer(size_t{1} << 17);
    while (true) {
      const ssize_t n = ::recv(fds[0], buffer.data(), buffer.size(), 0);
      if (n <= 0) break;
      exchange.reply.append(buffer.data(), static_cast<size_t>(n));
    }
  });
  {
    Socket socket(fds[1]);
    serve_connection(context, socket, "fuzz", Clock::now());
  }
  writer.join();
  reader.join();
  ::close(fds[0]);
  current = nullptr;
  return exchange;
}

bool allowed_status(int status) {
  for (int s : {200, 204, 400, 401, 403, 404, 405, 413, 415, 431}) {
    if (s == status) return true;
  }
  return false;
}

bool allowed_field(beast::string_view name) {
  static const char* const kFields[] = {
      "content-type", "content-length", "transfer-encoding", "connection", "access-control-allow-origin", "vary",
      "access-control-allow-methods", "access-control-allow-headers", "access-control-max-age",
      "www-authenticate", "allow"};
  for (const char* field : kFields) {
    if (beast::iequals(name, field)) return true;
  }
  return false;
}

// Checks the reply against the log and returns its responses, one per log line, without the
// interim ones.
std::vector<std::string> check_reply(const Exchange& exchange) {
  std::string_view rest = exchange.reply;
  std::vector<std::string> responses;
  for (const std::string& line : exchange.log) {
    // "http: fuzz METHOD PATH STATUS BYTESB"
    std::vector<std::string_view> words;
    for (size_t at = 0; at <= line.size();) {
      const size_t space = std::min(line.find(' ', at), line.size());
      words.push_back(std::string_view(line).substr(at, space - at));
      at = space + 1;
    }
    if (words.size() != 6) fail("a log line has an unexpected shape", line);
    const int status = std::atoi(std::string(words[4]).c_str());
    if (!allowed_status(status)) fail("a status the transport must not send", line);
    while (rest.starts_with(kContinue)) rest.remove_prefix(kContinue.size());

    http::response_parser<http::string_body> parser;
    parser.eager(true);
    parser.skip(words[2] == "HEAD");
    parser.body_limit(boost::none);
    size_t used = 0;
    beast::error_code ec;
    while (!parser.is_done() && used < rest.size()) {
      const size_t n = parser.put(boost::asio::buffer(rest.data() + used, rest.size() - used), ec);
      used += n;
      if (ec || n == 0) break;
    }
    // A response with neither a length nor chunks (a stream to an HTTP/1.0 client) ends where
    // the server closed: the end of the reply.
    if (!parser.is_done() && used == rest.size() && parser.is_header_done()) {
      parser.put_eof(ec);
    }
    if (!parser.is_done()) fail("a logged response is missing or incomplete", line + "\n" + std::string(rest));
    const auto& response = parser.get();
    if (response.result_int() != static_cast<unsigned>(status)) {
      fail("the response's status is not the logged one", line);
    }
    for (const auto& field : response) {
      if (!allowed_field(field.name_string())) {
        fail("a header field the server does not write", std::string(rest.substr(0, used)));
      }
    }
    responses.emplace_back(rest.substr(0, used));
    rest.remove_prefix(used);
  }
  while (rest.starts_with(kContinue)) rest.remove_prefix(kContinue.size());
  if (!rest.empty()) fail("bytes after the last logged response", rest);
  return responses;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n---\n";
  return out;
}

bool head_rejection(const std::string& event) {
  return event.starts_with("http: ") &&
         (event.find(" 400 ") != std::string::npos || event.find(" 431 ") != std::string::npos);
}

// The servings agree up to their end, or up to where one of them rejected a head and closed.
void compare(const Exchange& whole, const Exchange& pieces, const std::vector<std::string>& whole_responses,
             const std::vector<std::string>& piece_responses) {
  size_t k = 0;
  size_t n_logged = 0;
  while (k < whole.events.size() && k < pieces.events.size() && whole.events[k] == pieces.events[k]) {
    if (whole.events[k].starts_with("http: ")) {
      if (whole_responses[n_logged] != piece_responses[n_logged]) {
        fail("the responses depend on how the bytes were cut",
             whole_responses[n_logged] + "\n" + piece_responses[n_logged]);
      }
      ++n_logged;
    }
    ++k;
  }
  auto parts_here = [k](const Exchange& e) { return k + 1 == e.events.size() && head_rejection(e.events[k]); };
  if (k == whole.events.size() && k == pieces.events.size()) return;
  if (!parts_here(whole) && !parts_here(pieces)) {
    fail("what the server did depends on how the bytes were cut", joined(whole.events) + "\n" + joined(pieces.events));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto contexts = [] {
    std::array<std::unique_ptr<ServerContext>, 16> all;
    for (unsigned options = 0; options < all.size(); ++options) all[options] = make_context(options);
    return all;
  }();
  if (size < 1) return 0;
  const ServerContext& context = *contexts[data[0] & 15];
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);

  const Exchange whole = serve(context, bytes, std::max<size_t>(bytes.size(), 1));
  const Exchange pieces = serve(context, bytes, kPieceSizes[data[0] >> 4]);
  const std::vector<std::string> whole_responses = check_reply(whole);
  const std::vector<std::string> piece_responses = check_reply(pieces);
  compare(whole, pieces, whole_responses, piece_responses);
  return 0;
}
