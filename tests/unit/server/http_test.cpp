// The HTTP transport against real sockets on 127.0.0.1, driven by a small blocking client that
// sees exactly the bytes on the wire.
#include "server/http.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <future>

#include "http_test_client.h"

namespace deepinfer::server {
namespace {

using namespace http_test;

TEST(Http, KeepAliveServesSeveralRequestsOnOneConnection) {
  auto server = start_server(test_config(), {echo_route("GET", "/a"), echo_route("POST", "/b")});
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  ASSERT_TRUE(client.connected());
  for (int i = 0; i < 3; ++i) {
    client.send(get("/a?i=" + std::to_string(i)));
    Response r = client.read_response();
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, "GET /a?i=" + std::to_string(i) + " ");
    ASSERT_NE(r.header("connection"), nullptr);
    EXPECT_EQ(*r.header("connection"), "keep-alive");
  }
  // Pipelined: two requests in one write, answered in order.
  client.send(post("/b", "one") + post("/b", "two"));
  EXPECT_EQ(client.read_response().body, "POST /b one");
  EXPECT_EQ(client.read_response().body, "POST /b two");
  EXPECT_EQ(server->n_open_connections(), 1);

  // Connection: close is honoured: answered, then closed.
  client.send(get("/a", "Connection: close\r\n"));
  Response last = client.read_response();
  EXPECT_EQ(last.status, 200);
  EXPECT_EQ(*last.header("connection"), "close");
  EXPECT_TRUE(client.closed_by_server());
}

TEST(Http, HttpOneZeroClosesUnlessAskedToKeepAlive) {
  auto server = start_server(test_config(), {echo_route("GET", "/a")});
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.send("GET /a HTTP/1.0\r\n\r\n");
  EXPECT_EQ(client.read_response().status, 200);
  EXPECT_TRUE(client.closed_by_server());
}

TEST(Http, StreamedResponseArrivesInPieces) {
  Latch first_seen;
  std::atomic<bool> second_ok{false};
  Route route{"POST", "/stream", [&](const HttpRequest&, ResponseWriter& writer) {
                ASSERT_TRUE(writer.start_stream(200, "text/event-stream"));
                ASSERT_TRUE(writer.write("data: first\n\n"));
                // The second event is written only once the client has shown it got the first.
                if (!first_seen.wait()) return;
                second_ok = writer.write("data: second\n\n");
                writer.finish();
              }};
  auto server = start_server(test_config(), {route});
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.send(post("/stream", "{}"));
  Response head = client.read_response(/*head_only=*/true);
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(*head.header("content-type"), "text/event-stream");
  EXPECT_EQ(*head.header("transfer-encoding"), "chunked");
  EXPECT_EQ(client.read_chunk(), "data: first\n\n");
  first_seen.open();
  EXPECT_EQ(client.read_chunk(), "data: second\n\n");
  EXPECT_EQ(client.read_chunk(), "");
  EXPECT_TRUE(second_ok);
  // The connection stays usable after a stream.
  client.send(post("/stream", "{}"));
  EXPECT_EQ(client.read_response().body, "data: first\n\ndata: second\n\n");
}

TEST(Http, ClientGoneAfterClientClosesMidStream) {
  std::atomic<bool> saw_gone{false};
  std::atomic<bool> write_failed{false};
  Latch handler_done;
  Route route{"GET", "/stream", [&](const HttpRequest&, ResponseWriter& writer) {
                writer.start_stream(200, "text/event-stream");
                writer.write("data: x\n\n");
                auto deadline = Clock::now() + 5s;
                while (Clock::now() < deadline && !writer.client_gone()) std::this_thread::sleep_for(2ms);
                saw_gone = writer.client_gone();
                // Large writes into a closed connection fail instead of killing the process.
                std::string big(1 << 16, 'y');
                for (int i = 0; i < 100 && !write_failed; ++i) write_failed = !writer.write(big);
                handler_done.open();
              }};
  auto server = start_server(test_config(), {route});
  ASSERT_NE(server, nullptr);
  {
    Client client(server->port());
    client.send(get("/stream"));
    ASSERT_EQ(client.read_response(/*head_only=*/true).status, 200);
    ASSERT_EQ(client.read_chunk(), "data: x\n\n");
  }
  ASSERT_TRUE(handler_done.wait());
  EXPECT_TRUE(saw_gone);
  EXPECT_TRUE(write_failed);
  EXPECT_TRUE(wait_until([&] { return server->n_open_connections() == 0; }));
}

TEST(Http, ClientGoneIsFalseWhileTheClientWaitsWithAPipelinedRequest) {
  std::atomic<int> gone_reports{0};
  Route route{"POST", "/p", [&](const HttpRequest& request, ResponseWriter& writer) {
                std::this_thread::sleep_for(50ms);  // let the pipelined request arrive
                if (writer.client_gone()) ++gone_reports;
                writer.send(200, "text/plain", request.body);
              }};
  auto server = start_server(test_config(), {route});
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.send(post("/p", "1") + post("/p", "2"));
  EXPECT_EQ(client.read_response().body, "1");
  EXPECT_EQ(client.read_response().body, "2");
  EXPECT_EQ(gone_reports, 0);
}

TEST(Http, ApiKeysAreRequiredOutsidePublicPaths) {
  HttpServerConfig config = test_config();
  config.api_keys = {"sk-first", "sk-second"};
  auto server = start_server(config, {echo_route("GET", "/v1/models"), echo_route("GET", "/health")});
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  auto status_with = [&](std::string_view headers) {
    client.send(get("/v1/models", headers));
    return client.read_response().status;
  };
  EXPECT_EQ(status_with(""), 401);
  EXPECT_EQ(status_with("Authorization: Bearer sk-wrong\r\n"), 401);
  EXPECT_EQ(status_with("Authorization: Bearer sk-firs\r\n"), 401);
  EXPECT_EQ(status_with("Authorization: Bearer sk-first-and-more\r\n"), 401);
  EXPECT_EQ(status_with("Authorization: sk-first\r\n"), 401);
  EXPECT_EQ(status_with("x-api-key: nope\r\n"), 401);
  EXPECT_EQ(status_with("Authorization: Bearer sk-first\r\n"), 200);
  EXPECT_EQ(status_with("Authorization: bearer sk-second\r\n"), 200);
  EXPECT_EQ(status_with("X-Api-Key: sk-second\r\n"), 200);
  client.send(get("/health"));
  EXPECT_EQ(client.read_response().status, 200);

  // The 401 is a JSON error and the connection survives it.
  client.send(get("/v1/models"));
  Response r = client.read_response();
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(*r.header("content-type"), "application/json");
  EXPECT_NE(r.body.find("API key"), std::string::npos);

  // Without keys configured, nothing is asked.
  auto open_server = start_server(test_config(), {echo_route("GET", "/v1/models")});
  ASSERT_NE(open_server, nullptr);
  Client open_client(open_server->port());
  open_client.send(get("/v1/models"));
  EXPECT_EQ(open_client.read_response().status, 200);
}

TEST(Http, BodyOverTheLimitGets413WithoutBeingRead) {
  HttpServerConfig config = test_config();
  config.max_body_bytes = 1000;
  std::atomic<int> calls{0};
  Route route{"POST", "/up", [&](const HttpRequest&, ResponseWriter& writer) {
                ++calls;
                writer.send(200, "text/plain", "ok");
              }};
  auto server = start_server(config, {route});
  ASSERT_NE(server, nullptr);
  {
    // Only the head is sent: the answer cannot depend on reading a 100 MB body.
    Client client(server->port());
    client.send("POST /up HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000000\r\n\r\n");
    Response r = client.read_response();
    EXPECT_EQ(r.status, 413);
    EXPECT_TRUE(client.closed_by_server());
  }
  {
    // A chunked body that grows past the limit.
    Client client(server->port());
    std::string chunk(600, 'z');
    client.send("POST /up HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n" + chunk + "\r\n258\r\n" +
                chunk + "\r\n0\r\n\r\n");
    EXPECT_EQ(client.read_response().status, 413);
  }
  Client client(server->port());
  client.send(post("/up", std::string(1000, 'a')));
  EXPECT_EQ(client.read_response().status, 200);
  EXPECT_EQ(calls, 1);
}

TEST(Http, HeadersOverTheLimitGet431) {
  HttpServerConfig config = test_config();
  config.max_header_bytes = 1024;
  auto server = start_server(config, {echo_route("GET", "/a")});
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.send(get("/a", "X-Big: " + std::string(4000, 'h') + "\r\n"));
  EXPECT_EQ(client.read_response().status, 431);
  EXPECT_TRUE(client.closed_by_server());

  Client ok(server->port());
  ok.send(get("/a", "X-Small: " + std::string(500, 'h') + "\r\n"));
  EXPECT_EQ(ok.read_response().status, 200);
}

TEST(Http, SlowClientGets408WhileOthersAreServed) {
  HttpServerConfig config = test_config();
  config.read_timeout = 1000ms;
  auto server = start_server(config, {echo_route("GET", "/a")});
  ASSERT_NE(server, nullptr);
  auto start = Clock::now();
  Client slow(server->port());
  slow.send("GET /a HTTP/1.1\r\nHost: localhost\r\nX-Half: ");

  Client other(server->port());
  for (int i = 0; i < 3; ++i) {
    other.send(get("/a"));
    EXPECT_EQ(other.read_response().status, 200);
  }
  EXPECT_LT(Clock::now() - start, 900ms) << "the other client waited on the slow one";

  Response r = slow.read_response();
  auto elapsed = Clock::now() - start;
  EXPECT_EQ(r.status, 408);
  EXPECT_GE(elapsed, 950ms);
  EXPECT_LT(elapsed, 3000ms);
  EXPECT_TRUE(slow.closed_by_server());
}

TEST(Http, IdleKeepAliveConnectionIsClosedAfterIdleTimeout) {
  HttpServerConfig config = test_config();
  config.idle_timeout = 200ms;
  auto server = start_server(config, {echo_route("GET", "/a")});
  ASSERT_NE(server, nullptr);
  Client client(server->port(), 3000ms);
  client.send(get("/a"));
  EXPECT_EQ(client.read_response().status, 200);
  auto start = Clock::now();
  EXPECT_TRUE(client.closed_by_server());
  EXPECT_LT(Clock::now() - start, 1500ms);
  EXPECT_TRUE(wait_until([&] { return server->n_open_connections() == 0; }));
}

TEST(Http, MalformedRequestGets400AndClose) {
  auto server = start_server(test_config(), {echo_route("GET", "/a")});
  ASSERT_NE(server, nullptr);
  for (std::string bad : {"NOT HTTP AT ALL\r\n\r\n", "GET /a HTTP/1.1\r\nBad Header Line\r\n\r\n",
                          "POST /a HTTP/1.1\r\nContent-Length: abc\r\n\r\n"}) {
    Client client(server->port());
    client.send(bad);
    EXPECT_EQ(client.read_response().status, 400) << bad;
    EXPECT_TRUE(client.closed_by_server()) << bad;
  }
}

TEST(Http, UnknownPathIs404AndWrongMethodIs405WithAllow) {
  auto server =
      start_server(test_config(), {echo_route("POST", "/v1/chat/completions"), echo_route("GET", "/v1/models")});
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.send(get("/nowhere"));
  Response missing = client.read_response();
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(missing.body, "{\"error\":{\"message\":\"no route for /nowhere\",\"code\":404}}");
  client.send(get("/v1/chat/completions"));
  Response r = client.read_response();
  EXPECT_EQ(r.status, 405);
  ASSERT_NE(r.header("allow"), nullptr);
  EXPECT_EQ(*r.header("allow"), "POST");  // no OPTIONS: CORS is off by default
  client.send(post("/v1/models", "{}"));
  r = client.read_response();
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(*r.header("allow"), "GET, HEAD");
}

TEST(Http, HeadAnswersAGetRouteWithoutBody) {
  auto server = start_server(test_config(), {echo_route("GET", "/a")});
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.send("HEAD /a HTTP/1.1\r\nHost: localhost\r\n\r\n");
  Response r = client.read_response(/*head_only=*/true);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(*r.header("content-length"), "8");  // the length of "HEAD /a ", which is not sent
  client.send(get("/a"));
  EXPECT_EQ(client.read_response().body, "GET /a ");
}

TEST(Http, HeadWithAMalformedBodyGetsA400WithoutBody) {
  // The fuzzer's find: the 400 for a broken chunked body carried its JSON body even to HEAD, so
  // a client took those bytes for the next response.
  auto server = start_server(test_config(), {echo_route("GET", "/a")});
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.send("HEAD /a HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n2;ext\r=\n");
  Response r = client.read_response(/*head_only=*/true);
  EXPECT_EQ(r.status, 400);
  ASSERT_NE(r.header("content-length"), nullptr);
  EXPECT_NE(*r.header("content-length"), "0");
  EXPECT_EQ(client.read_to_close(), "");
}

TEST(Http, CorsPreflightNeedsNoKeyAndResponsesCarryTheListedOrigin) {
  HttpServerConfig config = test_config();
  config.api_keys = {"k"};
  config.allowed_origins = {"http://ui:3000/"};  // a trailing slash as users paste it
  auto server = start_server(config, {echo_route("POST", "/v1/messages")});
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.send("OPTIONS /v1/messages HTTP/1.1\r\nHost: localhost\r\nOrigin: http://ui:3000\r\n"
              "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type, x-api-key\r\n\r\n");
  Response r = client.read_response();
  EXPECT_EQ(r.status, 204);
  EXPECT_EQ(*r.header("access-control-allow-origin"), "http://ui:3000");
  EXPECT_EQ(*r.header("vary"), "Origin");
  EXPECT_EQ(*r.header("access-control-allow-methods"), "GET, POST, OPTIONS");
  EXPECT_EQ(*r.header("access-control-allow-headers"), "content-type, x-api-key");
  EXPECT_NE(r.header("access-control-max-age"), nullptr);
  EXPECT_EQ(r.header("content-length"), nullptr);

  client.send("OPTIONS /v1/messages HTTP/1.1\r\nHost: localhost\r\nOrigin: http://ui:3000\r\n"
              "Access-Control-Request-Method: POST\r\n\r\n");
  r = client.read_response();
  EXPECT_EQ(r.status, 204);
  EXPECT_NE(r.header("access-control-allow-headers")->find("anthropic-version"), std::string::npos);

  client.send(post("/v1/messages", "{}", "Origin: http://ui:3000\r\nx-api-key: k\r\n"));
  r = client.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(*r.header("access-control-allow-origin"), "http://ui:3000");
  // The page can read its 401 too.
  client.send(get("/v1/messages", "Origin: http://ui:3000\r\n"));
  r = client.read_response();
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(*r.header("access-control-allow-origin"), "http://ui:3000");
  // Another origin is not this one; a preflight without Origin is no preflight.
  client.send(get("/v1/messages", "Origin: http://ui:3001\r\nx-api-key: k\r\n"));
  EXPECT_EQ(client.read_response().status, 403);
  Client again(server->port());
  again.send("OPTIONS /v1/messages HTTP/1.1\r\nHost: localhost\r\nx-api-key: k\r\n\r\n");
  r = again.read_response();
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(*r.header("allow"), "POST, OPTIONS");

  HttpServerConfig any = test_config();
  any.allowed_origins = {"*"};
  auto open_server = start_server(any, {echo_route("POST", "/v1/messages")});
  ASSERT_NE(open_server, nullptr);
  Client open_client(open_server->port());
  open_client.send(post("/v1/messages", "{}", "Origin: http://anywhere.example\r\n"));
  r = open_client.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(*r.header("access-control-allow-origin"), "*");
  EXPECT_EQ(r.header("vary"), nullptr);

  // By default there is no CORS at all: OPTIONS is a method like any other.
  auto plain = start_server(test_config(), {echo_route("POST", "/v1/messages")});
  ASSERT_NE(plain, nullptr);
  Client plain_client(plain->port());
  plain_client.send("OPTIONS /v1/messages HTTP/1.1\r\nHost: localhost\r\n\r\n");
  r = plain_client.read_response();
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(*r.header("allow"), "POST");
  EXPECT_EQ(r.header("access-control-allow-origin"), nullptr);
}

TEST(Http, ErrorBodyHookShapesTransportErrors) {
  HttpServerConfig config = test_config();
  config.error_body = [](const HttpRequest& request, int status, std::string_view message) {
    return "{\"path\":\"" + request.path + "\",\"status\":" + std::to_string(status) + "}";
  };
  auto server = start_server(config, {echo_route("GET", "/a")});
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.send(get("/v1/messages"));
  EXPECT_EQ(client.read_response().body, "{\"path\":\"/v1/messages\",\"status\":404}");
}

TEST(Http, HandlerThatDoesNotAnswerOrThrowsGets500) {
  Route silent{"GET", "/silent", [](const HttpRequest&, ResponseWriter&) {}};
  Route thrower{"GET", "/throw", [](const HttpRequest&, ResponseWriter&) { throw std::runtime_error("boom"); }};
  auto server = start_server(test_config(), {silent, thrower});
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.send(get("/silent"));
  EXPECT_EQ(client.read_response().status, 500);
  client.send(get("/throw"));
  EXPECT_EQ(client.read_response().status, 500);
}

TEST(Http, ClientsThatLeaveBeforeTheAnswerAreLogged499Not500) {
  std::mutex mutex;
  std::vector<std::string> lines;
  Latch silent_done, stream_done;
  HttpServerConfig config = test_config();
  config.log_requests = true;
  config.log_sink = [&](std::string_view line) {
    std::lock_guard lock(mutex);
    lines.emplace_back(line);
  };
  // As a generating handler does: wait for the answer, give up once the client is gone.
  auto wait_for_client = [](ResponseWriter& writer) {
    auto deadline = Clock::now() + 5s;
    while (Clock::now() < deadline && !writer.client_gone()) std::this_thread::sleep_for(2ms);
  };
  Route silent{"GET", "/silent", [&](const HttpRequest&, ResponseWriter& writer) {
                 wait_for_client(writer);
                 silent_done.open();
               }};
  Route stream{"GET", "/stream", [&](const HttpRequest&, ResponseWriter& writer) {
                 writer.start_stream(200, "text/event-stream");
                 writer.write("data: x\n\n");
                 wait_for_client(writer);
                 writer.finish();
                 stream_done.open();
               }};
  auto server = start_server(config, {silent, stream, echo_route("GET", "/a")});
  ASSERT_NE(server, nullptr);
  {
    Client client(server->port());
    client.send(get("/silent"));
    std::this_thread::sleep_for(20ms);  // the handler is waiting
  }
  ASSERT_TRUE(silent_done.wait());
  {
    Client client(server->port());
    client.send(get("/stream"));
    ASSERT_EQ(client.read_response(/*head_only=*/true).status, 200);
    ASSERT_EQ(client.read_chunk(), "data: x\n\n");
  }
  ASSERT_TRUE(stream_done.wait());
  Client client(server->port());
  client.send(get("/a"));
  EXPECT_EQ(client.read_response().status, 200);
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(mutex);
    return lines.size() == 3;
  }));
  std::lock_guard lock(mutex);
  auto line_of = [&](std::string_view path) {
    for (const std::string& line : lines) {
      if (line.find(std::string(" GET ") + std::string(path) + " ") != std::string::npos) return line;
    }
    return std::string();
  };
  EXPECT_NE(line_of("/silent").find(" 499 "), std::string::npos) << line_of("/silent");
  EXPECT_NE(line_of("/stream").find(" 499 "), std::string::npos) << line_of("/stream");
  EXPECT_NE(line_of("/a").find(" 200 "), std::string::npos) << line_of("/a");
  for (const std::string& line : lines) EXPECT_EQ(line.find(" 500 "), std::string::npos) << line;
}

