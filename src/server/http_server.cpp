// HttpServer: one Asio thread accepts; every connection gets a thread of its own (our scale is
// hundreds of connections, and a handler may block for a whole streamed generation).
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <list>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "server/http_connection.h"

namespace deepinfer::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr std::chrono::milliseconds kReapInterval{1000};
constexpr std::chrono::milliseconds kAcceptRetry{100};
// How long handlers cut at the end of a shutdown's grace have to stop before their sockets are
// aborted: generating handlers look at their client every poll interval (50 ms by default).
constexpr std::chrono::milliseconds kWindUp{1000};

// Set on connection threads: shutdown() called from a handler must not join its own thread.
thread_local bool t_on_connection_thread = false;

class HttpServerImpl final : public HttpServer {
 public:
  HttpServerImpl(HttpServerConfig config, std::vector<Route> routes)
      : acceptor_(io_), reap_timer_(io_), retry_timer_(io_) {
    context_.config = std::move(config);
    for (Route& route : routes) context_.routes_by_path[route.path].push_back(std::move(route));
  }

  ~HttpServerImpl() override {
    if (io_thread_.joinable()) shutdown(std::chrono::milliseconds(0));
    if (shutdown_thread_.joinable()) shutdown_thread_.join();
    if (context_.wake_fd >= 0) ::close(context_.wake_fd);
  }

  Status listen() {
    context_.wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (context_.wake_fd < 0) return unavailable("http: cannot create an eventfd");
    const std::string& host = context_.config.host;
    std::string where = host + ":" + std::to_string(context_.config.port);
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(host, std::to_string(context_.config.port),
                                      tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || endpoints.empty()) return unavailable("http: cannot resolve " + where + ": " + ec.message());
    tcp::endpoint endpoint = endpoints.begin()->endpoint();
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return unavailable("http: cannot listen on " + where + ": " + ec.message());
    port_ = acceptor_.local_endpoint().port();
    accept_next();
    schedule_reap();
    io_thread_ = std::thread([this] { io_.run(); });
    return Status::ok_status();
  }

  uint16_t port() const override { return port_; }

  void shutdown(std::chrono::milliseconds grace) override {
    {
      std::unique_lock lock(mutex_);
      if (shutdown_started_) {
        if (!t_on_connection_thread) done_cv_.wait(lock, [&] { return shutdown_done_; });
        return;
      }
      shutdown_started_ = true;
      context_.stopping.store(true);  // before returning, so that the caller's answer says close
      if (t_on_connection_thread) {
        // The caller's own thread is among those to join: finish on a thread of our own.
        shutdown_thread_ = std::thread([this, grace] { run_shutdown(grace); });
        return;
      }
    }
    run_shutdown(grace);
  }

