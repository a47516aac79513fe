// bench serve's client side: SSE framing, the protocols' events, and the runner against small
// HTTP servers that stream, fail, stall or are not there (failures counted, never a hang).
#include <gtest/gtest.h>

#include <thread>

#include "cli/bench_serve_runner.h"
#include "server/http.h"
#include "server/sse_reader.h"

namespace deepinfer::cli {
namespace {

using namespace std::chrono_literals;
namespace bench = server::bench;

TEST(BenchServeSse, EventsSplitAnywhere) {
  const std::string stream = "event: message_start\r\ndata: {\"a\":1}\r\n\r\n: ping\n\ndata: x\ndata: y\n\ndata: [DONE]\n\n";
  for (size_t step : {1, 3, 7, 1000}) {
    server::SseReader reader;
    std::vector<server::SseEvent> events;
    for (size_t i = 0; i < stream.size(); i += step) {
      for (auto& e : reader.feed(std::string_view(stream).substr(i, step))) events.push_back(e);
    }
    ASSERT_EQ(events.size(), 3u) << step;
    EXPECT_EQ(events[0].event, "message_start");
    EXPECT_EQ(events[0].data, "{\"a\":1}");
    EXPECT_EQ(events[1].data, "x\ny");
    EXPECT_EQ(events[2].data, "[DONE]");
  }
}

TEST(BenchServeProtocol, DecodesOpenAiAndAnthropicEvents) {
  auto e = bench::decode_stream_event(bench::Endpoint::kChat, "", R"({"choices":[{"delta":{"content":"hi"}}],"usage":null})");
  EXPECT_EQ(e.kind, bench::StreamEvent::Kind::kChoice);
  EXPECT_EQ(e.text, "hi");
  e = bench::decode_stream_event(bench::Endpoint::kCompletions, "", R"({"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":9}})");
  EXPECT_EQ(e.kind, bench::StreamEvent::Kind::kUsage);
  EXPECT_EQ(e.completion_tokens, 9);
  EXPECT_EQ(bench::decode_stream_event(bench::Endpoint::kChat, "", "[DONE]").kind, bench::StreamEvent::Kind::kDone);
  e = bench::decode_stream_event(bench::Endpoint::kChat, "", R"({"error":{"message":"cut short"}})");
  EXPECT_EQ(e.kind, bench::StreamEvent::Kind::kError);
  EXPECT_EQ(e.error, "cut short");
  EXPECT_EQ(bench::decode_stream_event(bench::Endpoint::kChat, "", "{not json").kind, bench::StreamEvent::Kind::kError);
  e = bench::decode_stream_event(bench::Endpoint::kMessages, "content_block_delta",
                                 R"({"type":"content_block_delta","delta":{"type":"text_delta","text":"yo"}})");
  EXPECT_EQ(e.kind, bench::StreamEvent::Kind::kChoice);
  EXPECT_EQ(e.text, "yo");
  e = bench::decode_stream_event(bench::Endpoint::kMessages, "message_delta", R"({"type":"message_delta","usage":{"output_tokens":12}})");
  EXPECT_EQ(e.completion_tokens, 12);
  EXPECT_EQ(bench::error_message(R"({"type":"error","error":{"type":"overloaded_error","message":"busy"}})"), "busy");
  EXPECT_EQ(bench::error_message("plain text"), "plain text");
}

TEST(BenchServeProtocol, TokenizeAnswersOfBothForms) {
  auto ids = bench::decode_tokenize(R"({"count":2,"max_model_len":8192,"tokens":[5,7]})");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{5, 7}));
  ids = bench::decode_tokenize(R"({"tokens":[{"id":3,"piece":"a"}]})");  // llama.cpp with pieces
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, std::vector<int32_t>{3});
  EXPECT_FALSE(bench::decode_tokenize(R"({"tokens":["x"]})").ok());
  EXPECT_EQ(*bench::decode_detokenize(R"({"content":"abc"})"), "abc");
  EXPECT_EQ(*bench::decode_detokenize(R"({"prompt":"abc"})"), "abc");
  EXPECT_EQ(*bench::decode_first_model(R"({"data":[{"id":"m1"},{"id":"m2"}]})"), "m1");
}

