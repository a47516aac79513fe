#include "server/http_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <memory>

namespace deepinfer::server {

namespace beast = boost::beast;
namespace http = boost::beast::http;

Result<HttpUrl> parse_http_url(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (url.rfind("https://", 0) == 0) return invalid_argument("--url: https is not supported (plain http only)");
  if (url.rfind(kScheme, 0) != 0) return invalid_argument("--url: expected http://HOST[:PORT][/PATH], got '" + std::string(url) + "'");
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  HttpUrl out;
  if (slash != std::string_view::npos) {
    out.base_path = std::string(rest.substr(slash));
    while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
  }
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {  // [v6 address]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return invalid_argument("--url: unclosed '[' in '" + std::string(url) + "'");
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return invalid_argument("--url: bad host in '" + std::string(url) + "'");
      port_text = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (out.host.empty()) return invalid_argument("--url: no host in '" + std::string(url) + "'");
  if (!port_text.empty()) {
    unsigned port = 0;
    auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || ptr != port_text.data() + port_text.size() || port == 0 || port > 65535) {
      return invalid_argument("--url: bad port '" + std::string(port_text) + "'");
    }
    out.port = static_cast<uint16_t>(port);
  }
  return out;
}

namespace {

Status timed_out(std::string_view what) { return out_of_range("timed out " + std::string(what)); }

int ms_until(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left + 1, 0, 1 << 30));
}

// A connected socket, or why there is none. Non-blocking connect so that a black-holed address
// costs the deadline, not the kernel's minutes of SYN retries.
Result<std::unique_ptr<Socket>> connect_to(const HttpUrl& url, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(url.port);
  if (int rc = ::getaddrinfo(url.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return unavailable("cannot resolve " + url.host + ": " + gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(found, &::freeaddrinfo);
  std::string last_error = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    auto socket = std::make_unique<Socket>(fd);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last_error = std::strerror(errno);
        continue;
      }
      pollfd pfd{fd, POLLOUT, 0};
      int r = 0;
      do {
        r = ::poll(&pfd, 1, ms_until(deadline));
      } while (r < 0 && errno == EINTR);
      if (r == 0) return timed_out("connecting to " + url.host + ":" + port);
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (r < 0 || err != 0) {
        last_error = std::strerror(r < 0 ? errno : err);
        continue;
      }
    }
    return socket;
  }
  return unavailable("cannot connect to " + url.host + ":" + port + ": " + last_error);
}

std::string request_head(const HttpUrl& url, std::string_view method, std::string_view path, size_t body_size,
                         const Headers& extra) {
  std::string head;
  head.append(method).append(" ").append(url.base_path).append(path).append(" HTTP/1.1\r\n");
  const bool v6 = url.host.find(':') != std::string::npos;
  head.append("Host: ").append(v6 ? "[" + url.host + "]" : url.host).append(":").append(std::to_string(url.port));
  head.append("\r\nConnection: close\r\nAccept: */*\r\n");
  if (method == "POST") {
    head.append("Content-Type: application/json\r\nContent-Length: ").append(std::to_string(body_size)).append("\r\n");
  }
  for (const auto& [name, value] : extra) head.append(name).append(": ").append(value).append("\r\n");
  head.append("\r\n");
  return head;
}

}  // namespace

Status HttpClient::request(std::string_view method, std::string_view path, std::string_view json_body,
                           Clock::time_point deadline, HttpHead& head, const BodySink& sink) const {
  DI_ASSIGN_OR_RETURN(std::unique_ptr<Socket> socket, connect_to(url_, deadline));
  const std::string head_text = request_head(url_, method, path, json_body.size(), extra_);
  iovec iov[2] = {{const_cast<char*>(head_text.data()), head_text.size()},
                  {const_cast<char*>(json_body.data()), json_body.size()}};
  if (!socket->send_all(iov, json_body.empty() ? 1 : 2, deadline)) {
    return Clock::now() >= deadline ? timed_out("sending the request") : unavailable("the server closed the connection while the request was sent");
  }
  http::response_parser<http::buffer_body> parser;
  // Not boost::none: Beast 1.74 compares a Content-Length with the optional, and any length
  // exceeds an empty one.
  parser.body_limit(std::numeric_limits<uint64_t>::max());
  parser.header_limit(64 * 1024);
  parser.eager(true);
  std::array<char, 64 * 1024> in;  // bytes from the socket, not yet parsed
  std::array<char, 16 * 1024> body;  // decoded body bytes, handed to the sink
  size_t begin = 0, end = 0;
  bool head_seen = false, stalled = false;  // stalled: the parser needs bytes that have not come
  while (!parser.is_done()) {
    if (begin == end || stalled) {
      if (begin > 0) {  // the parser takes a head or chunk header whole: keep its start
        std::memmove(in.data(), in.data() + begin, end - begin);
        end -= begin;
        begin = 0;
      }
      if (end == in.size()) return unavailable("malformed HTTP response: a header line longer than " + std::to_string(in.size()) + " bytes");
      ReadResult r = socket->read_some(in.data() + end, in.size() - end, deadline);
      if (r.outcome == ReadOutcome::kTimeout) return timed_out(head_seen ? "reading the response" : "waiting for the response");
      if (r.outcome != ReadOutcome::kData) {
        // A body without framing runs to the close; anything else ends too early. NOTE: not
        // put_eof before any byte: Beast then reports a complete message with status 0.
        beast::error_code ec;
        if (parser.is_header_done()) parser.put_eof(ec);
        if (parser.is_header_done() && !ec && parser.is_done()) break;
        return unavailable(head_seen ? "the server closed the connection mid-response" : "the server closed the connection without a response");
      }
      end += r.n;
      stalled = false;
    }
    parser.get().body().data = body.data();
    parser.get().body().size = body.size();
    beast::error_code ec;
    begin += parser.put(boost::asio::buffer(in.data() + begin, end - begin), ec);
    if (ec == http::error::need_more) {
      stalled = true;
      ec = {};
    }
    if (ec && ec != http::error::need_buffer) return unavailable("malformed HTTP response: " + ec.message());
    if (parser.is_header_done() && !head_seen) {
      head_seen = true;
      head.status = static_cast<int>(parser.get().result_int());
      head.content_type = std::string(parser.get()[http::field::content_type]);
    }
    const size_t produced = body.size() - parser.get().body().size;
    if (produced > 0 && !sink(std::string_view(body.data(), produced))) return Status::ok_status();
  }
  return Status::ok_status();
}

Result<HttpClient::Response> HttpClient::post(std::string_view path, std::string_view json_body,
                                              Clock::time_point deadline) const {
  Response out;
  HttpHead head;
  Status s = request("POST", path, json_body, deadline, head, [&](std::string_view piece) {
    out.body.append(piece);
    return out.body.size() < (size_t{64} << 20);
  });
  if (!s.ok()) return s;
  out.status = head.status;
  return out;
}

Result<HttpClient::Response> HttpClient::get(std::string_view path, Clock::time_point deadline) const {
  Response out;
  HttpHead head;
  Status s = request("GET", path, {}, deadline, head, [&](std::string_view piece) {
    out.body.append(piece);
    return out.body.size() < (size_t{64} << 20);
  });
  if (!s.ok()) return s;
  out.status = head.status;
  return out;
}

}  // namespace deepinfer::server