TEST(Http, ExpectContinueGets100BeforeTheBody) {
  auto server = start_server(test_config(), {echo_route("POST", "/b")});
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.send("POST /b HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
  EXPECT_EQ(client.read_response(/*head_only=*/true).status, 100);
  client.send("hello");
  EXPECT_EQ(client.read_response().body, "POST /b hello");
}

TEST(Http, TooManyConnectionsGet503) {
  HttpServerConfig config = test_config();
  config.max_connections = 2;
  auto server = start_server(config, {echo_route("GET", "/a")});
  ASSERT_NE(server, nullptr);
  Client a(server->port());
  Client b(server->port());
  ASSERT_TRUE(wait_until([&] { return server->n_open_connections() == 2; }));
  Client c(server->port());
  EXPECT_EQ(c.read_response().status, 503);
  EXPECT_TRUE(c.closed_by_server());
  a.send(get("/a"));
  EXPECT_EQ(a.read_response().status, 200);
}

TEST(Http, GracefulShutdownFinishesInFlightAndRefusesNew) {
  Latch entered;
  Latch release;
  Route slow{"POST", "/slow", [&](const HttpRequest&, ResponseWriter& writer) {
               entered.open();
               release.wait();
               writer.send(200, "text/plain", "finished");
             }};
  auto server = start_server(test_config(), {slow, echo_route("GET", "/a")});
  ASSERT_NE(server, nullptr);
  uint16_t port = server->port();
  Client busy(port);
  Client idle(port);
  idle.send(get("/a"));
  ASSERT_EQ(idle.read_response().status, 200);
  busy.send(post("/slow", "{}"));
  ASSERT_TRUE(entered.wait());

  auto shutdown = std::async(std::launch::async, [&] { server->shutdown(5000ms); });
  // The port closes at once; the idle keep-alive connection is closed too.
  EXPECT_TRUE(wait_until([&] { return !Client(port).connected(); }, 2000ms));
  EXPECT_TRUE(idle.closed_by_server());
  EXPECT_EQ(shutdown.wait_for(0ms), std::future_status::timeout);

  release.open();
  Response r = busy.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "finished");
  EXPECT_EQ(*r.header("connection"), "close");
  EXPECT_EQ(shutdown.wait_for(3000ms), std::future_status::ready);
  server->wait();
  EXPECT_EQ(server->n_open_connections(), 0);
  server->shutdown(0ms);  // idempotent
}

