// The router's proxy against fake replicas on loopback: raw sockets that answer each request
// with canned bytes, so a test can make a replica die at an exact point of its answer.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "router/router.h"
#include "server/http_client.h"

namespace deepinfer::router {
namespace {

using namespace std::chrono_literals;

// Answers GET /health and /metrics with 200 (/metrics with metrics() where given); a POST gets
// respond(request) written as is, then the connection closes ("" closes it without a byte, as a
// killed process does).
class FakeReplica {
 public:
  explicit FakeReplica(std::function<std::string()> respond, std::function<std::string()> metrics = {})
      : respond_(std::move(respond)), metrics_(std::move(metrics)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd_, 16);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeReplica() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int posts() const { return posts_.load(); }

 private:
  void serve() {
    while (!stop_) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string in;
      char buf[4096];
      size_t head_end = std::string::npos;
      // Bounded: a request of these tests is far below 1 MiB.
      while (head_end == std::string::npos && in.size() < (1u << 20)) {
        ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
        head_end = in.find("\r\n\r\n");
      }
      std::string out;
      if (in.rfind("GET /metrics", 0) == 0 && metrics_) {
        const std::string body = metrics_();
        out = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
              body;
      } else if (in.rfind("GET ", 0) == 0) {
        out = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
      } else {
        posts_.fetch_add(1);
        out = respond_();
      }
      if (!out.empty()) ::send(c, out.data(), out.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  std::function<std::string()> respond_;
  std::function<std::string()> metrics_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> posts_{0};
  std::thread thread_;
};

std::string json_answer(const std::string& body, int status = 200) {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

std::string chunk(const std::string& data) {
  char size[16];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

const char* kSseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";

struct Harness {
  explicit Harness(RouterOptions options) {
    options.port = 0;
    auto r = Router::create(options);
    EXPECT_TRUE(r.ok()) << r.status().message();
    router = std::move(*r);
    router->pool().check_all();
    auto h = server::HttpServer::start(router->http_config(), router->routes());
    EXPECT_TRUE(h.ok()) << h.status().message();
    http = std::move(*h);
  }
  ~Harness() { http->shutdown(0ms); }
  server::HttpClient::Response post(const std::string& path = "/v1/chat/completions",
                                    const std::string& body = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})") {
    server::HttpClient client(*server::parse_http_url("http://127.0.0.1:" + std::to_string(http->port())));
    auto r = client.post(path, body, server::Clock::now() + 10s);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? *r : server::HttpClient::Response{};
  }
  std::unique_ptr<Router> router;
  std::unique_ptr<server::HttpServer> http;
};

RouterOptions two(const FakeReplica& a, const FakeReplica& b) {
  RouterOptions o;
  o.replicas = {a.url(), b.url()};
  o.policy = Policy::kRoundRobin;  // the first request goes to a
  return o;
}

TEST(RouterProxy, FailsOverWhenTheReplicaDiesBeforeAnswering) {
  FakeReplica dead([] { return std::string(); });
  FakeReplica alive([] { return json_answer(R"({"from":"alive"})"); });
  Harness h(two(dead, alive));
  const auto r = h.post();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"from":"alive"})");
  EXPECT_EQ(dead.posts(), 1);
  EXPECT_EQ(alive.posts(), 1);
  EXPECT_FALSE(h.router->pool().snapshot()[0].healthy) << "a replica that dropped the connection is ejected at once";
  EXPECT_EQ(h.router->pool().counters(0).ejections.load(), 1u);
  // Ejected: later requests do not try it again.
  EXPECT_EQ(h.post().status, 200);
  EXPECT_EQ(dead.posts(), 1);
}

TEST(RouterProxy, RefusalMovesOnAndIsPassedOnWhenEveryoneRefuses) {
  FakeReplica busy([] { return json_answer(R"({"error":{"message":"queue full"}})", 429); });
  FakeReplica alive([] { return json_answer(R"({"from":"alive"})"); });
  {
    Harness h(two(busy, alive));
    EXPECT_EQ(h.post().body, R"({"from":"alive"})");
    EXPECT_TRUE(h.router->pool().snapshot()[0].healthy) << "a busy replica is not a dead one";
  }
  FakeReplica busy2([] { return json_answer(R"({"error":{"message":"queue full"}})", 429); });
  Harness h(two(busy, busy2));
  const auto r = h.post();
  EXPECT_EQ(r.status, 429);
  EXPECT_NE(r.body.find("queue full"), std::string::npos);
}

TEST(RouterProxy, StreamsPassThroughAndABreakEndsWithTheProtocolsErrorEvent) {
  const std::string event = "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n";
  FakeReplica breaks([&] { return kSseHead + chunk(event); });  // no last chunk: died mid-stream
  FakeReplica other([] { return json_answer("{}"); });
  Harness h(two(breaks, other));
  const auto r = h.post("/v1/chat/completions", R"({"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body.rfind(event, 0), 0u) << r.body;
  EXPECT_NE(r.body.find("\"error\""), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("mid-stream"), std::string::npos) << r.body;
  EXPECT_EQ(other.posts(), 0) << "a stream with bytes out is never retried (no second generation)";
}

TEST(RouterProxy, AnthropicStreamBreakIsAnErrorEvent) {
  const std::string event = "event: message_start\ndata: {\"type\":\"message_start\"}\n\n";
  FakeReplica breaks([&] { return kSseHead + chunk(event); });
  FakeReplica other([] { return json_answer("{}"); });
  Harness h(two(breaks, other));
  const auto r = h.post("/v1/messages", R"({"model":"m","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_NE(r.body.find("event: error\ndata: {\"type\":\"error\""), std::string::npos) << r.body;
}

TEST(RouterProxy, ASlowReplicaTimesOutWithoutARetry) {
  FakeReplica slow([] {
    std::this_thread::sleep_for(800ms);
    return json_answer("{}");
  });
  FakeReplica other([] { return json_answer("{}"); });
  RouterOptions o = two(slow, other);
  o.request_timeout = 200ms;
  Harness h(o);
  const auto r = h.post();
  EXPECT_EQ(r.status, 504);
  EXPECT_NE(r.body.find("upstream_timeout"), std::string::npos) << r.body;
  EXPECT_EQ(other.posts(), 0) << "the slow replica may still be generating: no second copy";
}

TEST(RouterProxy, NoReplicaIsA503InTheProtocolsShape) {
  FakeReplica dead([] { return std::string(); });
  RouterOptions o;
  o.replicas = {dead.url()};
  Harness h(o);
  const auto first = h.post("/v1/messages", R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(first.status, 502);
  EXPECT_NE(first.body.find("\"type\":\"error\""), std::string::npos) << first.body;
  const auto second = h.post();
  EXPECT_EQ(second.status, 503);
  EXPECT_NE(second.body.find("no_replica"), std::string::npos) << second.body;
}

TEST(ReplicaPool, InFlightLimitAndRelease) {
  FakeReplica a([] { return json_answer("{}"); });
  ReplicaOptions options;
  options.max_in_flight = 1;
  ReplicaPool pool({*server::parse_http_url(a.url())}, {a.url()}, options);
  pool.check_all();
  auto first = pool.acquire(Policy::kCacheAware, {}, {}, {});
  ASSERT_TRUE(first);
  EXPECT_FALSE(pool.acquire(Policy::kCacheAware, {}, {}, {})) << "at its limit";
  pool.release(*first);
  EXPECT_TRUE(pool.acquire(Policy::kCacheAware, {}, {}, {}));
}

TEST(ReplicaPool, PendingPrefillLastsUntilTheFirstByteOrTheEnd) {
  FakeReplica a([] { return json_answer("{}"); });
  ReplicaPool pool({*server::parse_http_url(a.url())}, {a.url()}, {});
  pool.check_all();
  const auto keys = text_block_keys(std::string(640, 'x'));  // 10 blocks, 160 tokens
  auto first = pool.acquire(Policy::kCacheAware, keys, {}, {});
  ASSERT_TRUE(first);
  EXPECT_DOUBLE_EQ(first->prefill_tokens, 160.0);
  EXPECT_DOUBLE_EQ(pool.snapshot()[0].pending_prefill_tokens, 160.0);
  // The same prompt again is expected to hit: it adds nothing to the pending prefill.
  auto again = pool.acquire(Policy::kCacheAware, keys, {}, {});
  ASSERT_TRUE(again);
  EXPECT_DOUBLE_EQ(again->prefill_tokens, 0.0);
  auto other = pool.acquire(Policy::kCacheAware, text_block_keys(std::string(320, 'y')), {}, {});
  ASSERT_TRUE(other);
  EXPECT_DOUBLE_EQ(pool.snapshot()[0].pending_prefill_tokens, 240.0);
  pool.answering(*first);
  pool.answering(*first);  // once only
  EXPECT_DOUBLE_EQ(pool.snapshot()[0].pending_prefill_tokens, 80.0);
  pool.release(*first);  // already answering: nothing more to take off
  EXPECT_DOUBLE_EQ(pool.snapshot()[0].pending_prefill_tokens, 80.0);
  pool.release(*other);  // ended without a byte (an error): its prefill is not pending either
  pool.release(*again);
  EXPECT_DOUBLE_EQ(pool.snapshot()[0].pending_prefill_tokens, 0.0);
  EXPECT_EQ(pool.snapshot()[0].in_flight, 0);
}

// A replica's scrape counts the router's own requests too: once they end, the scrape must not
// keep the replica looking busy (least-load had sent requests to the busier replica that way),
// while requests the scrape shows beyond the router's own (another router's) still count.
TEST(ReplicaPool, AScrapeOfTheRoutersOwnRequestsDoesNotOutliveThem) {
  std::atomic<int> a_running{3}, b_running{1};
  auto metrics_of = [](std::atomic<int>& running) {
    return [&running] { return "deepinfer:num_requests_running " + std::to_string(running.load()) + "\n"; };
  };
  FakeReplica a([] { return json_answer("{}"); }, metrics_of(a_running));
  FakeReplica b([] { return json_answer("{}"); }, metrics_of(b_running));
  ReplicaPool pool({*server::parse_http_url(a.url()), *server::parse_http_url(b.url())}, {a.url(), b.url()}, {});
  pool.check_all();
  std::vector<ReplicaPool::Lease> on_a;
  for (int i = 0; i < 3; ++i) on_a.push_back(*pool.acquire(Policy::kLeastLoad, {}, {}, {1}));
  auto on_b = pool.acquire(Policy::kLeastLoad, {}, {}, {0});
  ASSERT_TRUE(on_b);
  pool.check_all();  // a reports the router's 3, b its 1
  for (auto& lease : on_a) pool.release(lease);
  // a has drained; its last scrape still says 3.
  auto next = pool.acquire(Policy::kLeastLoad, {}, {}, {});
  ASSERT_TRUE(next);
  EXPECT_EQ(next->index, 0u) << "a holds nothing now, b one request";
  // Four requests on a that this router did not send: a is the busier one (1 + 4 against 1).
  a_running = 5;
  pool.check_all();
  auto after = pool.acquire(Policy::kLeastLoad, {}, {}, {});
  ASSERT_TRUE(after);
  EXPECT_EQ(after->index, 1u);
}

TEST(ReplicaPool, ConversationFollowsItsReplica) {
  FakeReplica a([] { return json_answer("{}"); });
  FakeReplica b([] { return json_answer("{}"); });
  ReplicaPool pool({*server::parse_http_url(a.url()), *server::parse_http_url(b.url())}, {a.url(), b.url()}, {});
  pool.check_all();
  const std::string turn1(640, 'x');
  auto l1 = pool.acquire(Policy::kCacheAware, text_block_keys(turn1), {}, {});
  ASSERT_TRUE(l1);
  pool.release(*l1);
  // Another conversation goes elsewhere (least routed), the first one's next turn follows it.
  auto other = pool.acquire(Policy::kCacheAware, text_block_keys(std::string(640, 'y')), {}, {});
  ASSERT_TRUE(other);
  EXPECT_NE(other->index, l1->index);
  pool.release(*other);
  auto l2 = pool.acquire(Policy::kCacheAware, text_block_keys(turn1 + std::string(128, 'z')), {}, {});
  ASSERT_TRUE(l2);
  EXPECT_EQ(l2->index, l1->index);
  EXPECT_EQ(l2->choice.reason, Reason::kCacheHit);
  EXPECT_EQ(l2->choice.matched_blocks, 10u);
}

}  // namespace
}  // namespace deepinfer::router
