#include "router/request_key.h"

#include <gtest/gtest.h>

#include "router/replica_pool.h"

namespace deepinfer::router {
namespace {

TEST(RequestKey, ChatKeyIsAPrefixOfTheNextTurn) {
  const auto turn1 = request_key("/v1/chat/completions",
                                 R"({"model":"m","max_tokens":5,"messages":[{"role":"system","content":"S"},{"role":"user","content":"Q1"}]})");
  const auto turn2 = request_key("/v1/chat/completions",
                                 R"({"stream":true,"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"Q1"},)"
                                 R"({"role":"assistant","content":"A1"},{"role":"user","content":"Q2"}]})");
  ASSERT_FALSE(turn1.text.empty());
  EXPECT_EQ(turn2.text.rfind(turn1.text, 0), 0u) << "sampling fields and field order must not change the key";
  EXPECT_FALSE(turn1.stream);
  EXPECT_TRUE(turn2.stream);
}

TEST(RequestKey, ModelAndSaltSeparateCaches) {
  const char* body = R"({"model":"a","messages":[{"role":"user","content":"hello"}]})";
  const auto a = request_key("/v1/chat/completions", body);
  const auto b = request_key("/v1/chat/completions", R"({"model":"b","messages":[{"role":"user","content":"hello"}]})");
  const auto salted = request_key("/v1/chat/completions",
                                  R"({"model":"a","cache_salt":"t1","messages":[{"role":"user","content":"hello"}]})");
  EXPECT_NE(a.text, b.text);
  EXPECT_NE(salted.text.rfind(a.text, 0), 0u);
}

TEST(RequestKey, MessagesCompletionsAndResponses) {
  const auto m1 = request_key("/v1/messages", R"({"model":"m","system":"S","messages":[{"role":"user","content":[{"type":"text","text":"Q"}]}]})");
  const auto m2 = request_key("/v1/messages", R"({"model":"m","system":"S","messages":[{"role":"user","content":"Q"}]})");
  EXPECT_NE(m1.text.find('Q'), std::string::npos);
  EXPECT_NE(m1.text.find('S'), std::string::npos);
  EXPECT_NE(m2.text.find('Q'), std::string::npos);
  const auto c = request_key("/v1/completions", R"({"model":"m","prompt":"once upon a time"})");
  EXPECT_NE(c.text.find("once upon a time"), std::string::npos);
  const auto r = request_key("/v1/responses", R"({"model":"m","instructions":"I","input":"hello"})");
  EXPECT_NE(r.text.find("hello"), std::string::npos);
}

TEST(RequestKey, BadJsonGivesAnEmptyKey) {
  EXPECT_TRUE(request_key("/v1/chat/completions", "{not json").text.empty());
  EXPECT_TRUE(request_key("/v1/chat/completions", "[1,2]").text.empty());
}

TEST(ReplicaMetrics, ParsesTheGaugesTheRouterUses) {
  const auto s = parse_replica_metrics(
      "# HELP deepinfer:num_requests_running x\n# TYPE deepinfer:num_requests_running gauge\n"
      "deepinfer:num_requests_running 3\ndeepinfer:num_requests_waiting 7\n"
      "deepinfer:kv_cache_usage_perc 0.25\ndeepinfer:kv_cache_group_blocks_used{group=\"full\"} 9\n"
      "deepinfer:prefix_cache_queries_total 1000\ndeepinfer:prefix_cache_hits_total 640\ngarbage line\n");
  EXPECT_EQ(s.running, 3);
  EXPECT_EQ(s.waiting, 7);
  EXPECT_EQ(s.kv_usage, 0.25);
  EXPECT_EQ(s.prefix_queries_total, 1000);
  EXPECT_EQ(s.prefix_hits_total, 640);
}

TEST(ReplicaMetrics, AScrapeAddsOnlyOthersRequestsAndItsKvUsageFollowsTheRequestsLeft) {
  ReplicaScrape s;
  s.running = 6;
  s.waiting = 1;
  s.kv_usage = 0.9;
  // Taken while this router had all 7 there; read after 6 of them ended.
  LoadNow now = load_now(s, 7, 1);
  EXPECT_EQ(now.others_queue, 0);
  EXPECT_NEAR(now.kv_usage, 0.9 / 7, 1e-12);
  // 2 of the 7 were someone else's: they stay (their end is not seen), with their share of KV.
  now = load_now(s, 5, 0);
  EXPECT_EQ(now.others_queue, 2);
  EXPECT_NEAR(now.kv_usage, 0.9 * 2 / 7, 1e-12);
  // More sent since than the scrape counted: the usage is not extrapolated past what it said.
  now = load_now(s, 7, 12);
  EXPECT_EQ(now.kv_usage, 0.9);
  // Nothing counted (blocks of a request just ended, say): the usage as read.
  s.running = s.waiting = 0;
  EXPECT_EQ(load_now(s, 0, 3).kv_usage, 0.9);
}

}  // namespace
}  // namespace deepinfer::router