TEST(Http, ShutdownPastGraceClosesStreamsAndJoinsHandlers) {
  Latch streaming;
  std::atomic<bool> saw_gone{false};
  std::atomic<bool> returned{false};
  Route stream{"GET", "/stream", [&](const HttpRequest&, ResponseWriter& writer) {
                 writer.start_stream(200, "text/event-stream");
                 streaming.open();
                 while (!writer.client_gone()) {
                   writer.write("data: tick\n\n");
                   std::this_thread::sleep_for(5ms);
                 }
                 saw_gone = true;
                 returned = !writer.write("data: late\n\n");
               }};
  auto server = start_server(test_config(), {stream});
  ASSERT_NE(server, nullptr);
  Client client(server->port());
  client.send(get("/stream"));
  ASSERT_TRUE(streaming.wait());
  auto start = Clock::now();
  server->shutdown(100ms);
  EXPECT_LT(Clock::now() - start, 2000ms);
  EXPECT_TRUE(saw_gone);
  EXPECT_TRUE(returned);
  server->wait();
  EXPECT_EQ(server->n_open_connections(), 0);
}

TEST(Http, ConnectionsThatVanishLeaveNothingOpen) {
  auto server = start_server(test_config(), {echo_route("POST", "/b")});
  ASSERT_NE(server, nullptr);
  for (int i = 0; i < 200; ++i) {
    Client client(server->port());
    ASSERT_TRUE(client.connected());
    if (i % 3 == 1) client.send("POST /b HTTP/1.1\r\nHost: localhost\r\n");                      // half a head
    if (i % 3 == 2) client.send("POST /b HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\nab");  // half a body
  }
  EXPECT_TRUE(wait_until([&] { return server->n_open_connections() == 0; }))
      << server->n_open_connections() << " connections still open";
  Client client(server->port());
  client.send(post("/b", "still here"));
  EXPECT_EQ(client.read_response().status, 200);
}