  void wait() override {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return shutdown_done_; });
  }

  int64_t n_open_connections() const override { return n_open_.load(); }

 private:
  struct Slot {
    std::thread thread;
    std::unique_ptr<Socket> socket;
    bool done = false;  // guarded by the server's mutex_
  };

  void accept_next() {
    acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
      if (!acceptor_.is_open()) return;
      if (ec) {
        // Out of descriptors and the like: back off instead of spinning on the error.
        retry_timer_.expires_after(kAcceptRetry);
        retry_timer_.async_wait([this](const boost::system::error_code& e) {
          if (!e && acceptor_.is_open()) accept_next();
        });
        return;
      }
      on_accept(std::move(socket));
      accept_next();
    });
  }

  void on_accept(tcp::socket socket) {
    boost::system::error_code ec;
    // SSE events are small writes that must leave at once.
    socket.set_option(tcp::no_delay(true), ec);
    auto endpoint = socket.remote_endpoint(ec);
    std::string remote = ec ? "?" : endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
    auto socket_ptr = std::make_unique<Socket>(socket.release(ec));
    if (ec) return;
    reap(/*only_done=*/true);
    if (n_open_.load() >= context_.config.max_connections) return reject_overloaded(*socket_ptr, remote);

    n_open_.fetch_add(1);
    auto slot = std::make_unique<Slot>();
    Slot* raw = slot.get();
    raw->socket = std::move(socket_ptr);
    std::lock_guard lock(mutex_);
    slots_.push_back(std::move(slot));
    raw->thread = std::thread([this, raw, remote = std::move(remote), accepted_at = Clock::now()]() mutable {
      t_on_connection_thread = true;
      serve_connection(context_, *raw->socket, std::move(remote), accepted_at);
      raw->socket->close();
      n_open_.fetch_sub(1);
      std::lock_guard done_lock(mutex_);
      raw->done = true;
      slots_cv_.notify_all();
    });
  }

  // On the accept thread: a short answer into an empty send buffer never blocks.
  void reject_overloaded(Socket& socket, const std::string& remote) {
    HttpRequest request;
    request.remote = remote;
    std::string message = "too many connections (" + std::to_string(context_.config.max_connections) + ")";
    std::string response = error_response(context_, request, 503, message);
    socket.send_all(response.data(), response.size(), Clock::now());
    socket.linger_close(std::chrono::milliseconds(0));
    if (context_.config.log_requests) {
      std::fprintf(stderr, "http: %s - - 503 %zuB 0.0ms\n", remote.c_str(), response.size());
    }
  }

  void schedule_reap() {
    reap_timer_.expires_after(kReapInterval);
    reap_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || !acceptor_.is_open()) return;
      reap(/*only_done=*/true);
      schedule_reap();
    });
  }

  // Under mutex_.
  bool all_done() const {
    for (const auto& slot : slots_) {
      if (!slot->done) return false;
    }
    return true;
  }

  // Joins the threads of finished connections (all of them when `only_done` is false).
  void reap(bool only_done) {
    std::list<std::unique_ptr<Slot>> finished;
    {
      std::lock_guard lock(mutex_);
      for (auto it = slots_.begin(); it != slots_.end();) {
        if ((*it)->done || !only_done) {
          finished.push_back(std::move(*it));
          it = slots_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& slot : finished) slot->thread.join();
  }

  void run_shutdown(std::chrono::milliseconds grace) {
    auto deadline = Clock::now() + grace;
    context_.stopping.store(true);
    // The port closes now: close the acceptor on its own thread, then let that thread end.
    asio::post(io_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      reap_timer_.cancel();
      retry_timer_.cancel();
      io_.stop();
    });
    if (io_thread_.joinable()) io_thread_.join();
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(context_.wake_fd, &one, sizeof(one));  // idle connections close

    {
      std::unique_lock lock(mutex_);
      slots_cv_.wait_until(lock, deadline, [&] { return all_done(); });
      // Past the grace: whoever is still at work is asked to stop (its writer reports the client
      // gone) and its connection ends the answer with an error event; a handler that does not
      // notice within kWindUp has its socket aborted, so that its writes fail.
      for (auto& slot : slots_) {
        if (!slot->done) slot->socket->cut();
      }
      slots_cv_.wait_for(lock, kWindUp, [&] { return all_done(); });
      for (auto& slot : slots_) {
        if (!slot->done) slot->socket->abort();
      }
    }
    reap(/*only_done=*/false);
    {
      std::lock_guard lock(mutex_);
      shutdown_done_ = true;
    }
    done_cv_.notify_all();
  }

  ServerContext context_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer reap_timer_;
  asio::steady_timer retry_timer_;
  std::thread io_thread_;
  std::thread shutdown_thread_;
  uint16_t port_ = 0;
  std::atomic<int64_t> n_open_{0};

  std::mutex mutex_;
  std::condition_variable slots_cv_;  // a connection finished
  std::condition_variable done_cv_;   // shutdown finished
  std::list<std::unique_ptr<Slot>> slots_;
  bool shutdown_started_ = false;
  bool shutdown_done_ = false;
};

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::start(HttpServerConfig config, std::vector<Route> routes) {
  auto server = std::make_unique<HttpServerImpl>(std::move(config), std::move(routes));
  DI_RETURN_IF_ERROR(server->listen());
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace deepinfer::server