TEST(BenchServeProtocol, Urls) {
  auto u = server::parse_http_url("http://localhost:8080/api/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "localhost");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->base_path, "/api");
  u = server::parse_http_url("http://[::1]:9");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_FALSE(server::parse_http_url("https://x").ok());
  EXPECT_FALSE(server::parse_http_url("http://x:99999").ok());
  EXPECT_FALSE(server::parse_http_url("localhost:80").ok());
}

// A server whose /v1/completions does what `handler` says.
struct FakeServer {
  explicit FakeServer(server::Handler handler) {
    server::HttpServerConfig config;
    config.port = 0;
    config.log_requests = false;
    http = std::move(server::HttpServer::start(config, {{"POST", "/v1/completions", std::move(handler)}})).value();
  }
  ~FakeServer() {
    http->shutdown(1s);
    http->wait();
  }
  server::HttpClient client() const { return server::HttpClient({"127.0.0.1", http->port(), ""}); }
  std::unique_ptr<server::HttpServer> http;
};

std::vector<Job> jobs(size_t n) {
  std::vector<Job> out(n);
  for (Job& j : out) j.requests.push_back({{{"user", "hello"}}, 5, 3});
  return out;
}

RunOptions quick_options() {
  RunOptions o;
  o.model = std::string(1, 'm');  // not = "m": GCC 12 warns (-Wrestrict, a false positive)
  o.max_concurrency = 2;
  o.request_timeout = 2s;
  o.progress = false;
  return o;
}

TEST(BenchServeRunner, TimesEveryStreamedEvent) {
  FakeServer fake([](const server::HttpRequest&, server::ResponseWriter& w) {
    w.start_stream(200, "text/event-stream");
    for (const char* text : {"a", "b", "c"}) {
      std::this_thread::sleep_for(40ms);
      w.write(std::string("data: {\"choices\":[{\"text\":\"") + text + "\"}]}\n\n");
    }
    w.write("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n");
    w.finish();
  });
  auto client = fake.client();
  RunResult r = run_jobs(client, jobs(3), {0, 0, 0}, quick_options());
  ASSERT_EQ(r.outcomes.size(), 3u);
  for (const RequestOutcome& o : r.outcomes) {
    ASSERT_TRUE(o.success) << o.error;
    EXPECT_GE(o.ttft, 0.035);
    ASSERT_EQ(o.itl.size(), 2u);
    // Each gap is at least the server's 40 ms unless the client reads two events late and at
    // once on a loaded machine (this test failed once under ctest -j2 beside heavy tests; the
    // assertion was not captured), so only their order and the last event's arrival, at least
    // 120 ms in, are certain.
    for (double gap : o.itl) EXPECT_GE(gap, 0.0);
    EXPECT_GE(o.latency, 0.115);
    EXPECT_NEAR(o.latency, o.ttft + o.itl[0] + o.itl[1], 1e-6);  // completions end at the last choice
    EXPECT_EQ(o.output_len, 3);
    EXPECT_EQ(o.generated_text, "abc");
  }
  EXPECT_GE(r.duration_s, 0.24);  // two workers, three requests: two rounds of 120 ms
}

TEST(BenchServeRunner, ErrorsAreCountedWithTheirMessage) {
  FakeServer fake([](const server::HttpRequest&, server::ResponseWriter& w) {
    w.send(503, "application/json", R"({"error":{"message":"overloaded","type":"server_error"}})");
  });
  auto client = fake.client();
  RunResult r = run_jobs(client, jobs(4), {0, 0, 0, 0}, quick_options());
  ASSERT_EQ(r.outcomes.size(), 4u);
  for (const RequestOutcome& o : r.outcomes) {
    EXPECT_FALSE(o.success);
    EXPECT_EQ(o.error, "HTTP 503: overloaded");
  }
  ServeMetrics m = compute_metrics(r.outcomes, r.duration_s, Slo{}, {99});
  EXPECT_EQ(m.failed, 4);
  EXPECT_EQ(m.completed, 0);
}

TEST(BenchServeRunner, AStalledStreamTimesOut) {
  FakeServer fake([](const server::HttpRequest&, server::ResponseWriter& w) {
    w.start_stream(200, "text/event-stream");
    w.write("data: {\"choices\":[{\"text\":\"a\"}]}\n\n");
    for (int i = 0; i < 300 && !w.client_gone(); ++i) std::this_thread::sleep_for(10ms);
    w.finish();
  });
  auto client = fake.client();
  RunOptions o = quick_options();
  o.request_timeout = 300ms;
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = run_jobs(client, jobs(2), {0, 0}, o);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  for (const RequestOutcome& out : r.outcomes) {
    EXPECT_FALSE(out.success);
    EXPECT_NE(out.error.find("timed out"), std::string::npos) << out.error;
  }
}

TEST(BenchServeRunner, ARefusedConnectionFailsFast) {
  uint16_t port = 0;
  {
    FakeServer fake([](const server::HttpRequest&, server::ResponseWriter& w) { w.send(200, "text/plain", ""); });
    port = fake.http->port();
  }
  server::HttpClient client({"127.0.0.1", port, ""});
  RunResult r = run_jobs(client, jobs(3), {0, 0, 0}, quick_options());
  for (const RequestOutcome& o : r.outcomes) {
    EXPECT_FALSE(o.success);
    EXPECT_NE(o.error.find("cannot connect"), std::string::npos) << o.error;
  }
}

TEST(BenchServeRunner, ASessionStopsAtItsFirstFailure) {
  FakeServer fake([](const server::HttpRequest&, server::ResponseWriter& w) { w.send(500, "application/json", "{}"); });
  auto client = fake.client();
  Job session;
  session.chained = true;
  session.requests = {{{{"user", "a"}}, 1, 2}, {{{"user", "b"}}, 1, 2}};
  RunResult r = run_jobs(client, {session}, {0}, quick_options());
  ASSERT_EQ(r.outcomes.size(), 2u);
  EXPECT_NE(r.outcomes[0].error.find("HTTP 500"), std::string::npos);
  EXPECT_NE(r.outcomes[1].error.find("not sent"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::cli