int n_threads() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) n += entry.exists() ? 1 : 0;
  return n;
}

TEST(Http, FinishedConnectionsLeaveNoThreadsBehind) {
  auto server = start_server(test_config(), {echo_route("GET", "/a")});
  ASSERT_NE(server, nullptr);
  int baseline = n_threads();
  for (int i = 0; i < 50; ++i) {
    Client client(server->port());
    client.send(get("/a", "Connection: close\r\n"));
    ASSERT_EQ(client.read_response().status, 200);
  }
  EXPECT_TRUE(wait_until([&] { return n_threads() <= baseline; }))
      << n_threads() << " threads, " << baseline << " before";
}

TEST(Http, ManyConcurrentStreamsEachGetTheirOwnText) {
  Route stream{"POST", "/stream", [](const HttpRequest& request, ResponseWriter& writer) {
                 writer.start_stream(200, "text/event-stream");
                 for (int i = 0; i < 20; ++i) {
                   if (!writer.write(request.body + ":" + std::to_string(i) + ";")) return;
                   std::this_thread::sleep_for(1ms);
                 }
                 writer.finish();
               }};
  auto server = start_server(test_config(), {stream});
  ASSERT_NE(server, nullptr);
  constexpr int kClients = 64;
  std::vector<std::string> bodies(kClients);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      Client client(server->port());
      client.send(post("/stream", "client" + std::to_string(c)));
      bodies[c] = client.read_response().body;
    });
  }
  for (auto& t : threads) t.join();
  for (int c = 0; c < kClients; ++c) {
    std::string expected;
    for (int i = 0; i < 20; ++i) expected += "client" + std::to_string(c) + ":" + std::to_string(i) + ";";
    EXPECT_EQ(bodies[c], expected) << "client " << c;
  }
}

TEST(Http, ShutdownFromAHandlerDoesNotDeadlock) {
  HttpServer* self = nullptr;
  Route quit{"POST", "/quit", [&](const HttpRequest&, ResponseWriter& writer) {
               self->shutdown(2000ms);
               writer.send(200, "text/plain", "bye");
             }};
  auto server = start_server(test_config(), {quit});
  ASSERT_NE(server, nullptr);
  self = server.get();
  Client client(server->port());
  client.send(post("/quit", ""));
  Response r = client.read_response();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(*r.header("connection"), "close");
  auto waited = std::async(std::launch::async, [&] { server->wait(); });
  EXPECT_EQ(waited.wait_for(3000ms), std::future_status::ready);
}

TEST(Http, BindFailureNamesTheAddress) {
  auto first = start_server(test_config(), {});
  ASSERT_NE(first, nullptr);
  HttpServerConfig config = test_config();
  config.port = first->port();
  auto second = HttpServer::start(config, {});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(first->port())), std::string::npos)
      << second.status().message();
}

}  // namespace
}  // namespace deepinfer::server
