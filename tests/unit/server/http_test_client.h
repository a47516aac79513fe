// A blocking HTTP client for the transport's tests, one connection each, that sees exactly the
// bytes on the wire; and the small helpers those tests share (a latch, a test configuration,
// raw request builders).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/http.h"

namespace deepinfer::server::http_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Response {
  int status = 0;
  Headers headers;  // names in lower case
  std::string body;
  std::vector<std::string> chunks;  // for chunked responses, each as it arrived on the wire

  const std::string* header(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return &v;
    }
    return nullptr;
  }
};

inline std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A blocking HTTP/1.1 client on one connection. Every read waits at most `timeout`.
class Client {
 public:
  explicit Client(uint16_t port, std::chrono::milliseconds timeout = 5000ms) : timeout_(timeout) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~Client() { close(); }

  bool connected() const { return connected_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  void send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      data.remove_prefix(static_cast<size_t>(n));
    }
  }

  // Reads one response; status 0 when the connection ended or timed out first.
  Response read_response(bool head_only = false) {
    Response r;
    size_t end;
    while ((end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) return r;
    }
    std::string head = buffer_.substr(0, end);
    buffer_.erase(0, end + 4);
    size_t line_end = head.find("\r\n");
    std::string status_line = head.substr(0, line_end);
    if (status_line.rfind("HTTP/1.1 ", 0) != 0) return r;
    r.status = std::stoi(status_line.substr(9, 3));
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t next = head.find("\r\n", pos);
      if (next == std::string::npos) next = head.size();
      std::string line = head.substr(pos, next - pos);
      size_t colon = line.find(':');
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      r.headers.emplace_back(lower(line.substr(0, colon)), value);
      pos = next + 2;
    }
    if (head_only || r.status == 204 || r.status == 304 || r.status < 200) return r;
    if (const std::string* length = r.header("content-length")) {
      size_t n = std::stoul(*length);
      while (buffer_.size() < n) {
        if (!fill()) return r;
      }
      r.body = buffer_.substr(0, n);
      buffer_.erase(0, n);
    } else if (const std::string* te = r.header("transfer-encoding"); te && *te == "chunked") {
      while (true) {
        std::optional<std::string> chunk = read_chunk();
        if (!chunk) return r;
        if (chunk->empty()) break;
        r.body += *chunk;
        r.chunks.push_back(*chunk);
      }
    }
    return r;
  }

  // One chunk of a chunked body: "" for the last chunk, nullopt when the stream broke.
  std::optional<std::string> read_chunk() {
    size_t line_end;
    while ((line_end = buffer_.find("\r\n")) == std::string::npos) {
      if (!fill()) return std::nullopt;
    }
    size_t n = std::stoul(buffer_.substr(0, line_end), nullptr, 16);
    buffer_.erase(0, line_end + 2);
    while (buffer_.size() < n + 2) {
      if (!fill()) return std::nullopt;
    }
    std::string chunk = buffer_.substr(0, n);
    buffer_.erase(0, n + 2);
    return chunk;
  }

  // Sends what it can of `data` within `timeout` without ever blocking on a full socket (the
  // server may have stopped reading); returns how many bytes left.
  size_t send_within(std::string_view data, std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    size_t sent = 0;
    while (sent < data.size() && Clock::now() < deadline) {
      ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
      pollfd pfd{fd_, POLLOUT, 0};
      ::poll(&pfd, 1, 10);
    }
    return sent;
  }

  // Whether a response (or anything) is waiting to be read within `timeout`.
  bool readable_within(std::chrono::milliseconds timeout) {
    if (!buffer_.empty()) return true;
    pollfd pfd{fd_, POLLIN, 0};
    return ::poll(&pfd, 1, static_cast<int>(timeout.count())) > 0;
  }

  // Every byte not yet consumed up to the server's close (or the timeout).
  std::string read_to_close() {
    while (fill()) {
    }
    return std::exchange(buffer_, {});
  }

  // True when the server closed the connection (end of stream or reset) within the timeout.
  bool closed_by_server() {
    while (true) {
      pollfd pfd{fd_, POLLIN, 0};
      if (::poll(&pfd, 1, static_cast<int>(timeout_.count())) <= 0) return false;
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return true;
    }
  }

 private:
  bool fill() {
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(timeout_.count())) <= 0) return false;
    char buf[16384];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    buffer_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::chrono::milliseconds timeout_;
  std::string buffer_;
};

// A one-shot signal between a handler thread and the test.
class Latch {
 public:
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait(std::chrono::milliseconds timeout = 5000ms) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

inline HttpServerConfig test_config() {
  HttpServerConfig config;
  config.port = 0;
  config.log_requests = false;
  return config;
}

inline std::unique_ptr<HttpServer> start_server(HttpServerConfig config, std::vector<Route> routes) {
  auto server = HttpServer::start(std::move(config), std::move(routes));
  if (!server.ok()) {
    ADD_FAILURE() << server.status().to_string();
    return nullptr;
  }
  return std::move(server).value();
}

inline Route echo_route(std::string method, std::string path) {
  return {method, path, [](const HttpRequest& request, ResponseWriter& writer) {
            writer.send(200, "text/plain", request.method + " " + request.target + " " + request.body);
          }};
}

inline std::string get(std::string_view path, std::string_view extra_headers = "") {
  return "GET " + std::string(path) + " HTTP/1.1\r\nHost: localhost\r\n" + std::string(extra_headers) + "\r\n";
}

inline std::string post(std::string_view path, std::string_view body, std::string_view extra_headers = "") {
  return "POST " + std::string(path) + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" +
         std::string(extra_headers) + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
         std::string(body);
}

inline bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 5000ms) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return condition();
}

}  // namespace deepinfer::server::http_test
